"""Lab 07's checks and Try-it 09.2 keep working in a process whose first backward would poison its forks.

With a GPU and a CUDA build, a process's first ``backward()`` of any kind starts autograd's device threads and
installs a fork handler (torch/csrc/autograd/engine.cpp ``start_device_threads`` -> ``track_bad_autograd_forks``):
from then on no fork of it can run backward. The checks fork their ranks from the learner's kernel (or the grader's
process), so a judge that called ``backward()`` there would fail every later case of a correct answer.

Without a GPU, a CUDA build does the same when its first backward comes after a ``torch.compile``. So a fresh
interpreter here compiles first: from then on, exactly as on a GPU machine, one backward in that process would
poison its forks. It runs lab 07's public and hidden checks (the reference passes, a wrong answer fails for its
reason) and Try-it 09.2, then runs one backward itself, shows that a fork's backward now fails (the poison was
real), and that the same reference answer then fails: what a judge's own backward did to correct answers. The CPU
wheel never starts device threads, so there the poison cannot be reproduced and the test is skipped by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

from conftest import ROOT
from torchcontracts.lessons.l09_distributed.rank_runner import BAD_AUTOGRAD_FORK

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not dist.is_gloo_available(), reason="the checks fork a gloo group"
    ),
    pytest.mark.slow,  # a fresh interpreter that compiles and runs every lab 07 check
]

ARMED_KERNEL = r"""
import contextlib, json, os, sys, warnings
from pathlib import Path

warnings.simplefilter("ignore")
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from torchcontracts.grading.plan import lab_spec
from torchcontracts.lessons.l09_distributed.tryit import EXERCISES


def ddp_grads(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
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


def t1_no_scale(rank, world_size, model, x, y, n_global):
    ddp = DDP(model)
    F.mse_loss(ddp(x), y).backward()
    return [p.grad for p in model.parameters()]


def t3_no_no_sync(rank, world_size, ddp_model, micro_batches):
    for x, y in micro_batches:
        (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def average_gradients(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def forks_can_run_backward():
    pid = os.fork()
    if pid == 0:
        try:
            torch.ones(1, requires_grad=True).sum().backward()
            os._exit(0)
        except RuntimeError:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


spec = lab_spec(Path(sys.argv[1]), "lab07_ddp")  # public and hidden checks, the grader's way
checks = {task: spec.checks_for(task) for task in spec.tasks}
failures = lambda fn, task: [o.reason for o in (c.run_local(fn, seed=12345) for c in checks[task]) if not o.ok]

torch.compile(lambda x: x.sin() * 2, backend="eager")(torch.ones(3))  # armed: the next first backward poisons
report = {"torch": torch.__version__, "hidden checks": sum(c.hidden for cs in checks.values() for c in cs)}
report["reference"] = {t: failures(fn, t) for t, fn in (("t1", ddp_grads), ("t2", rank_indices), ("t3", accumulate))}
report["wrong"] = {"t1": failures(t1_no_scale, "t1"), "t3": failures(t3_no_no_sync, "t3")}
report["09.2"] = [o.reason for o in EXERCISES["09.2"].run(average_gradients) if not o.ok]
report["forks ran backward before"] = forks_can_run_backward()
torch.ones(1, requires_grad=True).sum().backward()  # this process's first backward, as a judge's used to be
report["poisoned"] = not forks_can_run_backward()
report["reference after"] = failures(ddp_grads, "t1")
print(json.dumps(report))
"""


def test_checks_pass_a_correct_answer_in_a_process_one_backward_would_poison():
    proc = subprocess.run(
        [sys.executable, "-c", ARMED_KERNEL, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if not report["poisoned"]:
        pytest.skip(
            f"torch {report['torch']} (the CPU wheel): its first backward after torch.compile starts no autograd "
            "device threads, so a fork cannot be poisoned here; run this test with the CUDA build"
        )
    assert report["forks ran backward before"], "the checks themselves poisoned the process"
    assert report["reference"] == {"t1": [], "t2": [], "t3": []}, report["reference"]
    assert report["hidden checks"] >= 3
    assert report["09.2"] == [], report["09.2"]
    t1, t3 = report["wrong"]["t1"], report["wrong"]["t3"]
    assert t1 and "scale this rank's loss by n_local * world_size / n_global" in t1[0], t1
    assert t3 and "4 all-reduces: wrap every backward but the last in ddp_model.no_sync()" in t3[0], t3
    # the poison was real: after one backward here, the same correct answer fails with the runner's one-line cause
    after = report["reference after"]
    assert after and all("cannot run backward: " + BAD_AUTOGRAD_FORK[:60] in reason for reason in after), after
