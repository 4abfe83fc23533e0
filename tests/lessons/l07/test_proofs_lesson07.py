"""Lesson 07's proof predicates fail on the behaviour the seed describes and pass on PyTorch's.

Each predicate and its measuring function are loaded from the notebook itself (``notebook_functions``),
so the test checks the very proof the lesson asserts. Only dynamo's tracing and AOTAutograd run here
(recording and ``aot_eager`` backends), never Inductor, so the file takes seconds, not minutes.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from conftest import ROOT, notebook_functions

NB = ROOT / "notebooks" / "07_compile_and_profile.ipynb"
F = notebook_functions(
    NB,
    "proof_c119",
    "split_facts",
    "with_print",
    "looped",
    "with_time",
    "proof_c089",
    "fullgraph_facts",
    "mixed",
    "proof_c120",
    "proof_c122",
    "graph_launches",
)
XS = torch.randn(8)


# C119: "a graph break makes torch.compile silently fall back to eager for the function" ----------


def _c119_real() -> dict:
    return {
        "straight-line print": F["split_facts"](F["with_print"], XS),
        "print in a loop": F["split_facts"](F["looped"], XS),
        "time.time() (control)": F["split_facts"](F["with_time"], XS),
    }


def test_c119_holds_on_torch():
    observed = _c119_real()
    assert F["proof_c119"](observed) is True, {
        case: {k: v for k, v in facts.items() if k != "ops per graph"} for case, facts in observed.items()
    }


def test_c119_fails_when_the_break_drops_the_whole_function_to_eager():
    """The seed's picture, measured: with torch.compile told to run everything eagerly, no graph is made."""
    observed = _c119_real()
    with torch.compiler.set_stance("force_eager"):
        observed["straight-line print"] = F["split_facts"](F["with_print"], XS)
    assert observed["straight-line print"]["graphs"] == 0
    assert F["proof_c119"](observed) is False


@pytest.mark.parametrize(
    "case, change",
    [
        ("straight-line print", {"warnings and logs": ["Graph break: print"]}),  # not silent
        ("print in a loop", {"graphs": 2, "graph runs": 2}),  # the loop got compiled too
        ("time.time() (control)", {"warnings and logs": []}),  # a deaf noise catcher proves nothing
        ("straight-line print", {"graph runs": 0}),  # graphs compiled but never run
    ],
)
def test_c119_fails_on_the_other_readings(case, change):
    observed = _c119_real()
    observed[case] = {**observed[case], **change}
    assert F["proof_c119"](observed) is False


# C089: "torch.compile(fullgraph=True) fails if forward mixes no_grad and grad regions" ------------


def _w() -> torch.Tensor:
    return torch.randn(8, 8, requires_grad=True)


@pytest.fixture(scope="module")
def c089_facts() -> dict:
    """What the lesson measures for C089, measured once for the five tests that read it (each compile costs)."""
    return F["fullgraph_facts"](F["mixed"], torch.randn(16, 8), _w())


def test_c089_holds_on_torch(c089_facts):
    assert F["proof_c089"](c089_facts) is True, c089_facts


def test_c089_fails_when_fullgraph_raises():
    """A forward with no_grad *and* a real break (a print) does fail under fullgraph: the proof must see it."""

    def mixed_with_print(x, w):
        h = x @ w
        with torch.no_grad():
            print("    (a print inside no_grad)")
            scale = h.abs().mean()
        return torch.tanh(h / scale).sum()

    observed = F["fullgraph_facts"](mixed_with_print, torch.randn(16, 8), _w())
    assert observed["raised"] is not None
    assert F["proof_c089"](observed) is False


@pytest.mark.parametrize(
    "change",
    [
        {"graphs": 2},
        {"grad-mode switches in the graph": 0},
        {"w.grad matches eager": False},
        {"output matches eager": False},
    ],
)
def test_c089_fails_when_split_or_no_grad_is_lost(change, c089_facts):
    observed = {**c089_facts, **change}
    assert F["proof_c089"](observed) is False


# C120: "torch.compile's default mode is 'default'" -------------------------------------------------


def _c120(same_hits=1, same_misses=0, control_hits=0, control_misses=1, default=None) -> dict:
    return {
        "signature default": default,
        "mode='default' after the mode-less compile": {"hits": same_hits, "misses": same_misses},
        "mode='reduce-overhead' (control)": {"hits": control_hits, "misses": control_misses},
    }


def test_c120_holds_on_the_counts_torch_gives_and_its_signature():
    assert inspect.signature(torch.compile).parameters["mode"].default in (None, "default")
    assert F["proof_c120"](_c120(default=inspect.signature(torch.compile).parameters["mode"].default)) is True


@pytest.mark.parametrize(
    "kwargs",
    [
        {"same_hits": 0, "same_misses": 1},  # omitting mode chose other options: no shared cache entry
        {"control_hits": 1, "control_misses": 0},  # a cache that ignores the mode proves nothing
        {"default": "reduce-overhead"},  # a default that is another mode
    ],
)
def test_c120_fails_when_omitting_mode_is_not_default(kwargs):
    assert F["proof_c120"](_c120(**kwargs)) is False


# C122: "mode='reduce-overhead' uses CUDA Graphs" -----------------------------------------------------

CPU_SEEN = {
    "device": "cpu",
    "mode options": {"triton.cudagraphs": True},
    "cudagraph skips, mode='default'": 0,
    "cudagraph skips, mode='reduce-overhead'": 1,
    "same kernels as default": True,
}
CUDA_SEEN = {
    "device": "cuda",
    "mode options": {"triton.cudagraphs": True},
    "graph launches, default": 0,
    "graph launches, reduce-overhead": 1,
    "same values": True,
}


def test_c122_holds_on_what_torch_does_on_cpu_and_on_what_a_gpu_shows():
    assert torch._inductor.list_mode_options("reduce-overhead").get("triton.cudagraphs") is True
    assert F["proof_c122"](CPU_SEEN) is True
    assert F["proof_c122"](CUDA_SEEN) is True


@pytest.mark.parametrize(
    "observed",
    [
        {**CPU_SEEN, "mode options": {}},  # the mode does not ask for CUDA graphs
        {**CPU_SEEN, "cudagraph skips, mode='reduce-overhead'": 0},  # nothing was requested or dropped
        {**CPU_SEEN, "same kernels as default": False},
        {**CUDA_SEEN, "graph launches, reduce-overhead": 0},  # no CUDA graph ever replayed
        {**CUDA_SEEN, "graph launches, default": 3},  # default would use them too: not the mode's doing
    ],
)
def test_c122_fails_when_reduce_overhead_does_not_use_cuda_graphs(observed):
    assert F["proof_c122"](observed) is False


def test_cuda_graph_replays_are_counted_with_or_without_cuptis_version_suffix():
    """Kineto strips CUPTI's ``_v10000`` suffix, raw CUPTI and nsys keep it: both names count, nothing else does."""
    from types import SimpleNamespace

    names = ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "cudaLaunchKernel", "cudaStreamSynchronize", "triton_poi_0"]
    events = [SimpleNamespace(name=n) for n in names]
    assert F["graph_launches"](events) == 2
    assert F["graph_launches"]([SimpleNamespace(name="cudaLaunchKernel")] * 16) == 0


def _limited_runs(compile_kwargs: dict) -> tuple[int, list[int]]:
    graphs, runs = [], []

    def backend(gm, example_inputs):
        index = len(graphs)
        graphs.append(gm)

        def run(*args):
            runs.append(index)
            return gm(*args)

        return run

    torch.compiler.reset()
    fn = torch.compile(lambda v, s: torch.sin(v) * s, backend=backend, dynamic=False, **compile_kwargs)
    for n in (2, 3, 4, 5):
        fn(torch.randn(n), 2.0)
    torch.compiler.reset()
    return len(graphs), runs


def test_section_3_recompile_limit_both_ways():
    """Section 3 sets the limit per call where torch.compile takes recompile_limit= (2.13+) and through the global
    config otherwise (2.11). The global way works on every torch, and restores; the per-call way, where it exists,
    gives the same graphs and leaves the global alone."""
    before = torch._dynamo.config.recompile_limit
    with torch._dynamo.config.patch(recompile_limit=2):
        assert _limited_runs({}) == (2, [0, 1])
    assert torch._dynamo.config.recompile_limit == before
    if "recompile_limit" in inspect.signature(torch.compile).parameters:
        assert _limited_runs({"recompile_limit": 2}) == (2, [0, 1])
        assert torch._dynamo.config.recompile_limit == before
    else:
        with pytest.raises(TypeError, match="recompile_limit"):
            torch.compile(torch.sin, recompile_limit=2)
