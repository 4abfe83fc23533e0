"""Grading speaks in codes: every reason the grader gives is a ``Reason`` with parameters, rendered to text last.

The grader decides with codes only (which reasons zero a whole task, which say "not graded", which a
hidden check may show); ``TEXT`` is the one table of human wording, read only by ``Why.text``. Rewording a
message therefore cannot change a score (``tests/grading/test_reason_codes.py`` scrambles the table).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["NOT_GRADED", "TEXT", "Reason", "Why", "render"]


class Reason(enum.Enum):
    """What went wrong (or right), without its wording."""

    # a whole task, decided in the grader's run
    NO_START = "no-start"  # {why}
    NO_BASELINE = "no-baseline"
    OUT_OF_TIME = "out-of-time"  # {limit}
    STEP_TIMEOUT = "step-timeout"  # {limit}
    DRIVER_FAILED = "driver-failed"
    THREADS_LEFT = "threads-left"
    KERNEL_DIED = "kernel-died"  # {why} {where}: the kernel's own exit reason
    KERNEL_DIED_HIDDEN = "kernel-died-hidden"  # {where}: an exit code is a channel the learner chooses
    MISSING_CELL = "missing-cell"  # {lab} {task}
    TAMPER = "tamper"  # {what}
    ALL_PASS = "all-pass"  # {n}
    PUBLIC_ONLY = "public-only"
    # where a kernel died
    WHERE_CELL = "where-cell"  # {task}
    WHERE_HIDDEN = "where-hidden"  # {task}
    WHERE_CHECKS = "where-checks"  # {task}
    WHERE_COURSE = "where-course"
    # what a learner's cell did (a note added to a task's reason)
    CELL_TIMED_OUT = "cell-timed-out"  # {seconds}
    CELL_RAISED = "cell-raised"  # {ename}
    # tamper findings
    TAMPER_SOLUTIONS = "tamper-solutions"
    TAMPER_HOOK = "tamper-hook"
    TAMPER_SEAL = "tamper-seal"
    TAMPER_SIGNAL = "tamper-signal"
    TAMPER_MODULE = "tamper-module"  # {name}
    TAMPER_REPLACED = "tamper-replaced"  # {names}
    TAMPER_REPLACED_MORE = "tamper-replaced-more"  # {names} {n}
    # one check, decided by the judge
    NOT_IMPLEMENTED = "not-implemented"
    NOT_DEFINED = "not-defined"  # {target}
    OOM = "oom"  # {mem_mb}
    TOO_LARGE = "too-large"  # {mb}
    UNSUPPORTED = "unsupported"  # {what}
    UNSAVEABLE = "unsaveable"  # {msg}
    RAISED = "raised"  # {target} {name} {msg}: public checks, scrubbed
    RAISED_BARE = "raised-bare"  # {target} {name}
    RAISED_HIDDEN = "raised-hidden"  # {name}: a builtin exception's name only
    RAISED_HIDDEN_ANON = "raised-hidden-anon"
    NO_OUTPUT = "no-output"
    UNLOADABLE = "unloadable"
    BAD_FORMAT = "bad-format"
    CHANGED_INPUT = "changed-input"
    WITH_CASE = "with-case"  # {status} {case}
    # hidden checks' generic feedback
    HIDDEN_PASSED = "hidden-passed"
    HIDDEN_FAILED = "hidden-failed"  # {what}
    HIDDEN_NAME = "hidden-name"  # {n} {task}
    GENERIC_OOM = "generic-oom"
    GENERIC_NO_OUTPUT = "generic-no-output"
    GENERIC_RETURNED = "generic-returned"  # {what}: a library's type
    GENERIC_UNSUPPORTED = "generic-unsupported"
    GENERIC_WRONG = "generic-wrong"
    GENERIC_KIND = "generic-kind"  # {kind}: a status word of the checks package (``_CHECK_STATUSES``)
    GENERIC_CHANGED_INPUT = "generic-changed-input"
    # how a task's reason is put together
    NAMED = "named"  # {name} {reason}
    WITH_NOTE = "with-note"  # {reason} {note}


TEXT: dict[Reason, str] = {
    Reason.NO_START: "not graded: the grading kernel could not start ({why})",
    Reason.NO_BASELINE: "it wrote no baseline",
    Reason.OUT_OF_TIME: "not graded: the total time limit of {limit:g} s ran out",
    Reason.STEP_TIMEOUT: "timed out after {limit:.3g} s",
    Reason.DRIVER_FAILED: "the grading driver failed: was the kernel disturbed?",
    Reason.THREADS_LEFT: "a thread it started was still running when the answers were sealed: "
    "stop or join your threads before the function returns",
    Reason.KERNEL_DIED: "not graded: {why} in {where}",
    Reason.KERNEL_DIED_HIDDEN: "not graded: the kernel died in {where}",
    Reason.MISSING_CELL: "not implemented: its solution cell ({lab}/{task}) is missing",
    Reason.TAMPER: "tampering detected: {what}",
    Reason.ALL_PASS: "all {n} checks pass",
    Reason.PUBLIC_ONLY: "public checks only: hidden checks were not run",
    Reason.WHERE_CELL: "the {task} cell",
    Reason.WHERE_HIDDEN: "the hidden checks of {task}",
    Reason.WHERE_CHECKS: "the {task} checks",
    Reason.WHERE_COURSE: "a course cell",
    Reason.CELL_TIMED_OUT: "its cell timed out after {seconds:.0f} s",
    Reason.CELL_RAISED: "its cell raised {ename}",
    Reason.TAMPER_SOLUTIONS: "tried to read the course's solutions/ (blocked)",
    Reason.TAMPER_HOOK: "a trace or profile function was set while the grader's checks ran",
    Reason.TAMPER_SEAL: "the grader's sealed answers were disturbed",
    Reason.TAMPER_SIGNAL: "a signal handler or timer was set while the grader's checks ran",
    Reason.TAMPER_MODULE: "{name} module",
    Reason.TAMPER_REPLACED: "{names} replaced",
    Reason.TAMPER_REPLACED_MORE: "{names} and {n} more replaced",
    Reason.NOT_IMPLEMENTED: "not implemented",
    Reason.NOT_DEFINED: "`{target}` is not defined: keep the function name the task asks for",
    Reason.OOM: "ran out of memory (the kernel's limit is {mem_mb} MB)",
    Reason.TOO_LARGE: "the answer is too large to judge (over {mb} MB)",
    Reason.UNSUPPORTED: "returned {what}: return tensors, numbers, tuples, lists, dicts or strings",
    Reason.UNSAVEABLE: "its answer could not be saved ({msg})",
    Reason.RAISED: "`{target}` raised {name}: {msg}",
    Reason.RAISED_BARE: "`{target}` raised {name}",
    Reason.RAISED_HIDDEN: "raised {name}",
    Reason.RAISED_HIDDEN_ANON: "raised an exception",
    Reason.NO_OUTPUT: "no output was saved for this case (the kernel stopped before it)",
    Reason.UNLOADABLE: "the answer cannot be loaded safely: return tensors, numbers, tuples, lists, dicts or strings",
    Reason.BAD_FORMAT: "the saved answer is not in the grader's format (was the kernel disturbed?)",
    Reason.CHANGED_INPUT: "changed its input in place (or the saved inputs were replaced)",
    Reason.WITH_CASE: "{status} (case: {case})",
    Reason.HIDDEN_PASSED: "passed",
    Reason.HIDDEN_FAILED: "failed ({what})",
    Reason.HIDDEN_NAME: "hidden check {n} of {task}",
    Reason.GENERIC_OOM: "ran out of memory",
    Reason.GENERIC_NO_OUTPUT: "no gradable output",
    Reason.GENERIC_RETURNED: "returned {what}",
    Reason.GENERIC_UNSUPPORTED: "returned an unsupported type",
    Reason.GENERIC_WRONG: "wrong answer",
    Reason.GENERIC_KIND: "{kind}",
    Reason.GENERIC_CHANGED_INPUT: "changed its input in place",
    Reason.NAMED: "{name}: {reason}",
    Reason.WITH_NOTE: "{reason} ({note})",
}

# a task's reason that is not a judged answer: the kernel could not grade it
NOT_GRADED = frozenset({Reason.NO_START, Reason.OUT_OF_TIME, Reason.KERNEL_DIED, Reason.KERNEL_DIED_HIDDEN})


def render(code: Reason, **params: Any) -> str:
    """The human text of a reason (parameters that are ``Why`` are rendered first)."""
    return TEXT[code].format(**{k: v.text() if isinstance(v, Why) else v for k, v in params.items()})


@dataclasses.dataclass(frozen=True)
class Why:
    """A reason and its parameters; the text is made only when shown."""

    code: Reason
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, code: Reason, **params: Any) -> "Why":
        return cls(code, tuple(params.items()))

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def text(self) -> str:
        return render(self.code, **dict(self.params))
