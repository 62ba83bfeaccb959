"""`loreguard bench SUITE`: benchmarks that print `name: value` lines, one module per suite.

Figures are medians and percentiles of one run; compare ratios within a run, not absolute
times across machines.

governance   full interactions with the scripted model (and `audit`: with and without the recorder)
sidecar      hello round trips and asyncio clients through a real sidecar (`roundtrip`, `load`)
inference    the embedded model, NPCs with long prefixes, interleaved
concurrency  N NPCs at once through the sidecar vs serial and llama.cpp's batched ceiling
quality      the model's answers to fixed player lines
streaming    streamed vs whole replies on the same interactions
(bundle      a frozen bundle's size and cold start: `loreguard.server.shipping.bench_bundle`)
"""
