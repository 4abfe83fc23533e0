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

__all__ = ["judge_check", "same_inputs"]

from torchcontracts.grading.protocol import MAX_RECORD_BYTES

MAX_CASE_BYTES = MAX_RECORD_BYTES
MAX_UNPACKED_BYTES = 256 * 2**20  # what one saved answer may declare it unpacks to
MAX_ZIP_ENTRIES = 10_000
_LIBRARIES = frozenset({"numpy", "torch", "builtins", "collections", "decimal", "fractions", "array", "pandas"})
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-~+@]+){2,}[/\\]?")
_GENERIC = (
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
    "answered",
    "changed its input in place",
)


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


def _fail(label: str, status: str) -> Comparison:
    return Comparison(label, False, "-", "-", "-", math.nan, status)


def _error_status(check: Check, record: dict[str, Any], mem_mb: int) -> str:
    name, msg = str(record.get("error", "")), str(record.get("msg", ""))
    if name == "NotImplementedError":
        return "not implemented"
    if name == "MemoryError" or "can't allocate memory" in msg or "out of memory" in msg.lower():
        return f"ran out of memory (the kernel's limit is {mem_mb} MB)"
    if name == "too large":
        return f"the answer is too large to judge (over {MAX_CASE_BYTES // 2**20} MB)"
    if name == "unsupported":
        return f"returned {msg}: return tensors, numbers, tuples, lists, dicts or strings"
    if name == "unsaveable":
        return f"its answer could not be saved ({msg})"
    if check.hidden:  # never the learner's text, nor a name it chose: either could carry hidden inputs
        return f"raised {name}" if record.get("builtin") else "raised an exception"
    name = scrub(name)[:80]
    msg = scrub(msg)
    return f"`{check.target}` raised {name}: {msg}" if msg else f"`{check.target}` raised {name}"


def _generic(status: str) -> str:
    for known in _GENERIC:
        if status.startswith(known):
            return "wrong answer" if known == "answered" else known
    if status.startswith("returned a "):  # a type the submission defined could be named after a hidden input
        module = status[len("returned a ") :].split(".")[0]
        return status.split(":")[0] if module in _LIBRARIES else "returned an unsupported type"
    if status.startswith(("not implemented", "ran out of memory", "raised ")):
        return status.split(":")[0].split(" (")[0][:80]
    if status.startswith(("no output was saved", "the answer is too large", "the answer cannot be loaded")):
        return "no gradable output"
    return "wrong answer"


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


def _load(blob: bytes | None) -> tuple[dict[str, Any] | None, str]:
    if blob is None:
        return None, "no output was saved for this case (the kernel stopped before it)"
    if blob == b"too large" or len(blob) > MAX_CASE_BYTES:
        return None, f"the answer is too large to judge (over {MAX_CASE_BYTES // 2**20} MB)"
    if not _zip_ok(blob):
        return None, "the answer cannot be loaded safely: return tensors, numbers, tuples, lists, dicts or strings"
    try:
        record = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception:  # noqa: BLE001 - anything that is not plain data
        return None, "the answer cannot be loaded safely: return tensors, numbers, tuples, lists, dicts or strings"
    if not isinstance(record, dict):
        return None, "the saved answer is not in the grader's format (was the kernel disturbed?)"
    return record, ""


def judge_check(check: Check, idx: int, cases: list[Case], saved: Mapping[str, bytes], mem_mb: int) -> CheckOutcome:
    """Judge one check from the saved case files (name -> bytes); reasons of hidden checks stay generic."""
    if f"{idx}.missing" in saved:
        return CheckOutcome(
            check.name, check.task, False, f"`{check.target}` is not defined: keep the function name the task asks for"
        )
    rows: list[Comparison] = []
    for n, case in enumerate(cases):
        record, problem = _load(saved.get(f"{idx}-{n}.pt"))
        if record is None:
            rows.append(_fail(case.label, problem))
        elif "error" not in record and not isinstance(record.get("args"), (list, tuple)):
            rows.append(_fail(case.label, "the saved answer is not in the grader's format (was the kernel disturbed?)"))
        elif "error" in record:
            rows.append(_fail(case.label, _error_status(check, record, mem_mb)))
            break  # the kernel stopped this check at its first error
        elif not same_inputs(list(case.args), list(record.get("args", ()))):
            rows.append(_fail(case.label, "changed its input in place (or the saved inputs were replaced)"))
        else:
            loaded = Case(case.label, tuple(record["args"]))
            rows.extend(_safe_judge(check.judge, loaded, record.get("out")))
    if rows and all(r.status == "not implemented" for r in rows if not r.ok) and not all(r.ok for r in rows):
        first = next(r for r in rows if not r.ok)
        return CheckOutcome(check.name, check.task, False, "not implemented", (first,))
    outcome = outcome_from_rows(check, rows)
    if check.hidden:
        bad = [r for r in rows if not r.ok]
        reason = "passed" if not bad else f"failed ({_generic(bad[0].status)})"
        return CheckOutcome(check.name, check.task, outcome.ok, reason, ())
    if not outcome.ok:
        bad = next(r for r in rows if not r.ok)
        if bad.status.startswith("`"):
            return CheckOutcome(check.name, check.task, False, f"{bad.status} (case: {case_label(bad)})", outcome.rows)
    return outcome


def case_label(row: Comparison) -> str:
    """The case part of a row name (rows are named ``label: part``)."""
    return row.name.split(": ")[0]
