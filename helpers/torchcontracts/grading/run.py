"""Grade one submission: rebuild it, run it in limited kernels step by step, judge the sealed answers here, score it.

Scores come only from sealed answers judged in this process. What the learner's kernel reports about
itself (fingerprints, notes) can only lower a score: replaced torch or course code => 0 for all tasks.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import itertools
import json
import os
import secrets
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import torch

from torchcontracts.checks import Case, Check, CheckOutcome, LabSpec
from torchcontracts.grading.forkserver import scratch_root
from torchcontracts.grading.judge import judge_check
from torchcontracts.grading.kernel import CellRun, GradingKernel
from torchcontracts.grading.plan import Plan, Step, lab_spec, plan_run
from torchcontracts.grading.protocol import BASELINE, driver_call, unpack_sealed
from torchcontracts.grading.results import CheckResult, GradeOptions, GradeResult, TaskResult
from torchcontracts.grading.sandbox import kernel_uid
from torchcontracts.grading.submission import GradeSetupError, SubmissionError, identify_lab, read_submission
from torchcontracts.labs.load import module_name

_KERNELS = itertools.count()  # numbers the kernels of this process (each gets its own uid in bwrap mode)

__all__ = ["CheckResult", "GradeOptions", "GradeResult", "TaskResult", "grade_file"]  # results re-exported


@dataclasses.dataclass
class _KernelLog:
    """What happened in one kernel, per task: a reason that zeroes its checks, and notes."""

    fail: dict[str, str] = dataclasses.field(default_factory=dict)  # every check of the task
    hidden_fail: dict[str, str] = dataclasses.field(default_factory=dict)  # its hidden checks only
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    tamper: list[str] = dataclasses.field(default_factory=list)
    crashed_at: int | None = None  # the plan step at which the kernel died before the hidden checks
    done: set[str] = dataclasses.field(default_factory=set)  # tasks whose public checks were sealed
    hidden_done: set[str] = dataclasses.field(default_factory=set)  # tasks whose hidden checks were sealed


def _describe_tamper(names: list[str]) -> str:
    said = []
    special = {
        "reading solutions/": "tried to read the course's solutions/ (blocked)",
        "hook": "a trace or profile function was set while the grader's checks ran",
        "seal": "the grader's sealed answers were disturbed",
        "signal": "a signal handler or timer was set while the grader's checks ran",
    }
    for key, text in special.items():
        if key in names:
            said.append(text)
    names = [n for n in names if n not in special]
    swapped = [n[len("sys.modules[") : -1] for n in names if n.startswith("sys.modules[")]
    names = [n for n in names if not any(n.startswith(m + ".") for m in swapped)]  # said once, as the module
    words = [f"{n[len('sys.modules[') : -1]} module" if n.startswith("sys.modules[") else n for n in names]
    more = f" and {len(words) - 3} more" if len(words) > 3 else ""
    if words:
        said.insert(0, ", ".join(words[:3]) + more + " replaced")
    return "tampering detected: " + "; ".join(said)


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


def _take_step(
    run: CellRun,
    base: dict[str, str],
    collected: dict[str, bytes],
    log: _KernelLog,
    tasks: list[str],
    fails: dict[str, str],
) -> bool:
    """Take one sealed step into ``collected``; False when there is none (the driver never sealed)."""
    if run.seal_problem:
        log.tamper.append("seal")
    if run.sealed is None:
        return False
    try:
        header, blobs = unpack_sealed(run.sealed)
    except (ValueError, KeyError, TypeError, struct.error):
        log.tamper.append("seal")
        return False
    snapshot = header.get("snapshot") if isinstance(header.get("snapshot"), dict) else {}
    for name, ident in base.items():
        if snapshot.get(name) != ident and name not in log.tamper:
            log.tamper.append(name)
    notes = header.get("notes") if isinstance(header.get("notes"), list) else []
    for note in ("hook", "signal"):
        if note in notes and note not in log.tamper:
            log.tamper.append(note)
    threads = [n for n in notes if isinstance(n, str) and n.startswith("threads:")]
    if threads:
        for task in tasks:
            fails.setdefault(
                task,
                "a thread it started was still running when the answers were sealed: "
                "stop or join your threads before the function returns",
            )
    collected.update(blobs)
    return True


def _run_kernel(
    lab: str,
    steps: list[Step],
    tasks: list[str],
    missing: frozenset[str],
    members: list[tuple[int, Check]],
    cases: dict[int, list[Case]],
    opts: GradeOptions,
    scratch: Path,
    name: str,
    deadline: float,
    collected: dict[str, bytes],
) -> _KernelLog:
    """Run the steps in one fresh kernel: each task's public checks after its cell, all hidden checks at the end.

    Hidden checks run last so that no hidden input is in the kernel before every public answer
    (whose error text a learner sees) has been sealed.
    """
    log = _KernelLog()
    labchecks = module_name(lab)
    public = {t: [(i, c) for i, c in members if c.task == t and not c.hidden] for t in tasks}
    hidden = [(i, c) for i, c in members if c.hidden and c.task not in missing]
    tasks_here = [t for t in tasks if any(c.task == t for _, c in members)]
    uid = kernel_uid(next(_KERNELS)) if opts.sandbox == "bwrap" else None
    try:
        kernel = GradingKernel(
            scratch / f"k-{name}",
            course=opts.course,
            sandbox=opts.sandbox,
            uid=uid,
            mem_mb=opts.mem_mb,
            threads=opts.threads,
            fork=opts.fork_server,
        )
    except (RuntimeError, OSError) as err:
        for t in tasks_here:
            log.fail[t] = f"not graded: the grading kernel could not start ({err})"
        return log
    with kernel:
        io_dir = kernel.workdir
        guard = str(opts.course / "solutions") if opts.sandbox == "none" else ""
        first = kernel.run(
            driver_call("start", str(io_dir), labchecks, opts.threads, guard, uid is not None),
            max(60.0, opts.cell_timeout),
        )
        base = _read_baseline(io_dir)  # read before any learner code runs
        if first.status != "ok" or base is None:
            why = kernel.dead_reason or (first.one_line() if first.status != "ok" else "it wrote no baseline")
            for t in tasks_here:
                log.fail[t] = f"not graded: the grading kernel could not start ({why})"
            return log
        guard_log = io_dir / "guard.log"
        hidden_tasks = [t for t in tasks if any(c.task == t for _, c in hidden)]
        for n, step in enumerate([*steps, *(Step("driver", "", f"hidden:{t}") for t in hidden_tasks)]):
            hidden_step = step.kind == "driver" and step.task.startswith("hidden:")
            task = step.task.split(":", 1)[-1]
            if step.kind == "driver" and not hidden_step and not public.get(step.task):
                continue
            step_tasks = [task]
            left = deadline - time.monotonic()
            if left <= 0:
                for t in tasks_here:
                    (log.hidden_fail if t in log.done else log.fail).setdefault(
                        t, f"not graded: the total time limit of {opts.total_timeout:g} s ran out"
                    )
                break
            token = secrets.token_hex(12) if step.kind == "driver" else None
            if step.kind == "driver":
                jobs = _jobs([(i, c) for i, c in hidden if c.task == task] if hidden_step else public[step.task], cases)
                code = driver_call("drive", {"token": token, "jobs": jobs})
            else:
                code = step.source
            limit = min(opts.cell_timeout, left)
            run = kernel.run(code, limit, seal=token)
            if guard_log.exists() and guard_log.stat().st_size and "reading solutions/" not in log.tamper:
                log.tamper.append("reading solutions/")
            where = (
                f"the {step.task} cell"
                if step.kind == "student"
                else (
                    f"the hidden checks of {task}"
                    if hidden_step
                    else f"the {step.task} checks"
                    if step.kind == "driver"
                    else "a course cell"
                )
            )
            fails = log.hidden_fail if hidden_step else log.fail
            if step.kind == "driver":
                sealed = _take_step(run, base, collected, log, step_tasks, fails)
                if run.status in ("ok", "error") and not sealed and "seal" not in log.tamper:
                    log.tamper.append("seal")
                if run.status == "timeout":
                    for t in step_tasks:
                        fails.setdefault(t, f"timed out after {limit:.3g} s")
                elif run.status == "error":
                    for t in step_tasks:
                        fails.setdefault(t, "the grading driver failed: was the kernel disturbed?")
                (log.hidden_done if hidden_step else log.done).add(task)
            elif step.kind == "student" and run.status in ("error", "timeout") and step.task not in log.notes:
                said = f"timed out after {run.seconds:.0f} s" if run.status == "timeout" else f"raised {run.ename}"
                log.notes[step.task] = f"its cell {said}"
            if not kernel.alive:
                why = f"not graded: {kernel.dead_reason or run.evalue} in {where}"
                if hidden_step:  # an exit code is a channel the learner chooses: say only that it died
                    why = f"not graded: the kernel died in {where}"
                log.crashed_at = min(n, len(steps))  # a second kernel replays the cells before this step
                for t in tasks_here:
                    if t in log.done and t not in log.hidden_done and not (step.kind == "driver" and t == task):
                        log.hidden_fail.setdefault(t, why)  # its hidden step was still to come
                    elif t not in log.done or step.kind == "driver" and t == task:
                        (log.hidden_fail if hidden_step else log.fail).setdefault(t, why)
                break
    return log


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


def _score(
    spec: LabSpec, plan: Plan, outcomes: dict[int, CheckOutcome], logs: dict[int, _KernelLog], tamper: str
) -> list[TaskResult]:
    results = []
    for task in spec.tasks.values():
        checks = [(i, c) for i, c in enumerate(spec.checks) if c.task == task.id]
        each = task.points / len(checks) if checks else 0.0
        rows: list[CheckResult] = []
        hidden_n = 0
        first, judged = "", True
        for idx, check in checks:
            hidden_n += check.hidden
            name = f"hidden check {hidden_n} of {task.id}" if check.hidden else check.name
            log = logs[idx]
            if tamper:
                ok, reason, whole = False, tamper, True
            elif task.id in plan.missing:
                ok, reason, whole = False, f"not implemented: its solution cell ({plan.lab}/{task.id}) is missing", True
            elif task.id in log.fail:
                ok, reason, whole = False, log.fail[task.id], True
            elif check.hidden and task.id in log.hidden_fail:
                ok, reason, whole = False, log.hidden_fail[task.id], True
            else:
                out = outcomes[idx]
                ok, reason, whole = out.ok, out.reason, out.reason == "not implemented" or out.reason.startswith("`")
            rows.append(
                CheckResult(task.id, name, check.hidden, ok, reason, round(each if ok else 0.0, 4), round(each, 4))
            )
            if not ok and not first:
                first = reason if whole else f"{name}: {reason}"
                judged = not (
                    tamper
                    or task.id in plan.missing
                    or task.id in log.fail
                    or check.hidden
                    and task.id in log.hidden_fail
                )
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
        reason = f"all {len(rows)} checks pass" if not bad else first
        note = next((lg.notes[task.id] for lg in logs.values() if task.id in lg.notes), "")
        if note and bad and judged and "NotImplementedError" not in note:
            reason += f" ({note})"
        results.append(TaskResult(task.id, task.title, score, task.points, reason, rows))
    return results


def _grade_group(
    plan: Plan,
    spec: LabSpec,
    members: list[tuple[int, Check]],
    cases: dict[int, list[Case]],
    opts: GradeOptions,
    scratch: Path,
    name: str,
    deadline: float,
) -> tuple[_KernelLog, dict[str, bytes]]:
    """One kernel for these checks; if it died before the hidden checks, a second kernel replays the
    cells before the one that killed it and runs the hidden checks of the tasks already done."""
    tasks = list(spec.tasks)
    collected: dict[str, bytes] = {}
    log = _run_kernel(
        plan.lab, list(plan.steps), tasks, plan.missing, members, cases, opts, scratch, name, deadline, collected
    )
    if log.crashed_at is None or not log.done or time.monotonic() > deadline:
        return log, collected
    steps = [s for s in plan.steps[: log.crashed_at] if s.kind != "driver"]
    crashed = {t for t, why in log.hidden_fail.items() if not why.startswith("not graded:")} | {
        t
        for t in log.done
        if t in log.hidden_fail
        and t not in log.hidden_done
        and log.crashed_at >= len(plan.steps)
        and log.hidden_fail[t].endswith(f"the hidden checks of {t}")
    }
    again = [
        (i, c)
        for i, c in members
        if c.hidden
        and c.task in log.done
        and c.task not in log.fail
        and c.task not in log.hidden_done
        and c.task not in crashed
    ]
    if not again:
        return log, collected
    extra = _run_kernel(
        plan.lab, steps, tasks, plan.missing, again, cases, opts, scratch, f"{name}-hidden", deadline, collected
    )
    for t in {c.task for _, c in again}:
        log.hidden_fail.pop(t, None)
        if t in extra.hidden_fail or t in extra.fail:
            log.hidden_fail[t] = extra.hidden_fail.get(t) or extra.fail[t]
    log.tamper += [n for n in extra.tamper if n not in log.tamper]
    return log, collected


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
        problems.append("public checks only: hidden checks were not run")
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
        logs: dict[int, _KernelLog] = {}
        outcomes: dict[int, CheckOutcome] = {}
        for name, members in groups.items():
            if not members:
                continue
            log, collected = _grade_group(plan, spec, members, cases, opts, scratch, name, deadline)
            for idx, check in members:
                logs[idx] = log
                try:
                    outcomes[idx] = judge_check(check, idx, cases[idx], collected, opts.mem_mb)
                except Exception:  # noqa: BLE001 - a forged answer the judge did not foresee: one line, no credit
                    outcomes[idx] = CheckOutcome(
                        check.name,
                        check.task,
                        False,
                        "the saved answer is not in the grader's format (was the kernel disturbed?)",
                    )
        tamper_names = [n for lg in {id(v): v for v in logs.values()}.values() for n in lg.tamper]
        tamper = _describe_tamper(list(dict.fromkeys(tamper_names))) if tamper_names else ""
        if tamper:
            problems.append(tamper)
        tasks = _score(spec, plan, outcomes, logs, tamper)
    finally:
        if not os.environ.get("TORCHCONTRACTS_KEEP_SCRATCH"):  # set it to read the kernels' logs
            shutil.rmtree(scratch, ignore_errors=True)
    for t in tasks:
        if t.reason.startswith("not graded: the kernel") and t.reason not in problems:
            problems.append(t.reason)
    total = round(sum(t.score for t in tasks), 4)
    started = not all(t.reason.startswith("not graded: the grading kernel could not start") for t in tasks)
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
