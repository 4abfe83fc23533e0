"""Lesson 04's proof predicates fail on the behaviour the seeds describe and pass on PyTorch's.

Each predicate, and the measuring functions it reads, is loaded from the notebook itself
(``notebook_functions``), so the test checks the very proof the lesson asserts. The CPU sides are
measured here (a real matmul, a real worker thread, a real pin_memory error); the CUDA sides are fed
the numbers a GPU gives and the numbers the seeds' stories would give.
"""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import ROOT, notebook_functions, read

NB = ROOT / "notebooks" / "04_async_and_timing.ipynb"
F = notebook_functions(
    NB,
    "call_then_read",
    "launch_then_wait",
    "proof_c139",
    "proof_c084",
    "searched",
    "proof_c114",
    "proof_c115",
    "proof_c047",
    "workspace_note",
)
MiB = 1 << 20
A = torch.randn(768, 768)


@pytest.fixture(scope="module")
def thread_launch():
    pool = ThreadPoolExecutor(max_workers=1)

    def launch(fn, *args):
        fut = torch.futures.Future()
        pool.submit(lambda: fut.set_result(fn(*args)))
        return fut

    yield launch
    pool.shutdown(wait=True)


def _cpu_c139(op, launcher) -> dict:
    return {"device": "cpu", **F["call_then_read"](op, A), **F["launch_then_wait"](launcher, A)}


# C139: "CUDA ops are asynchronous" -----------------------------------------------------------------


def test_c139_holds_on_this_cpu_and_on_a_gpus_numbers(thread_launch):
    assert F["proof_c139"](_cpu_c139(lambda x: x @ x, thread_launch)) is True
    gpu = {"device": "cuda", "launch_s": 3e-5, "kernel_s": 0.02, "syncs": {"x.sum().item()": 1, "y = x + 1": 0}}
    assert F["proof_c139"](gpu) is True


class _Deferred:
    """An op result whose work happens when it is read: a CPU that behaved like a CUDA stream."""

    def __init__(self, x: torch.Tensor):
        self.x = x

    def reshape(self, *shape):
        return (self.x @ self.x).reshape(*shape)


def test_c139_fails_on_an_asynchronous_cpu_op(thread_launch):
    assert F["proof_c139"](_cpu_c139(_Deferred, thread_launch)) is False


def test_c139_fails_when_the_launcher_runs_inline():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        facts = _cpu_c139(lambda x: x @ x, torch.jit.fork)  # eager torch.jit.fork: done when it returns
    assert facts["returned before done"] is False
    assert F["proof_c139"](facts) is False


@pytest.mark.parametrize(
    "seed_side",
    [
        {"launch_s": 0.02, "kernel_s": 0.02},  # synchronous CUDA: the launch waits
        {"syncs": {"x.sum().item()": 0, "y = x + 1": 0}},  # .item() did not wait
        {"syncs": {"x.sum().item()": 1, "y = x + 1": 1}},  # everything syncs
    ],
)
def test_c139_fails_on_synchronous_cuda(seed_side):
    gpu = {"device": "cuda", "launch_s": 3e-5, "kernel_s": 0.02, "syncs": {"x.sum().item()": 1, "y = x + 1": 0}}
    assert F["proof_c139"]({**gpu, **seed_side}) is False


# C084: "Linux limits pinned memory to 64MB; exceeding raises OSError" -------------------------------


def _cpu_c084() -> dict:
    try:
        torch.empty(4, pin_memory=True)
    except RuntimeError as err:
        return {"device": "cpu", "error_type": type(err).__name__, "error": f"{type(err).__name__}: {err}"}
    pytest.skip("this torch can pin memory: the CPU side does not apply")


def test_c084_holds_on_this_cpu_and_on_a_gpus_numbers():
    assert F["proof_c084"](_cpu_c084()) is True
    gpu = {"device": "cuda", "error": None, "pinned_bytes": 256 * MiB, "all_pinned": True, "host_growth": 256 * MiB}
    assert F["proof_c084"](gpu) is True


@pytest.mark.parametrize(
    "seed_side",
    [
        {"error": "OSError: unable to pin memory", "all_pinned": False, "host_growth": 0},  # the seed's 64 MB limit
        {"pinned_bytes": 32 * MiB, "host_growth": 32 * MiB},  # never went past 64 MB
        {"host_growth": 0},  # not torch's pinned memory
    ],
)
def test_c084_fails_when_pinning_past_64mb_fails_or_is_not_counted(seed_side):
    gpu = {"device": "cuda", "error": None, "pinned_bytes": 256 * MiB, "all_pinned": True, "host_growth": 256 * MiB}
    assert F["proof_c084"]({**gpu, **seed_side}) is False


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: pin_memory=True requires a CUDA or other accelerator backend; no pinned memory allocator "
        "is available on this system.",  # the CPU wheel (2.13)
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU",  # CUDA wheel
    ],
)
def test_c084_cpu_side_holds_on_either_builds_no_device_error(message):
    assert F["proof_c084"]({"device": "cpu", "error_type": "RuntimeError", "error": message}) is True


def test_c084_cpu_side_fails_on_a_runtime_error_about_size():
    error = "RuntimeError: unable to pin memory: the 64 MB limit was exceeded"
    assert F["proof_c084"]({"device": "cpu", "error_type": "RuntimeError", "error": error}) is False


def test_c084_cpu_side_fails_on_the_seeds_oserror():
    assert (
        F["proof_c084"]({"device": "cpu", "error_type": "OSError", "error": "OSError: unable to pin memory"}) is False
    )


# C114, C115, C047: cudnn.benchmark ------------------------------------------------------------------


# Kernel names as a profiler shows them for a fp32 NCHW conv on Hopper: a cached plan can launch 3 kernels
# (layout transforms around the convolution). Names are illustrative; the predicate only compares them.
TO_NHWC, CONV, TO_NCHW = "nchwToNhwcKernel", "sm90_xmma_fprop_implicit_gemm_tf32f32", "nhwcToNchwKernel"
PLAN = [TO_NHWC, TO_NHWC, CONV, TO_NCHW]  # input and weight transformed, one conv, output back
OTHER = ["implicit_convolve_sgemm"]  # a one-kernel candidate plan
SEARCH = (OTHER + OTHER) + (PLAN + PLAN) + PLAN  # each candidate: warm-up + timed run; then the winner runs once more


def test_a_search_is_told_from_a_cached_plan_by_its_kernel_names():
    assert F["searched"](SEARCH, PLAN) is True
    # a limit of one candidate still runs the winner three times (warm-up, timed, the real call)
    assert F["searched"](PLAN * 3, PLAN) is True
    # a search of 10 one-kernel plans against a one-kernel cached plan
    assert F["searched"](["k%d" % i for i in range(10) for _ in range(2)] + ["k0"], ["k0"]) is True


@pytest.mark.parametrize(
    "kernels, cached",
    [
        (PLAN, PLAN),  # a cached plan of 3 distinct kernels (4 launches), run again
        ([TO_NHWC, CONV, TO_NCHW], [TO_NHWC, CONV, TO_NCHW]),  # 3 kernels each
        ([TO_NHWC, CONV, TO_NCHW], [CONV]),  # the old count rule's blind spot: 3 >= 2*1+2 is False, but so is 3 vs 1
        (PLAN + ["Memset (Device)"], PLAN),  # one extra memset is not a search
        ([TO_NHWC, CONV, CONV, TO_NCHW], [TO_NHWC, CONV, TO_NCHW]),  # a split conv, not a second run of the plan
        (OTHER * 8, PLAN),  # many launches, but never the plan that was cached: not the search that chose it
        ([], []),  # nothing recorded
    ],
)
def test_a_cached_or_heuristic_plan_is_not_mistaken_for_a_search(kernels, cached):
    assert F["searched"](kernels, cached) is False


def test_a_one_candidate_search_is_found_where_the_old_count_rule_missed_it():
    """One valid candidate (benchmark_limit=1, or the workspace filter left one) of one kernel runs 3 times: warm-up,
    timed run, the real call. 3 launches is below the old rule's 2*1 + 2 = 4."""
    assert F["searched"]([CONV] * 3, [CONV]) is True


def test_c114_holds_when_each_new_batch_size_is_searched_once():
    assert F["proof_c114"]([True, False, True, False]) is True


@pytest.mark.parametrize(
    "searches",
    [
        [True, False, False, False],  # one search per process, whatever the shape
        [True, True, True, True],  # no cache at all
        [False, False, False, False],  # the flag does nothing
    ],
)
def test_c114_fails_when_the_cache_is_not_per_shape(searches):
    assert F["proof_c114"](searches) is False


def test_c115_is_false_as_torch_behaves_and_its_proof_fails_on_the_seeds_story():
    torch_side = {"warm-up searched": False, "same shape searched": False, "new shape searched": True}
    assert F["proof_c115"](torch_side) is True
    seed_side = {"warm-up searched": True, "same shape searched": False, "new shape searched": False}
    assert F["proof_c115"](seed_side) is False
    assert F["proof_c115"]({**torch_side, "warm-up searched": True}) is False


HEURISTIC = ["implicit_convolve_sgemm"]  # the deterministic heuristic plan


def _c047(**change) -> dict:
    observed = {
        "kernels": [HEURISTIC, SEARCH, PLAN],
        "max_abs_diff": 3e-5,
        "max_abs": 5.0,
        "differs across runs": False,
    }
    return {**observed, **change}


def test_c047_holds_when_the_search_picked_another_kernel_and_differences_are_rounding():
    assert F["proof_c047"](_c047()) is True
    # the same kernel as the heuristics here, but a second process picked another plan or gave another output
    assert F["proof_c047"](_c047(kernels=[PLAN, SEARCH, PLAN], **{"differs across runs": True})) is True
    # another kernel, bitwise the same output: the kernels differ, the difference is within rounding (zero)
    assert F["proof_c047"](_c047(max_abs_diff=0.0)) is True


@pytest.mark.parametrize(
    "change",
    [
        {"kernels": [HEURISTIC, PLAN, PLAN]},  # benchmark=True searched nothing
        {"max_abs_diff": 1.0},  # not a small difference
        # everything identical: same kernels as the heuristics, same plan and output in both processes.
        # The old proof passed here; the claim then rests on the docs, and the proof says so by failing
        {"kernels": [PLAN, SEARCH, PLAN], "max_abs_diff": 0.0},
    ],
)
def test_c047_fails_without_a_search_with_large_differences_or_when_nothing_differed(change):
    assert F["proof_c047"](_c047(**change)) is False


def test_c047_evidence_cites_the_workspace_limit_of_both_processes():
    runs = [{"c047": {"workspace_limit": 130 * 2**30}}, {"c047": {"workspace_limit": 96 * 2**30}}]
    note = F["workspace_note"](runs)
    assert "130.0 and 96.0 GiB" in note and "get_available_workspace()" in note and "cacheInfo" in note


# The one rule (issue 25): with no GPU, a claim about what CUDA does is gpu-only, names what the torch source or the
# docs expect a GPU run to show, and rests on that reading; the CUDA branch keeps a measured verdict. -------------


def verdict_calls(path) -> list[tuple[str, str, dict]]:
    """(claim id, verdict, {keyword: source text}) of every tc.verdict call in the notebook."""
    calls = []
    for cell in read(path).cells:
        if cell.cell_type == "code" and "tc.verdict(" in cell.source:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "verdict":
                    kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
                    calls.append((ast.literal_eval(node.args[0]), ast.literal_eval(node.args[1]), kw))
    return calls


CALLS = verdict_calls(NB)


@pytest.mark.parametrize(
    "cid, expect, basis",
    [
        ("C139", "true", "docs"),
        ("C084", "false", "source"),
        ("C114", "true", "source"),
        ("C115", "false", "source"),  # once a definite `false` from the source alone on a CPU
        ("C047", "true", "docs"),
    ],
)
def test_without_a_gpu_a_cuda_claim_is_gpu_only_with_its_expectation_and_a_measured_cuda_branch(cid, expect, basis):
    branches = {verdict: kw for c, verdict, kw in CALLS if c == cid}
    assert len([c for c, _, _ in CALLS if c == cid]) == 2 and "gpu-only" in branches, branches
    cpu = branches.pop("gpu-only")
    assert cpu["expect"] == repr(expect) and cpu["basis"] == repr(basis)
    (gpu,) = branches.values()
    assert "'measured'" in gpu["basis"]  # C047: measured when the search changed something, else the docs


def test_c047_cuda_branch_rests_on_the_docs_when_its_proof_finds_nothing_different():
    (gpu,) = [kw for c, verdict, kw in CALLS if c == "C047" and verdict != "gpu-only"]
    assert gpu["basis"] == "'measured' if shown else 'docs'" and gpu["source"].startswith("None if shown else")
    identical = _c047(kernels=[PLAN, SEARCH, PLAN], max_abs_diff=0.0)  # bitwise equal, nothing differed
    assert F["proof_c047"](identical) is False  # so `shown` is False there, and the basis is the docs
