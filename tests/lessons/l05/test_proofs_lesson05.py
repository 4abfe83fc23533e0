"""Lesson 05's proof predicates pass on what torch's DataLoader does and fail on what the seeds describe.

Each predicate is loaded from the notebook itself (``notebook_functions``), so the test checks the very
proof the lesson asserts. Where it is cheap, both sides are measured in live ``fork`` workers here: the
real loader, and a loader (or worker_init_fn) built to behave the way the seed says torch behaves.
"""

from __future__ import annotations

import ast
import os
import random
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, get_worker_info

from conftest import ROOT, notebook_functions, read
from torchcontracts.lessons.l05_data.data_pipeline import (
    DrawDataset,
    ModuleDataset,
    close_workers,
    dataloader_workers,
    worker_iter,
)

NB = ROOT / "notebooks" / "05_data_pipeline.ipynb"
F = notebook_functions(
    NB,
    "proof_c042",
    "proof_c049",
    "proof_c048",
    "proof_c058",
    "proof_c094",
    "proof_c023",
    "proof_c093",
    "proof_c090",
    "proof_c092",
    "proof_c091",
    "proof_c091_no_gpu",
    "proof_c117",
    "proof_c118",
    "proof_c095",
    "seeding_demo",
    "per_worker",
    "seed_article_init",
    "my_seed_worker",
    "stand_in_accelerator",
)
FORK = "fork"


pytestmark = pytest.mark.usefixtures("no_dataloader_worker_left")  # conftest: fails a test that leaks one


def _fork(ds, **kw):
    return DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=FORK, **kw)


# C042: "a Dataset just needs __len__ and __getitem__" -----------------------------------------------


class _Plain:
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i * i


class _NoLen:
    def __getitem__(self, i):
        return i


class _HoldsGenerator:
    def __init__(self):
        self.frames = (i for i in range(10))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


def _c042_observed() -> dict:
    with worker_iter(_fork(_Plain())) as it:
        plain = sorted(int(v) for v in it)
    try:
        list(DataLoader(_NoLen(), batch_size=2))
        no_len = ""
    except TypeError as err:
        no_len = str(err)
    with worker_iter(_fork(_HoldsGenerator())) as it:
        fork_stream = [int(v) for v in it]
    try:
        with pytest.warns(UserWarning, match="pickle"):
            with worker_iter(DataLoader(_HoldsGenerator(), num_workers=1, multiprocessing_context="spawn")):
                pass
        spawn = ""
    except TypeError as err:
        spawn = str(err)
    return {"plain": plain, "no_len_error": no_len, "fork_stream": sorted(fork_stream), "spawn_error": spawn}


def test_c042_holds_on_torch_and_fails_if_any_object_with_two_methods_plugged_in_everywhere():
    real = _c042_observed()
    assert F["proof_c042"](real) is True
    assert F["proof_c042"]({**real, "spawn_error": ""}) is False  # spawn pickled a live generator
    assert F["proof_c042"]({**real, "no_len_error": ""}) is False  # samplers did without __len__


def test_c042_fails_in_a_world_where_the_claim_is_simply_true():
    """Every measured part of the protocol holds, and the dataset holding a generator also starts spawn workers:
    then any object with __len__ and __getitem__ plugs in everywhere, and `partly` would be wrong."""
    simply_true = {"plain": [0, 1, 4, 9, 16, 25], "no_len_error": "object of type 'NoLen' has no len()"}
    simply_true |= {"fork_stream": [0, 1, 2, 3], "spawn_error": ""}
    assert F["proof_c042"](simply_true) is False
    assert F["proof_c042"]({**simply_true, "spawn_error": "cannot pickle 'generator' object"}) is True


# C049: prefetch_factor defaults to 2 batches per worker ----------------------------------------------


class _Counted(Dataset):
    def __init__(self):
        self.fetched = torch.multiprocessing.get_context(FORK).Value("i", 0)
        self.by_worker = torch.multiprocessing.get_context(FORK).Array("i", 8)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        with self.fetched.get_lock():
            self.fetched.value += 1
            info = get_worker_info()
            self.by_worker[info.id if info else 0] += 1
        return i


def _ahead(workers: int = 2, **kw) -> tuple[float, int]:
    ds = _Counted()
    loader = DataLoader(ds, batch_size=4, num_workers=workers, multiprocessing_context=FORK if workers else None, **kw)
    with worker_iter(loader):
        if workers == 0:
            return ds.fetched.value / 4, loader.prefetch_factor
        last, since, deadline = -1, time.monotonic(), time.monotonic() + 30
        # still for 0.5 s after every worker fetched: a worker that starts late on a busy machine is not missed
        while (time.monotonic() - since < 0.5 or not all(ds.by_worker[:workers])) and time.monotonic() < deadline:
            if ds.fetched.value != last:
                last, since = ds.fetched.value, time.monotonic()
            time.sleep(0.01)
    return last / 4, loader.prefetch_factor


def test_c049_holds_on_torch_and_fails_when_workers_fetch_another_number_ahead():
    ahead, factor = _ahead()
    ahead_4, _ = _ahead(prefetch_factor=4)
    ahead_1, _ = _ahead(prefetch_factor=1)
    ahead_main, main_factor = _ahead(0)
    real = {
        "default_factor": factor,
        "ahead_default": ahead,
        "ahead_4": ahead_4,
        "workers": 2,
        "num_workers_0": main_factor,
        "ahead_main": ahead_main,
        "main_error": "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 ...",
    }
    assert F["proof_c049"](real) is True
    assert F["proof_c049"]({**real, "ahead_default": ahead_1}) is False  # one batch per worker (measured with 1)
    assert F["proof_c049"]({**real, "ahead_default": 2.0}) is False  # "2" meant 2 in total, not per worker
    assert F["proof_c049"]({**real, "num_workers_0": 2}) is False
    assert F["proof_c049"]({**real, "ahead_main": 2.0}) is False  # the main process fetching ahead


# C048 / C058: persistent_workers ---------------------------------------------------------------


class _WhoAmI(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return os.getpid()


def _pids(loader) -> tuple[list[int], list[int], list[int]]:
    e0 = sorted(set(loader))
    alive = dataloader_workers()
    e1 = sorted(set(loader))
    return e0, alive, e1


def test_c048_and_c058_hold_on_torch_and_fail_when_workers_are_replaced_or_kept_by_default():
    fresh = _pids(_fork(_WhoAmI()))
    kept_loader = _fork(_WhoAmI(), persistent_workers=True)
    kept = _pids(kept_loader)
    close_workers(kept_loader)
    real = {"fresh": fresh, "kept": kept, "error": "persistent_workers option needs num_workers > 0"}
    assert F["proof_c048"](real) is True
    assert F["proof_c048"]({**real, "kept": fresh}) is False  # persistent workers replaced each epoch
    assert F["proof_c048"]({**real, "error": ""}) is False  # num_workers=0 accepted
    assert F["proof_c058"]({"default": False, "fresh": fresh}) is True
    assert F["proof_c058"]({"default": True, "fresh": kept}) is False  # a default that keeps its workers


# C094: persistent workers keep their own copy ----------------------------------------------------


class _EpochAware(Dataset):
    def __init__(self, shared: bool):
        self.shared = torch.multiprocessing.get_context(FORK).Value("i", 0) if shared else None
        self.epoch, self.calls = 0, 0

    def __len__(self):
        return 4

    def __getitem__(self, i):
        self.calls += 1
        return (self.shared.value if self.shared is not None else self.epoch), self.calls


def _c094_last(persistent: bool, shared: bool = False) -> tuple[int, int]:
    ds = _EpochAware(shared)
    loader = _fork(ds, persistent_workers=persistent)
    seen = []
    for epoch in range(2):
        ds.epoch = epoch
        if shared:
            ds.shared.value = epoch
        seen = list(loader)
    close_workers(loader)
    return max(s for s, _ in seen), max(c for _, c in seen)


def test_c094_holds_on_torch_and_fails_when_persistent_workers_see_the_main_process():
    real = {"fresh": _c094_last(False), "persistent": _c094_last(True)}
    assert F["proof_c094"](real) is True
    # A dataset whose state lives in shared memory behaves as if workers had no copy: the update reaches them.
    assert F["proof_c094"]({**real, "persistent": _c094_last(True, shared=True)}) is False
    assert F["proof_c094"]({**real, "fresh": real["persistent"]}) is False


# C023 / C093: where pinning happens --------------------------------------------------------------


class _Batch:
    def __init__(self, x, pin_here=False):
        self.x, self.made_in, self.pinned_in, self.arrived_shared = x, os.getpid(), None, None
        if pin_here:  # the seed's picture: the worker pins its own batch
            self.pin_memory()

    def pin_memory(self):
        if self.pinned_in is None:
            comm = open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip()
            self.pinned_in, self.arrived_shared = (os.getpid(), comm), self.x.is_shared()
        return self


def _collate(items):
    return _Batch(torch.stack(items).mul_(-1))


def _collate_and_pin(items):
    return _Batch(torch.stack(items).mul_(-1), pin_here=True)


def _pin_observed(collate) -> dict:
    data = [torch.full((8,), float(i)) for i in range(8)]
    loader = DataLoader(
        data, batch_size=2, num_workers=2, collate_fn=collate, pin_memory=True, multiprocessing_context=FORK
    )
    with F["stand_in_accelerator"]():
        batches = list(loader)
    return {
        "main_pid": os.getpid(),
        "made_pids": {b.made_in for b in batches},
        "pinned_pids": {b.pinned_in[0] for b in batches},
        "threads": {b.pinned_in[1] for b in batches},
        "cuda": False,
        "host_growth": None,
        "all_pinned": None,
        "arrived_shared": {b.arrived_shared for b in batches},
        "copied": {None},
        "worker_loop_pins": False,
    }


def test_c023_and_c093_hold_on_torch_and_fail_when_workers_pin():
    real = _pin_observed(_collate)
    assert F["proof_c023"](real) is True and F["proof_c093"](real) is True
    in_worker = _pin_observed(_collate_and_pin)  # each worker pins its own batch, as the seeds describe
    assert F["proof_c023"](in_worker) is False and F["proof_c093"](in_worker) is False
    assert F["proof_c093"]({**real, "worker_loop_pins": True}) is False
    gpu = {**real, "cuda": True, "all_pinned": True, "host_growth": 4096, "copied": {True}}
    assert F["proof_c023"](gpu) is True and F["proof_c093"](gpu) is True
    assert F["proof_c023"]({**gpu, "host_growth": 0}) is False and F["proof_c093"]({**gpu, "copied": {False}}) is False


# C090 / C092 / C091: start methods ----------------------------------------------------------------

SPAWN_CMD = "-B -X frozen_modules=off -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"


def test_c090_holds_on_a_module_that_pickles_and_fails_when_the_workers_could_not_rebuild_it():
    ds = ModuleDataset(n=2)
    same = torch.equal(__import__("pickle").loads(__import__("pickle").dumps(ds))[1]["y"], ds[1]["y"])
    real = {"spawn": {"same": same, "pid": 101}, "forkserver": {"same": same, "pid": 102}, "kernel_pid": 100}
    assert F["proof_c090"](real) is True
    assert F["proof_c090"]({**real, "spawn": {"same": False, "pid": 101}}) is False
    assert F["proof_c090"]({**real, "forkserver": {"same": True, "pid": 100}}) is False  # ran in the kernel


def test_c092_holds_on_a_fresh_interpreter_and_fails_on_a_copy_of_the_kernel():
    fork = {"cmdline": "-m ipykernel_launcher -f k.json", "mark": "set in the kernel", "modules": ["pandas"]}
    real = {"spawn": {"cmdline": SPAWN_CMD, "mark": None, "modules": []}, "fork": fork}
    assert F["proof_c092"](real) is True
    assert F["proof_c092"]({**real, "spawn": fork}) is False
    assert F["proof_c092"]({**real, "spawn": {**real["spawn"], "modules": ["pandas"]}}) is False


def test_c091_holds_on_the_fork_rule_and_fails_if_workers_cannot_run_cuda_at_all():
    msg = (
        "Caught RuntimeError in DataLoader worker process 0.\nRuntimeError: Cannot re-initialize CUDA in forked "
        "subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method"
    )
    assert F["proof_c091"]({"fork_error": msg, "spawn_ok": True}) is True
    assert F["proof_c091"]({"fork_error": msg, "spawn_ok": False}) is False  # the seed: no worker can run .cuda()
    assert F["proof_c091"]({"fork_error": "", "spawn_ok": True}) is False  # fork after CUDA init worked
    assert F["proof_c091"]({"fork_error": "CUDA out of memory", "spawn_ok": True}) is False


NO_GPU = {
    "message": "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
    "the 'spawn' start method",
    "order ok": True,
}
CPU_WORKER = {"cuda build": False, "bad fork": False, "error": "AssertionError: Torch not compiled with CUDA enabled"}
CUDA_WORKER = {
    "cuda build": True,
    "bad fork": True,
    "error": "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
    "you must use the 'spawn' start method",
}


@pytest.mark.parametrize("worker", [CPU_WORKER, CUDA_WORKER], ids=["cpu wheel", "cuda wheel without a gpu"])
def test_c091_without_a_gpu_holds_on_what_each_build_really_does(worker):
    assert F["proof_c091_no_gpu"]({**NO_GPU, **worker}) is True


@pytest.mark.parametrize(
    "worker, change",
    [
        (CPU_WORKER, {"bad fork": True}),  # a CPU build that poisoned forks
        (CUDA_WORKER, {"bad fork": False, "error": "RuntimeError: Found no NVIDIA driver on your system"}),  # no poison
        (CUDA_WORKER, {"error": "RuntimeError: DataLoader worker cannot run CUDA"}),  # the seed's blanket rule
        (CPU_WORKER, {"message": ""}),  # the rule is not in the source
        (CPU_WORKER, {"order ok": False}),
    ],
    ids=["cpu-poisoned", "cuda-unpoisoned", "seed-blanket-rule", "no-rule-in-source", "checks-out-of-order"],
)
def test_c091_without_a_gpu_fails_when_the_worker_stops_elsewhere(worker, change):
    assert F["proof_c091_no_gpu"]({**NO_GPU, **worker, **change}) is False


def test_c091_without_a_gpu_is_gpu_only_expecting_partly_from_the_source_and_measured_on_a_gpu():
    """The one rule (issue 25): the CPU verdict decides nothing, says what the source expects, and rests on it."""
    calls = {}
    for cell in read(NB).cells:
        if cell.cell_type == "code" and 'tc.claim("C091")' in cell.source:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "verdict":
                    calls[ast.literal_eval(node.args[1])] = {k.arg: ast.unparse(k.value) for k in node.keywords}
    assert set(calls) == {"partly", "gpu-only"}
    assert calls["gpu-only"]["expect"] == "'partly'" and calls["gpu-only"]["basis"] == "'source'"
    assert calls["partly"]["basis"] == "'measured'" and "source" not in calls["partly"]


# C117 / C118: seeding ------------------------------------------------------------------------


def _observed(draws, columns) -> dict:
    return {c: [F["per_worker"](draws, c, e) for e in (0, 1)] for c in columns}


COLS = ("torch", "random", "np.random", "self.rng")


def _same_everywhere(worker_id):
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


def test_c117_holds_on_torch_and_fails_when_workers_share_their_seeds_or_the_dataset_rng_is_fixed():
    assert F["proof_c117"](_observed(F["seeding_demo"](seed=7), COLS)) is True
    assert F["proof_c117"](_observed(F["seeding_demo"](_same_everywhere, seed=7), COLS)) is False
    assert F["proof_c117"](_observed(F["seeding_demo"](F["my_seed_worker"], seed=7), COLS)) is False


def test_c118_holds_on_the_seed_recipe_and_fails_on_a_recipe_that_really_fixes_it():
    def observed(draws):
        return {**_observed(draws, ("torch", "self.rng")), "initial_seeds": sorted(set(draws.initial_seed))}

    assert F["proof_c118"](observed(F["seeding_demo"](F["seed_article_init"], seed=7))) is True
    assert F["proof_c118"](observed(F["seeding_demo"](F["my_seed_worker"], seed=7))) is False


# C095: the sampler runs in the main process -----------------------------------------------------


class _WhereSampler(RandomSampler):
    def __iter__(self):
        self.ran_in = getattr(self, "ran_in", []) + [os.getpid()]
        yield from super().__iter__()


class _SamplesInWorker(IterableDataset):
    """What the seed describes: every worker draws its own random indices."""

    def __iter__(self):
        info = get_worker_info()
        g = torch.Generator().manual_seed(info.id)
        for _ in range(2):
            yield {"worker": torch.tensor([info.id] * 3), "index": torch.randint(0, 12, (3,), generator=g)}


def test_c095_holds_on_torch_and_fails_when_workers_sample_on_their_own():
    sampler = _WhereSampler(DrawDataset(12), generator=torch.Generator().manual_seed(0))
    loader = DataLoader(DrawDataset(12), batch_size=3, sampler=sampler, num_workers=2, multiprocessing_context=FORK)
    epochs = [[(int(b["worker"][0]), b["index"].tolist()) for b in loader] for _ in range(2)]
    real = {"epochs": epochs, "ran_in": sampler.ran_in, "main_pid": os.getpid(), "n": 12, "workers": 2}
    assert F["proof_c095"](real) is True
    seedlike = DataLoader(_SamplesInWorker(), batch_size=None, num_workers=2, multiprocessing_context=FORK)
    own = [[(int(b["worker"][0]), b["index"].tolist()) for b in seedlike] for _ in range(2)]
    assert F["proof_c095"]({**real, "epochs": own, "ran_in": []}) is False
    assert F["proof_c095"]({**real, "ran_in": [12345, 12345]}) is False
