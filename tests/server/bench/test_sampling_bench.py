"""`loreguard bench sampling` on the embedded model: every figure it promises, for each N."""

from __future__ import annotations

import pytest

from loreguard.server.bench.sampling import bench_sampling

pytestmark = pytest.mark.model


def test_the_sampling_bench_prints_the_host_work_per_row_for_each_n() -> None:
    figures = bench_sampling(rows=(1, 2), threads=2)
    for n in (1, 2):
        assert figures[f"schema_valid_{n}"] == 1.0  # the grammar holds on every row
        host, choose, masks = (figures[f"{part}_us_per_row_{n}"] for part in ("host", "choose", "masks"))
        assert host > 0 and host == pytest.approx(choose + masks, abs=0.2)  # type: ignore[operator]
        assert 0.0 <= figures[f"masked_row_share_{n}"] <= 1.0  # type: ignore[operator]
        assert 0.0 < figures[f"outside_decode_share_{n}"] < 1.0  # type: ignore[operator]
        assert figures[f"decode_ms_per_step_{n}"] > 0  # type: ignore[operator]
    assert figures["rows_per_step_1"] == 1.0 and 1.0 <= figures["rows_per_step_2"] <= 2.0  # type: ignore[operator]
