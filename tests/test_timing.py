"""The timing wrapper measures real work and reports median and spread."""

from __future__ import annotations

import torch

from torchcontracts.timing import table, time_fn


def test_time_fn_reports_median_spread_and_a_ratio_table():
    small, large = torch.randn(8, 8), torch.randn(256, 256)
    t_small = time_fn(torch.mm, small, small, label="8x8", min_run_time=0.05)
    t_large = time_fn(torch.mm, large, large, label="256x256", min_run_time=0.05)
    print(t_small, t_large, sep="\n")
    assert 0 < t_small.median_s and t_small.runs > 0 and t_large.iqr_s >= 0
    frame = table([t_small, t_large])
    assert list(frame["what"]) == ["8x8", "256x256"] and frame.iloc[0, 3] == 1.0
