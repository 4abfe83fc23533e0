"""The GPU record's comparisons judge their figures with pure functions: fed figures that must fail, they fail.

The comparisons themselves need CUDA (``torchcontracts record``); their verdicts do not. Each test gives a verdict
the figures an H200 is expected to give (they pass) and the figures of the behaviour the comparison exists to rule
out: a synchronous launch, a copy that did not overlap, a bandwidth off by a unit or timed without a synchronize.
"""

from __future__ import annotations

import pytest

from torchcontracts.publish import gpu_checks as gc

# H200 SXM: 4.8 TB/s HBM3e datasheet, about 4 TB/s measured by a triad; 67 TFLOP/s fp32, 989 dense bf16
H200 = {"hbm_GBps": 4_000.0, "copy_GBps": 3_700.0, "fp32_TFLOPs": 50.0, "bf16_TFLOPs": 700.0}


def test_the_ceilings_of_a_real_gpu_are_plausible():
    assert gc.roofline_plausible(**H200) is True
    assert gc.roofline_plausible(hbm_GBps=250.0, copy_GBps=230.0, fp32_TFLOPs=4.0, bf16_TFLOPs=15.0)  # a laptop GPU


@pytest.mark.parametrize(
    "change",
    [
        {"hbm_GBps": 4_000e9},  # bytes/s reported as GB/s
        {"hbm_GBps": 4.0},  # TB/s reported as GB/s
        {"hbm_GBps": 400_000.0, "copy_GBps": 380_000.0},  # a host timer without synchronize: launch time only
        {"hbm_GBps": 1e-3, "copy_GBps": 1e-3},  # nothing measured
        {"hbm_GBps": 4_000.0, "copy_GBps": 900.0},  # triad and copy disagree 4x: one byte count is wrong
        {"fp32_TFLOPs": 0.0},
        {"bf16_TFLOPs": 50_000.0},  # a GEMM that was never waited for
    ],
)
def test_implausible_ceilings_fail(change):
    assert gc.roofline_plausible(**{**H200, **change}) is False


def test_an_asynchronous_launch_passes():
    # a bf16 8192^3 matmul on an H200: the call returns in ~20 us, the kernel ends after ~1.6 ms
    assert gc.launch_returns_early(launch_s=20e-6, done_s=1.6e-3) is True


@pytest.mark.parametrize(
    "launch_s, done_s",
    [
        (1.6e-3, 1.6e-3),  # synchronous: the call returns when the kernel is done
        (1.5e-3, 1.6e-3),  # returns just before the end: still waited for the kernel
        (0.2e-3, 1.6e-3),  # over a tenth of the kernel's time: not clearly a launch
        (0.0, 1.6e-3),  # nothing timed
    ],
)
def test_a_synchronous_launch_fails(launch_s, done_s):
    assert gc.launch_returns_early(launch_s, done_s) is False


def test_the_old_condition_could_not_fail_and_the_new_one_can():
    """The old ok was ``launch < done`` for times measured from the same start, true even for a blocking call."""
    launch, done = 1.59e-3, 1.6e-3
    assert launch < done
    assert gc.launch_returns_early(launch, done) is False


def test_overlapped_streams_pass():
    # 256 MiB over PCIe 5 (~5 ms) beside 4 bf16 matmuls (~6.4 ms): about max(copy, compute), not their sum
    assert gc.streams_overlapped(serial_s=11.4e-3, overlapped_s=6.6e-3) is True


@pytest.mark.parametrize(
    "serial_s, overlapped_s",
    [
        (11.4e-3, 11.4e-3),  # no overlap: the side stream ran after the default stream
        (11.4e-3, 11.0e-3),  # within noise of serial (ratio 0.965)
        (11.4e-3, 12.5e-3),  # slower: a first-use cost or a missing warm-up
        (0.0, 1e-3),  # nothing measured
    ],
)
def test_no_overlap_fails(serial_s, overlapped_s):
    assert gc.streams_overlapped(serial_s, overlapped_s) is False


def test_the_thresholds_are_the_documented_ones():
    assert gc.LAUNCH_SHARE == 0.1 and gc.OVERLAP_RATIO == 0.95
    lo, hi = gc.BANDWIDTH_GBPS
    assert lo <= 4_800 <= hi and lo <= 250 <= hi
