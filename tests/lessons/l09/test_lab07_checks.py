"""Lab 07 (DDP): common wrong answers fail for the right reason, and a rank that hangs, dies or forges fails in one line.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers) is in
``test_lab_contract.py``; here are lab 07's wrong answers, its hostile ones, and one real grading run
(bubblewrap when it works here) of a submission whose ranks hang, crash and forge.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from typing import Any, Callable

import nbformat
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from conftest import ROOT, checks_by_task, read
from submissions.lab07_shortcuts import swap_files
from torchcontracts.checks import Check
from torchcontracts.lessons.l09_distributed.dist_tools import live_children
from torchcontracts.lessons.l09_distributed.lab07_ddp import judge_grads, lab, run_ddp_grads

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not dist.is_gloo_available(), reason="lab 07's checks fork a gloo group"
)


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(lab.lab_id)


def _ranks_alive() -> list[int]:
    """Live children of this process, except the grader's fork server (kept for the next submission, closed at exit)."""

    def ours(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            return False
        return b"torchcontracts.grading" not in cmd and b"bwrap" not in cmd

    return [p for p in live_children() if ours(p)]


@pytest.fixture(autouse=True)
def no_worker_survives():
    yield
    assert _ranks_alive() == [], "a forked rank outlived its check"


def _failures(checks: list[Check], fn: Callable[..., Any], hidden: bool | None = None) -> list[str]:
    chosen = [c for c in checks if hidden is None or c.hidden == hidden]
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in chosen) if not o.ok]


# --- references ---------------------------------------------------------------------------------------


def ddp_grads(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)  # keep it alive until backward has run: its reducer does the all-reduce
    (F.mse_loss(ddp(x), y) * (x.shape[0] * world_size / n_global)).backward()
    return [p.grad for p in model.parameters()]


def rank_indices(rank, world_size, dataset_len, epochs, seed):
    sampler = DistributedSampler(range(dataset_len), shuffle=True, seed=seed)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def accumulate(rank, world_size, ddp_model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else ddp_model.no_sync():
            (F.mse_loss(ddp_model(x), y) / k).backward()


@contextlib.contextmanager
def no_backward_here():
    """Make ``backward()`` raise in this process (its forks still run it): the checks must never call it here.

    With a GPU and a CUDA build, the forking process's first backward would stop every later rank from running one
    (test_fork_poison.py shows it on the CUDA build). A judge's failure shows up as a failed check."""
    parent, real = os.getpid(), torch.autograd.backward

    def guarded(*args, **kwargs):
        if os.getpid() == parent:
            raise AssertionError("backward() ran in the process that forks the ranks")
        return real(*args, **kwargs)

    torch.autograd.backward = guarded
    try:
        yield
    finally:
        torch.autograd.backward = real


def test_the_references_pass_public_and_hidden_checks(checks):
    with no_backward_here():
        for task, fn in (("t1", ddp_grads), ("t2", rank_indices), ("t3", accumulate)):
            assert _failures(checks[task], fn) == [], task


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_the_judges_chain_rule_gradient_is_autograds(rows):
    from torchcontracts.lessons.l09_distributed.lab07_judges import make_model, mlp_grads

    model = make_model(seed=rows)
    x, y = torch.randn(rows, 6), torch.randn(rows, 2)
    F.mse_loss(model(x), y).backward()
    want = [p.grad for p in model.parameters()]
    got = mlp_grads([p.detach() for p in model.parameters()], x, y)
    assert [g.shape for g in got] == [w.shape for w in want] and all(g.dtype == torch.float32 for g in got)
    assert all(torch.allclose(g, w, atol=1e-6, rtol=1e-5) for g, w in zip(got, want))


# --- t1 -----------------------------------------------------------------------------------------------


def t1_no_scale(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
    F.mse_loss(ddp(x), y).backward()
    return [p.grad for p in model.parameters()]


def t1_temporary_ddp(rank, world_size, model, x, y, n_global):
    F.mse_loss(DDP(model)(x), y).backward()  # the wrapper is garbage before backward: nothing is all-reduced
    return [p.grad for p in model.parameters()]


def t1_no_ddp(rank, world_size, model, x, y, n_global):
    F.mse_loss(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def t1_sum_after_ddp(rank, world_size, model, x, y, n_global):
    grads = ddp_grads(rank, world_size, model, x, y, n_global)
    for g in grads:
        dist.all_reduce(g)  # DDP already averaged: this doubles it
    return grads


def t1_no_grads(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
    F.mse_loss(ddp(x), y).backward()
    return model


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t1_no_scale, "scale this rank's loss by n_local * world_size / n_global"),
        (t1_no_ddp, "gradient of this rank's shard alone: wrap the model in DDP"),
        (t1_temporary_ddp, "keep the DDP object alive until backward"),
        (t1_sum_after_ddp, "2x too large"),
        (t1_no_grads, "not plain data"),
    ],
)
def test_t1_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t1"], wrong, hidden=False)
    assert fails and reason in fails[0] and "\n" not in fails[0], fails


def t1_forger(rank, world_size, model, x, y, n_global):
    """No process group: look for the global batch in this process's memory, else use the shard."""
    # type(), not isinstance(): isinstance dereferences a weakref.proxy, and a dead one raises ReferenceError
    found = [
        o for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and o.dim() == 2 and o.shape[0] == n_global
    ]
    xs = [t for t in found if t.shape[1] == x.shape[1]]
    ys = [t for t in found if t.shape[1] == y.shape[1]]
    if xs and ys:
        x, y = xs[0], ys[0]
    F.mse_loss(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def test_t1_a_rank_cannot_find_the_global_batch_without_communicating(checks):
    fails = _failures(checks["t1"], t1_forger, hidden=False)
    assert fails and ("shard alone" in fails[0] or "values differ" in fails[0]), fails


t1_swap_files = swap_files()  # issue 24: the ranks swap shards through files (tests/submissions/lab07_shortcuts.py)


def t1_gather_no_ddp(rank, world_size, model, x, y, n_global):
    """Gather the shards with a collective, then compute the whole batch's gradient with no DDP at all."""
    parts = [None] * world_size
    dist.all_gather_object(parts, (x, y))
    xs, ys = torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])
    F.mse_loss(model(xs), ys).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize(
    "shortcut, reason",
    [
        (t1_swap_files, "what this rank all-reduced is not a gradient of its own shard"),
        (t1_gather_no_ddp, "no DDP all-reduce ran on this rank"),
    ],
)
def test_t1_shards_swapped_or_gathered_fail_although_every_gradient_is_right(shortcut, reason, checks):
    case = checks["t1"][0].cases(12345)[0]
    out = run_ddp_grads(shortcut, case)
    rows = judge_grads(case, out)
    assert all(r.ok for r in rows if " grad " in r.name), [r.line() for r in rows]  # the gradients are right
    for hidden in (False, True):
        fails = _failures(checks["t1"], shortcut, hidden=hidden)
        assert fails and reason in fails[0] and "\n" not in fails[0], (hidden, fails)


def test_t1_the_reference_hands_each_ranks_own_shard_to_the_all_reduce(checks):
    case = checks["t1"][0].cases(12345)[0]
    rows = judge_grads(case, run_ddp_grads(ddp_grads, case))
    mine = [r for r in rows if r.name.endswith("its all-reduce")]
    assert len(mine) == len(case.args[1]) and all(r.ok for r in mine), [r.line() for r in rows]


def t1_rank1_hangs(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
    if rank == 1:
        time.sleep(300)
    return ddp_grads(rank, world_size, ddp.module, x, y, n_global)


def t1_rank1_dies(rank, world_size, model, x, y, n_global):
    if rank == 1:
        os._exit(9)
    return ddp_grads(rank, world_size, model, x, y, n_global)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t1_rank1_hangs, "raised TimeoutError: rank 1 never reached the collective"),
        (t1_rank1_dies, "raised ChildProcessError: rank 1 died (exit code 9)"),
    ],
)
def test_t1_a_hanging_or_dying_rank_fails_fast_in_one_line(wrong, reason, checks):
    t0 = time.monotonic()
    fails = _failures(checks["t1"], wrong, hidden=False)
    assert fails and reason in fails[0] and "\n" not in fails[0], fails
    assert time.monotonic() - t0 < 30


# --- t2 -----------------------------------------------------------------------------------------------


def t2_no_set_epoch(rank, world_size, dataset_len, epochs, seed):
    sampler = DistributedSampler(range(dataset_len), shuffle=True, seed=seed)
    return [list(sampler) for _ in range(epochs)]


def t2_seed_per_rank(rank, world_size, dataset_len, epochs, seed):
    return rank_indices(rank, world_size, dataset_len, epochs, seed + rank)


def t2_no_padding(rank, world_size, dataset_len, epochs, seed):
    out = []
    for epoch in range(epochs):  # DistributedSampler's shuffle, without its padding
        order = torch.randperm(dataset_len, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        out.append(order[rank::world_size])
    return out


def t2_contiguous_chunks(rank, world_size, dataset_len, epochs, seed):
    out = []
    sampler = DistributedSampler(range(dataset_len), num_replicas=1, rank=0, shuffle=True, seed=seed)
    for epoch in range(epochs):  # one shuffled order of the whole dataset, cut into blocks
        sampler.set_epoch(epoch)
        order = list(sampler)
        per = -(-dataset_len // world_size)
        out.append((order + order)[rank * per : (rank + 1) * per])
    return out


def t2_drop_last(rank, world_size, dataset_len, epochs, seed):
    sampler = DistributedSampler(range(dataset_len), shuffle=True, seed=seed, drop_last=True)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t2_no_set_epoch, "call sampler.set_epoch(epoch) before each epoch"),
        (t2_seed_per_rank, "visited by no rank"),
        (t2_no_padding, "pads by repeating"),
        (t2_contiguous_chunks, "not DistributedSampler's order"),
        (t2_drop_last, "visited by no rank"),
    ],
)
def test_t2_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t2"], wrong, hidden=False)
    assert fails and reason in fails[0], fails


# --- t3 -----------------------------------------------------------------------------------------------


def t3_no_no_sync(rank, world_size, ddp_model, micro_batches):
    for x, y in micro_batches:
        (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def t3_all_in_no_sync(rank, world_size, ddp_model, micro_batches):
    with ddp_model.no_sync():
        t3_no_no_sync(rank, world_size, ddp_model, micro_batches)


def t3_no_divide(rank, world_size, ddp_model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else ddp_model.no_sync():
            F.mse_loss(ddp_model(x), y).backward()


def t3_bypass_ddp(rank, world_size, ddp_model, micro_batches):
    for x, y in micro_batches:
        (F.mse_loss(ddp_model.module(x), y) / len(micro_batches)).backward()
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def t3_concatenated(rank, world_size, ddp_model, micro_batches):
    """The red team's shortcut: no accumulation, one forward and backward of the whole batch (one all-reduce)."""
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(ddp_model(x), y).backward()


def t3_forwards_then_one_backward(rank, world_size, ddp_model, micro_batches):
    """Every forward first (each fits), then one backward of the summed losses: one all-reduce, the right gradient."""
    k = len(micro_batches)
    losses = []
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else ddp_model.no_sync():
            losses.append(F.mse_loss(ddp_model(x), y) / k)
    sum(losses).backward()


def t3_sync_first(rank, world_size, ddp_model, micro_batches):
    """One all-reduce, but in the first backward: the later micro-batches stay local."""
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == 0 else ddp_model.no_sync():
            (F.mse_loss(ddp_model(x), y) / k).backward()


def t3_extra_sync_pass(rank, world_size, ddp_model, micro_batches):
    """Everything in no_sync, then a zero-loss forward and backward outside it to trigger the one all-reduce."""
    with ddp_model.no_sync():
        t3_no_no_sync(rank, world_size, ddp_model, micro_batches)
    (ddp_model(micro_batches[0][0]) * 0).sum().backward()


def t3_module_concatenated(rank, world_size, ddp_model, micro_batches):
    """The shortcut on the wrapped module, then its gradient all-reduced by hand: no DDP sync at all."""
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(ddp_model.module(x), y).backward()
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def t3_limit_removed(rank, world_size, ddp_model, micro_batches):
    """A forger: remove the model's forward hooks (the memory limit), then the shortcut."""
    ddp_model.module._forward_pre_hooks.clear()
    t3_concatenated(rank, world_size, ddp_model, micro_batches)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t3_no_no_sync, "4 all-reduces: wrap every backward but the last in ddp_model.no_sync()"),
        (t3_all_in_no_sync, "no all-reduce at all"),
        (t3_no_divide, "4x too large: divide each micro-batch's loss"),
        (t3_bypass_ddp, "no all-reduce at all"),
        (t3_concatenated, "the whole batch does not fit: 16 rows in one forward, at most 4 (one micro-batch)"),
        (t3_forwards_then_one_backward, "before the next forward: expected fb fb fb Fb+ar, got fffFb+ar"),
        (t3_sync_first, "an all-reduce in micro-batch 1's backward: only the last backward syncs"),
        (t3_extra_sync_pass, "5 forwards for 4 micro-batches"),
        (t3_module_concatenated, "the whole batch does not fit: 16 rows in one forward"),
        (t3_limit_removed, "no forward of the model was seen"),
    ],
)
def test_t3_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t3"], wrong, hidden=False)
    assert fails and reason in fails[0] and "\n" not in fails[0], fails


@pytest.mark.parametrize(
    "shortcut", [t3_concatenated, t3_forwards_then_one_backward, t3_no_no_sync, t3_all_in_no_sync, t3_sync_first]
)
def test_t3_shortcuts_fail_every_hidden_check_too(shortcut, checks):
    hidden = [c for c in checks["t3"] if c.hidden]
    assert hidden and len(_failures(checks["t3"], shortcut, hidden=True)) == len(hidden)


def test_t3_the_record_is_the_pattern_of_real_accumulation():
    from torchcontracts.lessons.l09_distributed.lab07_ddp import _t3_cases, expected_pattern, pattern, run_accumulate

    out = run_accumulate(accumulate, _t3_cases(7)[0])
    assert [pattern(r["events"]) for r in out["ranks"]] == [expected_pattern(4)] * 2 == ["fb fb fb Fb+ar"] * 2
    out = run_accumulate(t3_no_no_sync, _t3_cases(7)[0])
    assert [pattern(r["events"]) for r in out["ranks"]] == ["Fb+ar Fb+ar Fb+ar Fb+ar"] * 2


# --- the grader, for real: hanging, crashing and forging ranks -----------------------------------------

HOSTILE = {
    "t1": """
import time
def ddp_grads(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
    if rank == 1:
        time.sleep(3600)
    (F.mse_loss(ddp(x), y) * (x.shape[0] * world_size / n_global)).backward()
    return [p.grad for p in model.parameters()]
""",
    "t2": """
import os
def rank_indices(rank, world_size, dataset_len, epochs, seed):
    if rank == 1:
        os._exit(7)
    return [list(range(dataset_len))] * epochs
""",
    "t3": """
def accumulate(rank, world_size, ddp_model, micro_batches):
    for x, y in micro_batches:                      # local gradients only: through the module, DDP never syncs
        (F.mse_loss(ddp_model.module(x), y) / len(micro_batches)).backward()
""",
}


def test_the_grader_fails_hanging_crashing_and_local_ranks_in_one_line(tmp_path):
    from torchcontracts.grading.run import GradeOptions, grade_file
    from torchcontracts.grading.sandbox import choose_mode

    nb = read(ROOT / "solutions" / "lab07_ddp.ipynb")
    nb.cells = [c for c in nb.cells if c.metadata.get("torchcontracts", {}).get("role") != "hidden-check"]
    for cell in nb.cells:
        meta = cell.metadata.get("torchcontracts", {})
        if meta.get("role") == "solution":
            cell.source = HOSTILE[meta["task"]]
    path = tmp_path / "hostile.ipynb"
    nbformat.write(nb, path)
    result = grade_file(path, GradeOptions(course=ROOT, lab="lab07_ddp", sandbox=choose_mode("auto")))
    reasons = {t.id: t.reason for t in result.tasks}
    assert result.score == 0, reasons
    assert "TimeoutError: rank 1 never reached the collective" in reasons["t1"]
    assert "ChildProcessError: rank 1 died (exit code 7)" in reasons["t2"]
    assert "no all-reduce at all" in reasons["t3"]
    assert all("\n" not in r for r in reasons.values())
    assert result.seconds < 120
