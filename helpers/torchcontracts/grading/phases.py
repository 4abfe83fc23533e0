"""Checks of several calls (``Check.then``): each later call in a new kernel of a new sandbox.

A check with ``then`` (say, a run that returns a checkpoint, then its resume) must not let the later call
reach anything the earlier one left behind in its process: a module-level dict, an attribute of torch,
a file in ``/tmp`` or the working folder. So after a group's kernel has sealed the first answers, the
grader loads them here, asks ``then(case, answers)`` for each case's next call, and runs those calls in a
kernel forked by a fork server of its own, in a sandbox of its own (a new ``/tmp``, ``/dev`` and IPC
namespace, a new uid as root) whose only writable folder is new too. What reaches the next call is what
``then`` put into its case: plain data, sealed as bytes by the earlier kernel and loaded here with
``weights_only=True``. Rounds go on until no case has a next call.

The judge then sees, for each case, one record made here: the original case's inputs and the list of its
answers. A case whose call raised, or whose answer could not be loaded, keeps that call's own record, so the
judge says what went wrong as it does for any check.
"""

from __future__ import annotations

import dataclasses
import io
import secrets
from typing import Any

import torch

from torchcontracts.checks import Case, Check
from torchcontracts.grading.judge import same_inputs
from torchcontracts.grading.plan import Plan
from torchcontracts.grading.protocol import MAX_RECORD_BYTES, case_file, missing_file
from torchcontracts.grading.steps import KernelJob, KernelLog, grade_group

__all__ = ["grade_phases"]

MAX_ROUNDS = 8  # calls of one case, all rounds together


def _record(blob: bytes | None) -> dict[str, Any] | None:
    """A sealed answer as plain data; None when there is none or it is not one."""
    if blob is None or len(blob) > MAX_RECORD_BYTES:
        return None
    try:
        record = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception:  # noqa: BLE001 - the judge says why, from the same blob
        return None
    return record if isinstance(record, dict) else None


def _combined(case: Case, answers: list[Any]) -> bytes:
    """The record the judge reads for a case of several calls (made here, from loaded data)."""
    buf = io.BytesIO()
    torch.save({"args": list(case.args), "out": list(answers)}, buf)
    return buf.getvalue()


def _merge(log: KernelLog, other: KernelLog) -> None:
    """What went wrong in a later round counts against the task, as in the first."""
    for task, why in other.fail.items():
        log.fail.setdefault(task, why)
    for task, why in other.hidden_fail.items():
        log.hidden_fail.setdefault(task, why)
    for task, why in other.notes.items():
        log.notes.setdefault(task, why)
    log.tamper += [n for n in other.tamper if n not in log.tamper]


def grade_phases(job: KernelJob, plan: Plan) -> KernelLog:
    """``grade_group``, then the later calls of the checks with ``then``, round by round, each round in a new
    kernel of a new sandbox; leaves in ``job.collected`` the record the judge reads for each of their cases."""
    log = grade_group(job, plan)
    phased = {i: c for i, c in job.members if c.then is not None}
    if not phased:
        return log
    answers: dict[tuple[int, int], list[Any]] = {}
    current: dict[tuple[int, int], Case] = {}
    pending: dict[tuple[int, int], str] = {}  # (check, case) -> the record its last call sealed
    for i in phased:
        for n, case in enumerate(job.cases[i]):
            answers[i, n], current[i, n], pending[i, n] = [], case, case_file(i, n)
    collected, final, missing = job.collected, {}, set()
    for round_ in range(1, MAX_ROUNDS + 1):
        follow: dict[tuple[int, int], Case] = {}
        for (i, n), name in pending.items():
            check = phased[i]
            if missing_file(i) in collected:
                missing.add(i)
                continue
            blob = collected.get(name)
            record = _record(blob)
            if (
                record is None
                or "error" in record
                or not same_inputs(list(current[i, n].args), list(record.get("args", ())))
                or round_ == MAX_ROUNDS
            ):
                if blob is not None:
                    final[case_file(i, n)] = blob  # the judge says what is wrong with it
                continue
            answers[i, n].append(record.get("out"))
            try:
                nxt = check.then(job.cases[i][n], list(answers[i, n]))
            except Exception:  # noqa: BLE001 - a course bug on an odd answer: judge what there is
                nxt = None
            if nxt is None:
                final[case_file(i, n)] = _combined(job.cases[i][n], answers[i, n])
            else:
                current[i, n] = follow[i, n] = nxt
        follow = {k: c for k, c in follow.items() if not _failed(log, phased[k[0]])}
        if not follow:
            break
        pending, collected = _next_round(job, plan, log, phased, follow, round_)
    for i in phased:  # the first round's records of these checks are replaced by what the judge reads
        for name in [k for k in job.collected if k.startswith(f"{i}-") or k == missing_file(i)]:
            del job.collected[name]
    job.collected.update(final)
    job.collected.update({missing_file(i): b"" for i in missing})
    return log


def _failed(log: KernelLog, check: Check) -> bool:
    return check.task in log.fail or (check.hidden and check.task in log.hidden_fail)


def _next_round(
    job: KernelJob,
    plan: Plan,
    log: KernelLog,
    phased: dict[int, Check],
    follow: dict[tuple[int, int], Case],
    round_: int,
) -> tuple[dict[tuple[int, int], str], dict[str, bytes]]:
    """Run the next calls in a new kernel of a new sandbox: (where each case's record is, the sealed records)."""
    order = sorted(follow)
    cases: dict[int, list[Case]] = {}
    pending: dict[tuple[int, int], str] = {}
    for i, n in order:
        cases.setdefault(i, []).append(follow[i, n])
        pending[i, n] = case_file(i, len(cases[i]) - 1)
    scratch = job.scratch / f"round{round_ + 1}-{secrets.token_hex(6)}"  # its sandbox's one writable folder
    scratch.mkdir(mode=0o711)
    scratch.chmod(0o711)
    sub = dataclasses.replace(
        job,
        members=[(i, phased[i]) for i in cases],
        cases=cases,
        scratch=scratch,
        name=f"{job.name}-round{round_ + 1}",
        collected={},
        fresh_sandbox=True,
    )
    _merge(log, grade_group(sub, plan))
    return pending, sub.collected
