"""Run a submission's plan in limited kernels, step by step, and collect the sealed answers and what went wrong.

``grading.run`` decides the order of kernels and the scores; this module drives one kernel (and the second
one that replays the cells when the first died before the hidden checks) and records, per task, a coded
reason (``reasons.Why``) for anything that zeroes its checks. Nothing here renders or reads human text.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import itertools
import json
import os
import secrets
import struct
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from torchcontracts.checks import Case, Check
from torchcontracts.grading.kernel import CellRun, GradingKernel
from torchcontracts.grading.plan import Plan, Step
from torchcontracts.grading.protocol import (
    BASELINE,
    GUARD_LOG,
    NOTE_HOOK,
    NOTE_RECORDS,
    NOTE_SIGNAL,
    NOTE_THREADS,
    TAMPER_SEAL,
    TAMPER_SOLUTIONS,
    case_file,
    driver_call,
    missing_file,
    unpack_sealed,
)
from torchcontracts.grading.reasons import NOT_GRADED, Reason, Why
from torchcontracts.grading.results import GradeOptions
from torchcontracts.grading.sandbox import kernel_uid
from torchcontracts.labs.load import module_name

__all__ = ["KernelJob", "KernelLog", "grade_group", "run_kernel"]

_KERNELS = itertools.count()  # numbers the kernels of this process (each gets its own uid in bwrap mode)


@dataclasses.dataclass
class KernelLog:
    """What happened in one kernel, per task: a reason that zeroes its checks, and notes."""

    fail: dict[str, Why] = dataclasses.field(default_factory=dict)  # every check of the task
    hidden_fail: dict[str, Why] = dataclasses.field(default_factory=dict)  # its hidden checks only
    notes: dict[str, Why] = dataclasses.field(default_factory=dict)
    tamper: list[str] = dataclasses.field(default_factory=list)  # protocol names and fingerprint names
    crashed_at: int | None = None  # the plan step at which the kernel died before the hidden checks
    done: set[str] = dataclasses.field(default_factory=set)  # tasks whose public checks were sealed
    hidden_done: set[str] = dataclasses.field(default_factory=set)  # tasks whose hidden checks were sealed


@dataclasses.dataclass
class KernelJob:
    """What one kernel runs: the plan's steps, the checks it drives, and where the answers go."""

    lab: str
    steps: list[Step]
    tasks: list[str]  # every task of the lab, in order
    missing: frozenset[str]  # tasks whose solution cell the submission lacks
    members: list[tuple[int, Check]]  # (index in the lab's checks, check) driven in this kernel
    cases: dict[int, list[Case]]
    opts: GradeOptions
    scratch: Path
    name: str
    deadline: float  # time.monotonic() at which the whole submission's time runs out
    collected: dict[str, bytes] = dataclasses.field(default_factory=dict)  # sealed records, by file name
    fresh_sandbox: bool = False  # a kernel of a new sandbox of its own (``grading.phases``): nothing earlier is there


def _cases_blob(cases: list[Case], hidden: bool) -> str:
    """Cases as base64 of ``torch.save`` bytes; hidden checks' labels stay in the grader."""
    buf = io.BytesIO()
    torch.save([("" if hidden else c.label, c.args) for c in cases], buf)
    return base64.b64encode(buf.getvalue()).decode()


def _jobs(checks: list[tuple[int, Check]], cases: dict[int, list[Case]]) -> list[dict[str, Any]]:
    return [
        {
            "check": idx,
            "target": check.target,
            "cases": _cases_blob(cases[idx], check.hidden),
            "call": check.call.__name__ if check.call else None,
        }
        for idx, check in checks
    ]


def expected_records(jobs: list[dict[str, Any]], cases: dict[int, list[Case]]) -> set[str]:
    """Every record name a step's driver may seal: one per case of each of its checks, or the check's
    'not defined' record. Nothing else is accepted from that step."""
    names: set[str] = set()
    for j in jobs:
        names.add(missing_file(j["check"]))
        names.update(case_file(j["check"], n) for n in range(len(cases[j["check"]])))
    return names


def _take_step(
    run: CellRun,
    base: dict[str, str],
    log: KernelLog,
    task: str,
    fails: dict[str, Why],
    expected: set[str],
    taken: Mapping[str, bytes],
) -> dict | None:
    """The sealed records of one step; None when there is none (the driver never sealed). A record this step's
    checks do not produce, a name sealed twice or a name an earlier step already sealed is a forgery (tampering):
    each record is accepted once, from the step that asked for it."""
    if run.seal_problem:
        log.tamper.append(TAMPER_SEAL)
    if run.sealed is None:
        return None
    try:
        header, blobs = unpack_sealed(run.sealed)
    except (ValueError, KeyError, TypeError, struct.error):
        log.tamper.append(TAMPER_SEAL)
        return None
    notes = header.get("notes") if isinstance(header.get("notes"), list) else []
    if NOTE_RECORDS in notes or any(name not in expected or name in taken for name in blobs):
        log.tamper.append(TAMPER_SEAL)
        return None
    snapshot = header.get("snapshot") if isinstance(header.get("snapshot"), dict) else {}
    for name, ident in base.items():
        if snapshot.get(name) != ident and name not in log.tamper:
            log.tamper.append(name)
    for note in (NOTE_HOOK, NOTE_SIGNAL):
        if note in notes and note not in log.tamper:
            log.tamper.append(note)
    if any(isinstance(n, str) and n.startswith(NOTE_THREADS) for n in notes):
        fails.setdefault(task, Why.of(Reason.THREADS_LEFT))
    return blobs


def _where(step: Step) -> Why:
    """The step a kernel died in."""
    code = {"student": Reason.WHERE_CELL, "hidden": Reason.WHERE_HIDDEN, "driver": Reason.WHERE_CHECKS}
    return Why.of(code[step.kind], task=step.task) if step.kind in code else Why.of(Reason.WHERE_COURSE)


def needs_own_sandbox(job: KernelJob) -> bool:
    """A kernel that must not share its fork server's sandbox: a fresh-process phase (``phases``), or any kernel
    in bwrap mode without root. As root, kernels of one sandbox get their own uid and their own /tmp, /dev/shm,
    IPC and network (``places``); without root they would share one uid and all of those, so each submission's
    kernel gets a sandbox of its own (about 3 s more to start) that binds only its own folder."""
    return job.fresh_sandbox or (job.opts.sandbox == "bwrap" and os.geteuid() != 0)


def _start(job: KernelJob, log: KernelLog, tasks_here: list[str]) -> tuple[GradingKernel, int | None] | None:
    """A fresh kernel, or None with every task of this kernel failed (it could not start)."""
    opts = job.opts
    for attempt in range(2):  # a kernel that died before any learner code ran gets one more start
        uid = kernel_uid(next(_KERNELS)) if opts.sandbox == "bwrap" else None
        try:
            kernel = GradingKernel(
                job.scratch / (f"k-{job.name}" + (f"-{attempt}" if attempt else "")),
                course=opts.course,
                sandbox=opts.sandbox,
                uid=uid,
                mem_mb=opts.mem_mb,
                threads=opts.threads,
                fork=opts.fork_server,
                fresh_sandbox=needs_own_sandbox(job),
            )
        except (RuntimeError, OSError) as err:
            for t in tasks_here:
                log.fail[t] = Why.of(Reason.NO_START, why=str(err))
            return None
        if attempt == 0 and "while starting" in kernel.dead_reason:
            kernel.shutdown()
            continue
        break
    return kernel, uid


def run_kernel(job: KernelJob) -> KernelLog:
    """Run the steps in one fresh kernel: each task's public checks after its cell, all hidden checks at the end.

    Hidden checks run last so that no hidden input is in the kernel before every public answer
    (whose error text a learner sees) has been sealed.
    """
    log = KernelLog()
    opts, members = job.opts, job.members
    public = {t: [(i, c) for i, c in members if c.task == t and not c.hidden] for t in job.tasks}
    hidden = [(i, c) for i, c in members if c.hidden and c.task not in job.missing]
    tasks_here = [t for t in job.tasks if any(c.task == t for _, c in members)]
    started = _start(job, log, tasks_here)
    if started is None:
        return log
    kernel, uid = started
    with kernel:
        io_dir = kernel.workdir
        guard = str(opts.course / "solutions") if opts.sandbox == "none" else ""
        first = kernel.run(
            driver_call("start", str(io_dir), module_name(job.lab), opts.threads, guard, uid is not None),
            max(60.0, opts.cell_timeout),
        )
        base = _read_baseline(io_dir)  # read before any learner code runs
        if first.status != "ok" or base is None:
            why = kernel.dead_reason or (first.one_line() if first.status != "ok" else Why.of(Reason.NO_BASELINE))
            for t in tasks_here:
                log.fail[t] = Why.of(Reason.NO_START, why=why)
            return log
        guard_log = io_dir / GUARD_LOG
        hidden_tasks = [t for t in job.tasks if any(c.task == t for _, c in hidden)]
        for n, step in enumerate([*job.steps, *(Step("hidden", "", t) for t in hidden_tasks)]):
            drives, task = step.kind in ("driver", "hidden"), step.task
            if step.kind == "driver" and not public.get(task):
                continue
            left = job.deadline - time.monotonic()
            if left <= 0:
                for t in tasks_here:
                    (log.hidden_fail if t in log.done else log.fail).setdefault(
                        t, Why.of(Reason.OUT_OF_TIME, limit=opts.total_timeout)
                    )
                break
            token = secrets.token_hex(12) if drives else None
            expected: set[str] = set()
            if drives:
                jobs = _jobs(
                    [(i, c) for i, c in hidden if c.task == task] if step.kind == "hidden" else public[task], job.cases
                )
                expected = expected_records(jobs, job.cases)
                code = driver_call("drive", {"token": token, "jobs": jobs})
            else:
                code = step.source
            limit = min(opts.cell_timeout, left)
            run = kernel.run(code, limit, seal=token)
            if guard_log.exists() and guard_log.stat().st_size and TAMPER_SOLUTIONS not in log.tamper:
                log.tamper.append(TAMPER_SOLUTIONS)
            fails = log.hidden_fail if step.kind == "hidden" else log.fail
            if drives:
                blobs = _take_step(run, base, log, task, fails, expected, job.collected)
                if blobs is not None:
                    job.collected.update(blobs)
                elif run.status in ("ok", "error") and TAMPER_SEAL not in log.tamper:
                    log.tamper.append(TAMPER_SEAL)
                if run.status == "timeout":
                    fails.setdefault(task, Why.of(Reason.STEP_TIMEOUT, limit=limit))
                elif run.status == "error":
                    fails.setdefault(task, Why.of(Reason.DRIVER_FAILED))
                (log.hidden_done if step.kind == "hidden" else log.done).add(task)
            elif step.kind == "student" and run.status in ("error", "timeout") and task not in log.notes:
                log.notes[task] = (
                    Why.of(Reason.CELL_TIMED_OUT, seconds=run.seconds)
                    if run.status == "timeout"
                    else Why.of(Reason.CELL_RAISED, ename=run.ename)
                )
            if not kernel.alive:
                _died(job, log, step, n, tasks_here, kernel.dead_reason or run.evalue)
                break
    return log


def _died(job: KernelJob, log: KernelLog, step: Step, n: int, tasks_here: list[str], reason: str) -> None:
    """The kernel died in step ``n``: fail what it had not sealed, and mark where a second kernel may resume."""
    where, drives = _where(step), step.kind in ("driver", "hidden")
    why = Why.of(Reason.KERNEL_DIED, why=reason, where=where)
    if step.kind == "hidden":  # an exit code is a channel the learner chooses: say only that it died
        why = Why.of(Reason.KERNEL_DIED_HIDDEN, where=where)
    log.crashed_at = min(n, len(job.steps))  # a second kernel replays the cells before this step
    for t in tasks_here:
        if t in log.done and t not in log.hidden_done and not (drives and t == step.task):
            log.hidden_fail.setdefault(t, why)  # its hidden step was still to come
        elif t not in log.done or drives and t == step.task:
            (log.hidden_fail if step.kind == "hidden" else log.fail).setdefault(t, why)


def _read_baseline(io_dir: Path) -> dict[str, str] | None:
    path = io_dir / BASELINE
    try:
        if path.is_symlink() or path.stat().st_size > 16 * 2**20:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def grade_group(job: KernelJob, plan: Plan) -> KernelLog:
    """One kernel for these checks; if it died before the hidden checks, a second kernel replays the
    cells before the one that killed it and runs the hidden checks of the tasks already done."""
    log = run_kernel(job)
    if log.crashed_at is None or not log.done or time.monotonic() > job.deadline:
        return log
    steps = [s for s in plan.steps[: log.crashed_at] if s.kind != "driver"]
    crashed = {t for t, why in log.hidden_fail.items() if why.code not in NOT_GRADED} | {
        t
        for t in log.done
        if t in log.hidden_fail
        and t not in log.hidden_done
        and log.crashed_at >= len(plan.steps)
        and log.hidden_fail[t].get("where") == Why.of(Reason.WHERE_HIDDEN, task=t)
    }
    again = [
        (i, c)
        for i, c in job.members
        if c.hidden
        and c.task in log.done
        and c.task not in log.fail
        and c.task not in log.hidden_done
        and c.task not in crashed
    ]
    if not again:
        return log
    extra = run_kernel(dataclasses.replace(job, steps=steps, members=again, name=f"{job.name}-hidden"))
    for t in {c.task for _, c in again}:
        log.hidden_fail.pop(t, None)
        if t in extra.hidden_fail or t in extra.fail:
            log.hidden_fail[t] = extra.hidden_fail.get(t) or extra.fail[t]
    log.tamper += [n for n in extra.tamper if n not in log.tamper]
    return log
