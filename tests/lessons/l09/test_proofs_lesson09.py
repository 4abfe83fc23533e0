"""Lesson 09's proof predicates pass on what torch does and fail on the behaviour the seed describes.

The predicates (and the small functions that turn measurements into facts) are loaded from the
notebook itself. The real side runs the lesson's own ``experiments.py`` (assembled from its
``%%writefile`` cells) with torchrun once, the deprecated launcher once, and reads the installed
torch's source; the seed side feeds the same predicates what the seed's world would measure.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from conftest import ROOT, notebook_functions, read
from torchcontracts.lessons.l09_distributed.dist_tools import launch, leftover_processes, write_script

NB = ROOT / "notebooks" / "09_distributed.ipynb"


def _without_cell_magics(path: Path) -> Path:
    """A copy of the notebook without its ``%%writefile`` cells, which ``conftest.course_imports`` cannot parse."""
    import tempfile

    import nbformat

    nb = read(path)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith("%%"))]
    out = Path(tempfile.mkdtemp(prefix="nb09-")) / path.name
    nbformat.write(nb, out)
    return out


F = notebook_functions(
    _without_cell_magics(NB),
    "one_backward",
    "overlap_facts",
    "proof_c017",
    "proof_c062",
    "proof_c063",
    "buffer_facts",
    "proof_c064",
    "recorded_dataparallel",
    "dataparallel_facts",
    "proof_c141",
    "proof_c141_gpu",
    "launcher_facts",
    "proof_c142",
    "nccl_env_facts",
    "proof_c121",
)
TORCH_DIR = Path(torch.__file__).parent

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not dist.is_gloo_available(),
    reason="the lesson's scripts need Linux and gloo",
)


def _script(name: str) -> str:
    """The lesson's script ``name``, from its ``%%writefile`` (and ``%%writefile -a``) cells, in order."""
    parts = []
    for cell in read(NB).cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and re.fullmatch(rf"%%writefile (-a )?\{{WORK\}}/{re.escape(name)}", first.strip()):
            parts.append(body)
    assert parts, f"the lesson writes no {name}"
    return "\n".join(parts)


@pytest.fixture(scope="module")
def experiments(tmp_path_factory) -> dict:
    """What the lesson's experiments.py measures on two ranks (one torchrun launch for every test here)."""
    folder = tmp_path_factory.mktemp("lesson09")
    run = launch(write_script(_script("experiments.py"), folder, "experiments.py"), nproc=2, timeout=300).check()
    assert leftover_processes() == []
    return run.results


# --- C017: all-reduce happens after backward, decoupled from autograd ----------------------------------


def test_c017_holds_on_the_measured_timeline(experiments):
    for rank, res in experiments.items():
        facts = F["overlap_facts"](F["one_backward"](res["timeline"], 2))
        assert F["proof_c017"](facts) is True, (rank, facts)


def _seed_timeline(events: list) -> list:
    """The same events, reordered the seed's way: every all-reduce after the last gradient."""
    grads = [e for e in events if e[0] == "grad"]
    comms = [e for e in events if e[0] in ("launch", "done")]
    return [events[0], *grads, *comms, events[-1]]


def test_c017_fails_when_every_all_reduce_comes_after_the_last_gradient(experiments):
    events = F["one_backward"](experiments[0]["timeline"], 2)
    assert F["proof_c017"](F["overlap_facts"](_seed_timeline(events))) is False


def test_c017_fails_with_a_single_bucket(experiments):
    first = F["overlap_facts"](F["one_backward"](experiments[0]["timeline"], 0))  # iteration 0: one bucket
    assert first["buckets"] == 1 and F["proof_c017"](first) is False


# --- C062: find_unused_parameters --------------------------------------------------------------------


def _unused(experiments) -> dict:
    default = inspect.signature(nn.parallel.DistributedDataParallel).parameters["find_unused_parameters"].default
    return {"default value": default, "never used": experiments[0]["unused"], "sometimes": experiments[0]["sometimes"]}


def test_c062_holds_on_ddp(experiments):
    observed = _unused(experiments)
    assert F["proof_c062"](observed) is True
    assert "raised" in observed["sometimes"]["static_graph=True"]  # the seed's case: static_graph is no way out
    assert "ran" in observed["never used"]["static_graph=True"]  # while a layer never used is fine with it


RAISED = "iteration 2 raised: Expected to have finished reduction in the prior iteration"


@pytest.mark.parametrize(
    "other_side",
    [
        {"static_graph=True": "4 iterations ran"},  # static_graph handled the seed's case too: partly, not true
        {"find_unused_parameters=True": RAISED},  # even the seed's fix failed
        {"default": "4 iterations ran"},  # no error at all: the claim false
    ],
)
def test_c062_fails_on_the_other_outcomes(experiments, other_side):
    observed = _unused(experiments)
    assert F["proof_c062"]({**observed, "sometimes": {**observed["sometimes"], **other_side}}) is False


def test_c062_fails_if_the_default_were_true(experiments):
    assert F["proof_c062"]({**_unused(experiments), "default value": True}) is False


# --- C063: gradient_as_bucket_view --------------------------------------------------------------------


def test_c063_holds_on_ddp(experiments):
    for res in experiments.values():
        assert F["proof_c063"](res["views"], False) is True


def test_c063_fails_when_the_flag_makes_no_views_or_saves_nothing(experiments):
    views = copy.deepcopy(experiments[0]["views"])
    no_alias = {**views, True: dict(views[False])}  # True behaves like False
    assert F["proof_c063"](no_alias, False) is False
    assert F["proof_c063"](views, True) is False  # a default of True
    saves_nothing = {**views, True: {**views[True], "grads + buckets bytes": views[False]["grads + buckets bytes"]}}
    assert F["proof_c063"](saves_nothing, False) is False


# --- C064: broadcast_buffers ----------------------------------------------------------------------------


ON, OFF, NEW_OFF = "default", "broadcast_buffers=False", "forward_sync_buffers=False"


def test_c064_holds_on_ddp(experiments):
    assert F["proof_c064"](F["buffer_facts"](experiments)) is True


def test_broadcast_buffers_false_skips_the_init_sync_and_forward_sync_buffers_false_does_not(experiments):
    """L09-1: the two spellings of "off" are different flags. Where DDP has forward_sync_buffers (2.13+), its False
    still broadcasts rank 0's buffers in the constructor; broadcast_buffers=False does not, in every torch."""
    assert F["buffer_facts"](experiments, ON)["after DDP(...), rank 1 holds rank 0's buffer"] is True
    assert F["buffer_facts"](experiments, OFF)["after DDP(...), rank 1 holds rank 0's buffer"] is False
    has_new = "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters
    assert (NEW_OFF in experiments[0]["buffers"]) is has_new
    if has_new:
        new = F["buffer_facts"](experiments, NEW_OFF)
        assert new["after DDP(...), rank 1 holds rank 0's buffer"] is True
        assert new["syncing off: ranks start forward with the same running_mean"] is False
        warning = experiments[0]["buffers"][OFF]["warning"]
        assert "still syncs buffers at init" in warning, warning  # the caveat, printed whole
    else:
        assert experiments[0]["buffers"][OFF]["warning"] == ""  # before 2.13 broadcast_buffers is not deprecated


def test_c064_fails_if_turning_syncing_off_kept_the_ranks_in_step(experiments):
    seed = copy.deepcopy(experiments)
    seed[1]["buffers"][OFF]["running_mean at forward 2"] = seed[0]["buffers"][OFF]["running_mean at forward 2"]
    assert F["proof_c064"](F["buffer_facts"](seed)) is False
    averaged = copy.deepcopy(experiments)  # "syncing" that averaged: rank 0 would not see its own running mean
    mean = (
        averaged[0]["buffers"][ON]["running_mean at forward 2"]
        + averaged[1]["buffers"][OFF]["running_mean at forward 2"]
    ) / 2
    for r in (0, 1):
        averaged[r]["buffers"][ON]["running_mean at forward 2"] = mean
    assert F["proof_c064"](F["buffer_facts"](averaged)) is False


# --- C141: DataParallel ---------------------------------------------------------------------------------


def _dp_facts(module=None, forwards=2, **change):
    dp = F["recorded_dataparallel"](module or nn.Linear(3, 2))
    with torch.no_grad():
        for _ in range(forwards):
            dp(torch.randn(8, 3))
    facts = F["dataparallel_facts"](
        dp, forwards, inspect.getsource(nn.parallel.parallel_apply), nn.DataParallel.__doc__ or ""
    )
    return {**facts, **change}


def test_c141_holds_on_torch_dataparallels_own_forward():
    facts = _dp_facts()
    assert facts["outputs gathered on"] == [0] and facts["module replicated, times"] == 2
    assert F["proof_c141"](facts) is True


@pytest.mark.parametrize(
    "change",
    [
        {"outputs gathered on": [0, 1]},  # each replica's output left on its own device: balanced
        {"outputs gathered on": []},  # no gather at all
        {"module replicated, times": 1},  # replicas kept between calls
        {"parallel_apply starts threads (its source)": False},
        {"its docstring recommends DistributedDataParallel": False},
    ],
)
def test_c141_fails_on_a_dataparallel_that_behaves_otherwise(change):
    assert F["proof_c141"](_dp_facts(**change)) is False


def test_c141_reads_the_behaviour_not_the_formatting():
    """A DataParallel whose forward gathers on every device fails, whatever its source looks like; a reformatted
    parallel_apply (threads started under another layout) still passes."""

    class Spread(nn.DataParallel):
        def forward(self, *inputs):
            replicas = self.replicate(self.module, self.device_ids)
            ins, kws = self.scatter(inputs, {}, self.device_ids)
            outs = self.parallel_apply(replicas, ins, kws)
            return [self.gather([o], d) for o, d in zip(outs, self.device_ids)]

    dp = F["recorded_dataparallel"](nn.Linear(3, 2))
    dp.__class__ = type("SpreadRecorded", (Spread, type(dp)), {})
    with torch.no_grad():
        dp(torch.randn(8, 3))
        dp(torch.randn(8, 3))
    src = inspect.getsource(nn.parallel.parallel_apply)
    spread = F["dataparallel_facts"](dp, 2, src, nn.DataParallel.__doc__)
    assert spread["outputs gathered on"] == [0, 1] and F["proof_c141"](spread) is False
    reformatted = "def f():\n    import threading\n    t = threading.Thread(\n        target=None)\n"
    assert F["dataparallel_facts"](dp, 2, reformatted, "")["parallel_apply starts threads (its source)"] is True


def test_c141_on_two_gpus_needs_gpu_0_to_hold_more():
    facts = _dp_facts()
    assert F["proof_c141_gpu"](facts, [2300.0, 1100.0]) is True  # GPU-like peaks, MiB
    assert F["proof_c141_gpu"](facts, [1100.0, 1100.0]) is False  # balanced
    assert F["proof_c141_gpu"]({**facts, "outputs gathered on": [0, 1]}, [2300.0, 1100.0]) is False


# --- C142: torch.distributed.launch ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def launchers(tmp_path_factory):
    script = write_script(_script("legacy.py"), tmp_path_factory.mktemp("legacy"), "legacy.py")
    return launch(script, nproc=1, module="torch.distributed.launch", timeout=180), launch(script, nproc=1, timeout=180)


def test_c142_holds_on_the_installed_launchers(launchers):
    old, new = launchers
    assert F["proof_c142"](F["launcher_facts"](old, [new])) is True


def test_c142_fails_if_launch_were_a_current_launcher(launchers):
    old, new = launchers
    facts = F["launcher_facts"](old, [new])
    assert F["proof_c142"]({**facts, "launch says: deprecated, use torchrun": False}) is False
    assert F["proof_c142"]({**facts, "torchrun passed --local-rank": True}) is False
    quiet = copy.copy(old)
    quiet.agent_log = "\n".join(l for l in old.agent_log.splitlines() if "deprecated" not in l and "torchrun" not in l)
    assert F["proof_c142"](F["launcher_facts"](quiet, [new])) is False


# --- C121: NCCL_ASYNC_ERROR_HANDLING and NCCL_TIMEOUT ------------------------------------------------------


def test_c121_holds_on_the_installed_torch_source():
    hang = TimeoutError("rank 1 never reached the collective that rank 0 waited in: Timed out waiting 3000ms")
    facts = F["nccl_env_facts"](TORCH_DIR, hang)
    assert facts["renamed"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == ["NCCL_ASYNC_ERROR_HANDLING"]
    assert F["proof_c121"](facts) is True


@pytest.mark.parametrize(
    "seed_side",
    [
        {"old name is an alias of": None},  # NCCL_ASYNC_ERROR_HANDLING still the real name
        {"files reading NCCL_TIMEOUT": ["distributed/c10d.py"]},  # a NCCL_TIMEOUT that torch reads
        {"a hung gloo collective ended at the timeout": False},  # "hangs forever"
        {"the alias warns": ""},
    ],
)
def test_c121_fails_in_the_seeds_world(seed_side):
    hang = TimeoutError("Timed out waiting 3000ms")
    assert F["proof_c121"]({**F["nccl_env_facts"](TORCH_DIR, hang), **seed_side}) is False


def test_c121_fails_when_no_hung_collective_ended():
    assert F["proof_c121"](F["nccl_env_facts"](TORCH_DIR, None)) is False


# --- what the CPU run cannot execute: the kernel's own backward, and the CUDA branches, read from the source ---


def _kernel_cells() -> list[str]:
    """The code the lesson's kernel runs itself (not the scripts its ``%%writefile`` cells write)."""
    return [c.source for c in read(NB).cells if c.cell_type == "code" and not c.source.startswith("%%")]


def test_the_kernel_never_runs_backward_itself():
    """With a GPU and a CUDA build, the kernel's first backward would stop every later fork (run_ranks, Try-it 09.2)
    from running one: a backward in a kernel cell belongs in a function that in_fork or the ranks call."""
    import ast

    def outside_functions(node):
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield child
                yield from outside_functions(child)

    found = [
        ast.unparse(n)
        for source in _kernel_cells()
        for n in outside_functions(ast.parse(source))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
    ]
    assert found == [], found
    assert sum("in_fork(" in s for s in _kernel_cells()) >= 3  # cells 20, 48 (part E) and the NCCL cell


def test_fsdp_shards_on_an_explicit_cpu_mesh():
    """With no mesh, fully_shard picks the accelerator (cuda on a GPU box) while the group is gloo on CPU."""
    script = _script("experiments.py")
    calls = re.findall(r"fully_shard\(([^)]*)\)", script)
    assert calls and all("mesh=mesh" in c for c in calls), calls
    assert 'mesh = init_device_mesh("cpu", (world,))' in script
    assert "p.grad.full_tensor().cpu()" in script


def test_the_cuda_cells_set_the_device_first_and_accept_any_async_error_handling_but_off():
    cells = _kernel_cells()
    nccl_scripts = [s for s in cells if 'init_process_group("nccl"' in s]
    assert len(nccl_scripts) == 2
    for s in nccl_scripts:
        assert s.index("torch.cuda.set_device(") < s.index('init_process_group("nccl"'), s[:200]
    assert not any('["async error handling"] == "1"' in s for s in cells)
    assert any('nccl["async error handling"] not in (None, "", "0")' in s for s in cells)
    assert any("died.seconds < 30" in s for s in cells)  # "nobody waited for the 30 s timeout", asserted


def test_no_warning_is_cut_and_no_api_is_called_by_one_versions_name_only():
    cells = [c.source for c in read(NB).cells if c.cell_type == "code"]
    assert not any('.split(". ")[0]' in s for s in cells)
    collectives = _script("collectives_demo.py")
    assert 'hasattr(dist, "all_gather_single")' in collectives
    assert "dist.all_gather_single(t" not in collectives and "dist.reduce_scatter_single(t" not in collectives
    experiments = _script("experiments.py")  # forward_sync_buffers only where DDP's signature has it (2.13+)
    assert 'if "forward_sync_buffers" in inspect.signature(DDP).parameters:' in experiments


def test_the_c064_cell_asks_the_key_the_script_writes():
    """Cell 44 takes the 2.13 path when part D tried forward_sync_buffers=False (the key part D writes)."""
    cell = next(c.source for c in read(NB).cells if c.cell_type == "code" and 'tc.claim("C064")' in c.source)
    assert f'has_forward_sync = "{NEW_OFF}" in E0["buffers"]' in cell
    assert f'modes["{NEW_OFF}"]' in _script("experiments.py")
