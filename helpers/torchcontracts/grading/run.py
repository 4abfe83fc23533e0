"""Grade one submission: rebuild it, run it in limited kernels step by step, judge the sealed answers here, score it.

Scores come only from sealed answers judged in this process. What the learner's kernel reports about
itself (fingerprints, notes) can only lower a score: replaced torch or course code => 0 for all tasks.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import time
from pathlib import Path

from torchcontracts.checks import Case, Check, CheckOutcome, LabSpec
from torchcontracts.grading.artefacts import judging_deadline
from torchcontracts.grading.forkserver import scratch_root
from torchcontracts.grading.judge import judge
from torchcontracts.grading.phases import grade_phases
from torchcontracts.grading.plan import Plan, lab_spec, plan_run
from torchcontracts.grading.protocol import MODULE_PREFIX, NOTE_HOOK, NOTE_SIGNAL, TAMPER_SEAL, TAMPER_SOLUTIONS
from torchcontracts.grading.reasons import Reason, Why
from torchcontracts.grading.results import CheckResult, GradeOptions, GradeResult, TaskResult
from torchcontracts.grading.steps import KernelJob, KernelLog
from torchcontracts.grading.submission import GradeSetupError, SubmissionError, identify_lab, read_submission

__all__ = ["CheckResult", "GradeOptions", "GradeResult", "TaskResult", "grade_file"]  # results re-exported

_SPECIAL = {  # tamper names that are not a fingerprint, in the order they are said
    TAMPER_SOLUTIONS: Reason.TAMPER_SOLUTIONS,
    NOTE_HOOK: Reason.TAMPER_HOOK,
    TAMPER_SEAL: Reason.TAMPER_SEAL,
    NOTE_SIGNAL: Reason.TAMPER_SIGNAL,
}


def _describe_tamper(names: list[str]) -> Why:
    said = [Why.of(code) for key, code in _SPECIAL.items() if key in names]
    names = [n for n in names if n not in _SPECIAL]
    swapped = [n[len(MODULE_PREFIX) : -1] for n in names if n.startswith(MODULE_PREFIX)]
    names = [n for n in names if not any(n.startswith(m + ".") for m in swapped)]  # said once, as the module
    words = [
        Why.of(Reason.TAMPER_MODULE, name=n[len(MODULE_PREFIX) : -1]).text() if n.startswith(MODULE_PREFIX) else n
        for n in names
    ]
    if len(words) > 3:
        said.insert(0, Why.of(Reason.TAMPER_REPLACED_MORE, names=", ".join(words[:3]), n=len(words) - 3))
    elif words:
        said.insert(0, Why.of(Reason.TAMPER_REPLACED, names=", ".join(words)))
    return Why.of(Reason.TAMPER, what="; ".join(w.text() for w in said))


@dataclasses.dataclass(frozen=True)
class _Verdict:
    """One check's result before it is put into words: a coded reason, or the judge's outcome."""

    ok: bool
    reason: str
    whole: bool  # the reason stands alone (about the task or the function), not after the check's name
    judged: bool  # the reason comes from the judge, not from how the kernel ran
    code: Reason | None = None  # the kernel's or the grader's reason, when it is not the judge's


def _verdict(check_hidden: bool, task: str, plan: Plan, log: KernelLog, tamper: Why | None, out) -> _Verdict:
    if tamper:
        return _Verdict(False, tamper.text(), True, False, tamper.code)
    if task in plan.missing:
        return _Verdict(
            False, Why.of(Reason.MISSING_CELL, lab=plan.lab, task=task).text(), True, False, Reason.MISSING_CELL
        )
    why = log.fail.get(task) or (log.hidden_fail.get(task) if check_hidden else None)
    if why is not None:
        return _Verdict(False, why.text(), True, False, why.code)
    outcome, whole = out
    return _Verdict(outcome.ok, outcome.reason, whole, True)


def _score(
    spec: LabSpec,
    plan: Plan,
    outcomes: dict[int, tuple[CheckOutcome, bool]],
    logs: dict[int, KernelLog],
    tamper: Why | None,
) -> tuple[list[TaskResult], dict[str, Reason | None]]:
    """Each task's result, and the code of the reason it gives (None: all pass, or the judge's reason)."""
    results, codes = [], {}
    for task in spec.tasks.values():
        checks = [(i, c) for i, c in enumerate(spec.checks) if c.task == task.id]
        each = task.points / len(checks) if checks else 0.0
        rows: list[CheckResult] = []
        hidden_n = 0
        first, judged, code = "", True, None
        for idx, check in checks:
            hidden_n += check.hidden
            name = Why.of(Reason.HIDDEN_NAME, n=hidden_n, task=task.id).text() if check.hidden else check.name
            v = _verdict(check.hidden, task.id, plan, logs[idx], tamper, outcomes.get(idx))
            rows.append(
                CheckResult(
                    task.id, name, check.hidden, v.ok, v.reason, round(each if v.ok else 0.0, 4), round(each, 4)
                )
            )
            if not v.ok and not first:
                first = v.reason if v.whole else Why.of(Reason.NAMED, name=name, reason=v.reason).text()
                judged, code = v.judged, v.code
        passed = sum(r.ok for r in rows)
        score = round(task.points * passed / len(rows), 4) if rows else 0.0
        if rows:  # per-check points that add up exactly to the task's (Gradescope sums them)
            shares = [round(each, 4)] * (len(rows) - 1)
            shares.append(round(task.points - sum(shares), 4))
            earned = [i for i, r in enumerate(rows) if r.ok]
            got = [shares[i] if r.ok else 0.0 for i, r in enumerate(rows)]
            if earned:
                got[earned[-1]] = round(score - sum(got[i] for i in earned[:-1]), 4)
            rows = [dataclasses.replace(r, score=g, max_score=m) for r, g, m in zip(rows, got, shares)]
        bad = [r for r in rows if not r.ok]
        reason = Why.of(Reason.ALL_PASS, n=len(rows)).text() if not bad else first
        note = next((lg.notes[task.id] for lg in logs.values() if task.id in lg.notes), None)
        if note and bad and judged and note.get("ename") != "NotImplementedError":
            reason = Why.of(Reason.WITH_NOTE, reason=reason, note=note).text()
        results.append(TaskResult(task.id, task.title, score, task.points, reason, rows))
        codes[task.id] = code
    return results, codes


def _judged(
    check: Check, idx: int, cases: list[Case], collected: dict[str, bytes], mem_mb: int
) -> tuple[CheckOutcome, bool]:
    try:
        return judge(check, idx, cases, collected, mem_mb)
    except Exception:  # noqa: BLE001 - a forged answer the judge did not foresee: one line, no credit
        return CheckOutcome(check.name, check.task, False, Why.of(Reason.BAD_FORMAT).text()), False


def grade_file(path: Path, opts: GradeOptions) -> GradeResult:
    """Grade one notebook; never raises for a bad submission (the reason goes to ``problems``)."""
    t0 = time.monotonic()
    seed = opts.seed if opts.seed is not None else secrets.randbelow(2**31)
    lab: str | None = None
    problems: list[str] = []
    spec: LabSpec | None = None
    try:
        nb = read_submission(path, opts.course)
        lab, note = identify_lab(nb, path, opts.course, opts.lab)
        if note:
            problems.append(note)
        spec = lab_spec(opts.course, lab, public_only=opts.public_only)
        plan = plan_run(opts.course, lab, nb, list(spec.tasks))
    except SubmissionError as err:
        if opts.lab and spec is None:
            try:
                spec = lab_spec(opts.course, opts.lab, public_only=opts.public_only)
            except GradeSetupError:
                spec = None
        tasks = [TaskResult(t.id, t.title, 0.0, t.points, str(err), []) for t in (spec.tasks.values() if spec else [])]
        return GradeResult(
            str(path),
            opts.lab or lab,
            0.0,
            spec.total_points if spec else 0.0,
            tasks,
            [str(err)],
            seed,
            time.monotonic() - t0,
            opts.sandbox,
            graded=False,
        )
    if opts.public_only:
        problems.append(Why.of(Reason.PUBLIC_ONLY).text())
    indexed = list(enumerate(spec.checks))
    cases = {}
    for idx, check in indexed:
        try:
            cases[idx] = list(check.cases(seed))
        except Exception as err:  # noqa: BLE001 - a course bug, not the learner's
            raise GradeSetupError(f"check {check.name!r}: cases({seed}) failed: {type(err).__name__}: {err}") from None
    scratch = scratch_root() / f"sub-{secrets.token_hex(6)}"
    scratch.mkdir(mode=0o711)
    scratch.chmod(0o711)
    try:
        deadline = t0 + opts.total_timeout
        groups = {
            "main": [(i, c) for i, c in indexed if not c.fresh_kernel],
            "fresh": [(i, c) for i, c in indexed if c.fresh_kernel],
        }
        logs: dict[int, KernelLog] = {}
        outcomes: dict[int, tuple[CheckOutcome, bool]] = {}
        for name, members in groups.items():
            if not members:
                continue
            job = KernelJob(
                plan.lab,
                list(plan.steps),
                list(spec.tasks),
                plan.missing,
                members,
                cases,
                opts,
                scratch,
                name,
                deadline,
            )
            log = grade_phases(job, plan)  # grade_group, and the later calls of checks with `then`
            with judging_deadline(deadline):  # artefact jobs too stay inside the submission's --timeout
                for idx, check in members:
                    logs[idx] = log
                    outcomes[idx] = _judged(check, idx, cases[idx], job.collected, opts.mem_mb)
        tamper_names = [n for lg in {id(v): v for v in logs.values()}.values() for n in lg.tamper]
        tamper = _describe_tamper(list(dict.fromkeys(tamper_names))) if tamper_names else None
        if tamper:
            problems.append(tamper.text())
        tasks, codes = _score(spec, plan, outcomes, logs, tamper)
    finally:
        if not os.environ.get("TORCHCONTRACTS_KEEP_SCRATCH"):  # set it to read the kernels' logs
            shutil.rmtree(scratch, ignore_errors=True)
    for t in tasks:
        if codes[t.id] in (Reason.KERNEL_DIED, Reason.KERNEL_DIED_HIDDEN) and t.reason not in problems:
            problems.append(t.reason)
    total = round(sum(t.score for t in tasks), 4)
    started = not all(codes[t.id] is Reason.NO_START for t in tasks)
    return GradeResult(
        str(path),
        lab,
        total,
        spec.total_points,
        tasks,
        problems,
        seed,
        time.monotonic() - t0,
        opts.sandbox,
        graded=started,
    )
