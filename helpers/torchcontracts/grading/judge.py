"""Judge the outputs a learner's kernel saved, here in the grader's own process where torch is untouched.

Each case file holds the inputs and the output saved together (so views keep sharing storage);
it is loaded with ``weights_only=True``, its inputs must still equal the grader's, and then the
check's own ``judge`` decides. Hidden checks get generic reasons that never show their cases.
"""

from __future__ import annotations

import io
import math
import os
import re
import zipfile
from typing import Any, Mapping

import torch

from torchcontracts.checks.spec import Case, Check, CheckOutcome, Comparison, _safe_judge, outcome_from_rows

from torchcontracts.grading.protocol import (
    ERR_TOO_LARGE,
    ERR_UNSAVEABLE,
    ERR_UNSUPPORTED,
    MAX_RECORD_BYTES,
    TOO_LARGE_BLOB,
    case_file,
    missing_file,
)
from torchcontracts.grading.reasons import Reason, Why

__all__ = ["judge", "judge_check", "same_inputs", "scrub"]

MAX_CASE_BYTES = MAX_RECORD_BYTES
MAX_UNPACKED_BYTES = 256 * 2**20  # what one saved answer may declare it unpacks to
MAX_ZIP_ENTRIES = 10_000
_LIBRARIES = frozenset({"numpy", "torch", "builtins", "collections", "decimal", "fractions", "array", "pandas"})
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-~+@]+){2,}[/\\]?")
# The checks package's status words (``compare`` and the labs' judges write them; grading writes none of them):
# a hidden check names the kind of mismatch from this list, never the rest of the row.
_CHECK_STATUSES = (
    "values differ",
    "wrong shape",
    "wrong dtype",
    "wrong strides",
    "wrong length",
    "contains NaN",
    "values right, but it is a copy",
    "expected a bool",
    "expected a tuple",
    "expected a torch.Tensor",
)
# what a hidden check may say for a failure the grader found itself
_GENERIC = {
    Reason.NOT_IMPLEMENTED: Reason.NOT_IMPLEMENTED,
    Reason.OOM: Reason.GENERIC_OOM,
    Reason.RAISED_HIDDEN: Reason.RAISED_HIDDEN,
    Reason.RAISED_HIDDEN_ANON: Reason.RAISED_HIDDEN_ANON,
    Reason.NO_OUTPUT: Reason.GENERIC_NO_OUTPUT,
    Reason.TOO_LARGE: Reason.GENERIC_NO_OUTPUT,
    Reason.UNLOADABLE: Reason.GENERIC_NO_OUTPUT,
    Reason.CHANGED_INPUT: Reason.GENERIC_CHANGED_INPUT,
}
_RAISED = frozenset({Reason.RAISED, Reason.RAISED_BARE})
_OOM_WORDS = ("can't allocate memory", "out of memory")  # how torch and the C library say it (not our wording)


def same_inputs(a: Any, b: Any) -> bool:
    """True when ``b`` is exactly ``a``: same structure, and tensors equal in values, layout and dtype."""
    if isinstance(a, torch.Tensor):
        if type(b) is not torch.Tensor or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.stride() != b.stride() or a.storage_offset() != b.storage_offset():
            return False
        if a.untyped_storage().nbytes() != b.untyped_storage().nbytes():
            return False  # `x.set_(bigger)`: the input now lives in another storage (a copy passed off as a view)
        if a.is_floating_point() or a.is_complex():
            a, b = a.detach(), b.detach()
            return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
        return bool(torch.equal(a.detach(), b.detach()))
    if isinstance(a, (tuple, list)):
        return type(b) in (tuple, list) and len(a) == len(b) and all(same_inputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_inputs(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def _fail(label: str, why: Why) -> tuple[Comparison, Why]:
    return Comparison(label, False, "-", "-", "-", math.nan, why.text()), why


def _error_status(check: Check, record: dict[str, Any], mem_mb: int) -> Why:
    name, msg = str(record.get("error", "")), str(record.get("msg", ""))
    if name == "NotImplementedError":
        return Why.of(Reason.NOT_IMPLEMENTED)
    if name == "MemoryError" or any(w in msg.lower() for w in _OOM_WORDS):
        return Why.of(Reason.OOM, mem_mb=mem_mb)
    if name == ERR_TOO_LARGE:
        return Why.of(Reason.TOO_LARGE, mb=MAX_CASE_BYTES // 2**20)
    if name == ERR_UNSUPPORTED:
        return Why.of(Reason.UNSUPPORTED, what=msg)
    if name == ERR_UNSAVEABLE:
        return Why.of(Reason.UNSAVEABLE, msg=msg)
    if check.hidden:  # never the learner's text, nor a name it chose: either could carry hidden inputs
        return (
            Why.of(Reason.RAISED_HIDDEN, name=name[:80]) if record.get("builtin") else Why.of(Reason.RAISED_HIDDEN_ANON)
        )
    name = scrub(name)[:80]
    msg = scrub(msg)
    if msg:
        return Why.of(Reason.RAISED, target=check.target, name=name, msg=msg)
    return Why.of(Reason.RAISED_BARE, target=check.target, name=name)


def _generic(row: Comparison, why: Why | None) -> Why:
    """What a hidden check says about its first failing row: a kind of failure, never the row's own text."""
    if why is None:  # a row of the check's judge
        for known in _CHECK_STATUSES:
            if row.status.startswith(known):
                return Why.of(Reason.GENERIC_KIND, kind=known)
        return Why.of(Reason.GENERIC_WRONG)
    if why.code is Reason.UNSUPPORTED:  # a type the submission defined could be named after a hidden input
        what = str(why.get("what", ""))
        module = what[len("a ") :].split(".")[0] if what.startswith("a ") else ""
        return (
            Why.of(Reason.GENERIC_RETURNED, what=what) if module in _LIBRARIES else Why.of(Reason.GENERIC_UNSUPPORTED)
        )
    code = _GENERIC.get(why.code, Reason.GENERIC_WRONG)
    return Why.of(code, **dict(why.params)) if code is why.code else Why.of(code)


def scrub(text: str) -> str:
    """A learner's error text for public feedback: one line, no file paths, no value of the grader's
    environment, 160 characters at most."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    for value in sorted((v for v in os.environ.values() if len(v) >= 8), key=len, reverse=True):
        line = line.replace(value, "<hidden>")
    return _PATH.sub("<path>", line)[:160]


def _zip_ok(blob: bytes) -> bool:
    """Refuse a saved answer whose zip declares too many entries, too many bytes, or compression."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return False
    return (
        len(infos) <= MAX_ZIP_ENTRIES
        and sum(i.file_size for i in infos) <= MAX_UNPACKED_BYTES
        and all(i.compress_type == zipfile.ZIP_STORED for i in infos)
    )


def _load(blob: bytes | None) -> tuple[dict[str, Any] | None, Why | None]:
    if blob is None:
        return None, Why.of(Reason.NO_OUTPUT)
    if blob == TOO_LARGE_BLOB or len(blob) > MAX_CASE_BYTES:
        return None, Why.of(Reason.TOO_LARGE, mb=MAX_CASE_BYTES // 2**20)
    if not _zip_ok(blob):
        return None, Why.of(Reason.UNLOADABLE)
    try:
        record = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception:  # noqa: BLE001 - anything that is not plain data
        return None, Why.of(Reason.UNLOADABLE)
    if not isinstance(record, dict):
        return None, Why.of(Reason.BAD_FORMAT)
    return record, None


def judge(
    check: Check, idx: int, cases: list[Case], saved: Mapping[str, bytes], mem_mb: int
) -> tuple[CheckOutcome, bool]:
    """Judge one check from the saved case files (name -> bytes); reasons of hidden checks stay generic.

    Also says whether the reason stands on its own (it is about the learner's function as a whole: not
    implemented, not defined, raised) rather than about one row, after the check's name.
    """
    if missing_file(idx) in saved:
        why = Why.of(Reason.NOT_DEFINED, target=check.target)
        return CheckOutcome(check.name, check.task, False, why.text()), True
    rows: list[Comparison] = []
    whys: list[Why | None] = []  # the grader's own reason of each row; None for a row of the check's judge
    for n, case in enumerate(cases):
        record, problem = _load(saved.get(case_file(idx, n)))
        if record is None:
            row, why = _fail(case.label, problem or Why.of(Reason.BAD_FORMAT))
        elif "error" not in record and not isinstance(record.get("args"), (list, tuple)):
            row, why = _fail(case.label, Why.of(Reason.BAD_FORMAT))
        elif "error" in record:
            row, why = _fail(case.label, _error_status(check, record, mem_mb))
            rows.append(row)
            whys.append(why)
            break  # the kernel stopped this check at its first error
        elif not same_inputs(list(case.args), list(record.get("args", ()))):
            row, why = _fail(case.label, Why.of(Reason.CHANGED_INPUT))
        else:
            loaded = Case(case.label, tuple(record["args"]))
            judged = _safe_judge(check.judge, loaded, record.get("out"))
            rows.extend(judged)
            whys.extend([None] * len(judged))
            continue
        rows.append(row)
        whys.append(why)
    failing = [(r, w) for r, w in zip(rows, whys) if not r.ok]
    if failing and all(w is not None and w.code is Reason.NOT_IMPLEMENTED for _, w in failing):
        return CheckOutcome(
            check.name, check.task, False, Why.of(Reason.NOT_IMPLEMENTED).text(), (failing[0][0],)
        ), True
    outcome = outcome_from_rows(check, rows)
    if check.hidden:
        why = Why.of(Reason.HIDDEN_FAILED, what=_generic(*failing[0])) if failing else Why.of(Reason.HIDDEN_PASSED)
        return CheckOutcome(check.name, check.task, outcome.ok, why.text(), ()), False
    if failing and failing[0][1] is not None and failing[0][1].code in _RAISED:
        bad, why = failing[0]
        text = Why.of(Reason.WITH_CASE, status=why, case=case_label(bad)).text()
        return CheckOutcome(check.name, check.task, False, text, outcome.rows), True
    return outcome, False


def judge_check(check: Check, idx: int, cases: list[Case], saved: Mapping[str, bytes], mem_mb: int) -> CheckOutcome:
    """Judge one check from the saved case files (name -> bytes); reasons of hidden checks stay generic."""
    return judge(check, idx, cases, saved, mem_mb)[0]


def case_label(row: Comparison) -> str:
    """The case part of a row name (rows are named ``label: part``)."""
    return row.name.split(": ")[0]
