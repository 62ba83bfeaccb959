"""Running one interaction through the stages, for `lifecycle` (the orchestrator).

- `preparation`  intake to snapshot: the stages that run once per interaction
- `attempt`      one attempt: prompt -> inference -> gate
- `commit`       an ending planned, recorded and committed, one at a time
- `run_state`    an interaction in flight: its attempts, prompts and receipts so far
- `repair`       a refused reply cut back to the sentences before the refused one, when that passes
- `pacing`       the backend's measured speed, and a first attempt bounded to leave time for a second
- `streaming`    the incremental gate: sentences checked while the line is decoded
- `cancel`       stopping an interaction before it commits (the game, a scene's end, a client gone)
- `judge`        the optional semantic judge
- `config`       the pipeline's settings
- `sink`         the seam to the audit recorder
"""
