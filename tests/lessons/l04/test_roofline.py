"""The roofline helper measures ceilings that an independent implementation confirms, and draws headless.

One real measurement (small arrays, a 1024^3 GEMM) checks that torch's copy bandwidth and GEMM
FLOP/s are within 2x of NumPy's on this machine; everything else runs on synthetic figures.
"""

from __future__ import annotations

import time

import matplotlib

matplotlib.use("Agg")  # headless: the helper must draw without a display

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from torchcontracts.lessons.l04_async import roofline  # noqa: E402
from torchcontracts.lessons.l04_async.roofline import Ceilings, Kernel, measure_ceilings, roofline_plot  # noqa: E402

CPU = Ceilings("cpu", 2, bandwidth=20e9, flops={"float32": 100e9})  # ridge at 5 FLOPs/byte


@pytest.fixture(scope="module")
def measured() -> Ceilings:
    return measure_ceilings(array_bytes=64 << 20, gemm_n=1024, repeats=3)


def _outside(c: Ceilings) -> list[str]:
    return [
        f"{name}: torch/NumPy = {r:.2f} ({c.checks[name]})" for name, r in c.ratios().items() if not 0.5 <= r <= 2.0
    ]


def test_measured_ceilings_are_within_2x_of_numpy_on_this_machine(measured):
    assert set(measured.ratios()) == {"copy, 1 thread (GB/s)", "fp32 GEMM (GFLOP/s)"}
    assert measured.bandwidth > 1e9 and measured.peak > 1e9
    assert measured.sizes == {"array_bytes": 64 << 20, "gemm_n": 1024}
    # Contention (another test process on the other core) skews torch's and NumPy's figures differently, so a
    # ratio measured while the helper itself reports contention proves nothing either way: measure again, up to
    # three times. Any clean measurement outside 2x fails; one inside passes; only contention every time skips.
    tries = [measured]
    while _outside(tries[-1]) and tries[-1].noisy and len(tries) < 4:
        time.sleep(1.0)
        tries.append(measure_ceilings(array_bytes=64 << 20, gemm_n=1024, repeats=3))
    last = tries[-1]
    if _outside(last) and last.noisy:
        pytest.skip(f"contended in {len(tries)} measurements ({last.noisy}); last: {'; '.join(_outside(last))}")
    assert not _outside(last), "; ".join(_outside(last))


def test_bf16_is_a_ceiling_only_where_the_cpu_has_bf16_units(measured):
    if roofline.bf16_native():
        assert "bfloat16" in measured.flops
    else:
        assert "bfloat16" not in measured.flops
        assert any("no AVX512-BF16/AMX" in note for note in measured.notes)


def test_the_roofline_is_the_lower_of_the_two_roofs():
    assert CPU.ridge() == pytest.approx(5.0)
    assert CPU.attainable(1.0) == pytest.approx(20e9)  # memory roof: bandwidth x intensity
    assert CPU.attainable(5.0) == pytest.approx(100e9)  # the ridge
    assert CPU.attainable(50.0) == pytest.approx(100e9)  # compute roof


def test_a_kernel_knows_its_intensity_rate_and_share_of_the_ceiling():
    add = Kernel("add", flops=1e6, bytes=12e6, seconds=1e-3)  # 1 GFLOP/s at 1/12 FLOP/byte
    assert add.intensity == pytest.approx(1 / 12)
    assert add.achieved == pytest.approx(1e9)
    assert add.percent_of_ceiling(CPU) == pytest.approx(100 * 1e9 / (20e9 / 12))
    assert add.bound(CPU) == "memory"
    gemm = Kernel("gemm", flops=2e9, bytes=12e6, seconds=0.04)
    assert gemm.bound(CPU) == "compute" and gemm.percent_of_ceiling(CPU) == pytest.approx(50.0)
    assert Kernel("ridge", 5e6, 1e6, 1.0).bound(CPU) == "compute"  # at the ridge: compute-bound


def test_roofline_plot_draws_each_roof_and_labels_each_kernel_headless():
    kernels = [Kernel("add", 1e6, 12e6, 1e-3), Kernel("gemm", 2e9, 12e6, 0.04, noisy=True)]
    gpu = Ceilings("cuda (recorded)", 1, bandwidth=4e12, flops={"bfloat16": 800e12})
    ax = roofline_plot(kernels, CPU, extra=[gpu])
    labels = [line.get_label() for line in ax.get_lines()]
    assert len(labels) == 2 and labels[0].startswith("cpu float32") and labels[1].startswith("cuda (recorded)")
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts[0] == f"add\n{kernels[0].percent_of_ceiling(CPU):.0f}%" and "(noisy)" in texts[1]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)


def test_ceilings_round_trip_through_json():
    c = Ceilings("cpu", 2, 20e9, {"float32": 1e11}, {"x": (1.0, 2.0)}, {"gemm_n": 8}, "", ("a note",))
    assert Ceilings.from_json(c.to_json()) == c
    assert c.ratios() == {"x": 0.5}


def test_a_busy_machine_makes_the_ceilings_lower_bounds(monkeypatch):
    waits = iter([0.0, 5.0])  # 5 s of run-queue wait over a 1 s measurement
    monkeypatch.setattr(roofline, "_waited", lambda: next(waits))
    why = roofline._contention(1.0, 0.0, roofline._waited())
    assert "another process is busy" in why and "lower bounds" in why
    monkeypatch.setattr(roofline, "_waited", lambda: 0.01)  # a quiet second: no wait, the CPU busy throughout
    assert roofline._contention(1.0, time.process_time() - 1.0, 0.0) == ""


def test_the_arrays_are_sized_past_the_last_level_cache():
    llc = roofline.last_level_cache_bytes()
    if llc is not None:
        assert llc >= 1 << 16
    assert roofline.CPU_ARRAY_MIN >= 64 << 20


def test_tf32_off_turns_both_switches_off_and_restores_them():
    """The GPU roofline's fp32 basis: cuDNN's TF32 (on by default) and cuBLAS's, off inside, as they were after."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32)
    try:
        matmul.allow_tf32, cudnn.allow_tf32 = True, True
        with roofline.tf32_off() as was:
            assert (matmul.allow_tf32, cudnn.allow_tf32) == (False, False)
        assert was == {"matmul": True, "cudnn": True}
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, True)
        with pytest.raises(RuntimeError), roofline.tf32_off():
            raise RuntimeError("a failed measurement")
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, True)
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before
