"""The protocol between the grader and the code it runs in the learner's kernel: names, entry points, formats.

Both sides import this module, so a file name or an entry point is spelled in one place only.
It imports nothing heavy: the fork server and the kernel's start-up read it before torch.
"""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = [
    "BASELINE",
    "ERR_TOO_LARGE",
    "ERR_UNSAVEABLE",
    "ERR_UNSUPPORTED",
    "GUARD_LOG",
    "MODULE_PREFIX",
    "NOTE_HOOK",
    "NOTE_RECORDS",
    "NOTE_SIGNAL",
    "NOTE_THREADS",
    "TAMPER_SEAL",
    "TAMPER_SOLUTIONS",
    "TOO_LARGE_BLOB",
    "TRIPWIRE",
    "case_file",
    "missing_file",
    "DRIVER_MODULE",
    "MAX_RECORD_BYTES",
    "MAX_SEALED_BYTES",
    "MAX_SEALED_FILES",
    "SEAL_MAGIC",
    "driver_call",
    "pack_sealed",
    "sealed_name",
    "unpack_sealed",
]

DRIVER_MODULE = "torchcontracts.grading.driver"  # imported by the fork server before any learner code
BASELINE = "baseline.json"  # the identity snapshot taken before any learner code; read before the first learner cell
SEAL_MAGIC = b"TCSEAL1\n"
GUARD_LOG = "guard.log"  # none mode: the solutions/ tripwire appends one line per blocked attempt here
# notes the driver seals with a step (what it saw while the learner's code ran)
NOTE_HOOK = "hook"  # a trace or profile function was active
NOTE_SIGNAL = "signal"  # a signal handler or interval timer changed since the baseline
NOTE_RECORDS = "records"  # the records differ from the digest the driver kept as it took each one
NOTE_THREADS = "threads:"  # prefix: "threads:<n>", threads of the submission still running at the seal
# tamper names the grader adds itself (next to the fingerprint names that changed)
TAMPER_SEAL = "seal"  # the sealed step was missing, malformed or disturbed
TAMPER_SOLUTIONS = "reading solutions/"  # the tripwire wrote to GUARD_LOG
TRIPWIRE = "the solutions/ tripwire"  # its fingerprint name
MODULE_PREFIX = "sys.modules["  # fingerprint names of whole modules: "sys.modules[<name>]"
# error codes of a saved answer (record["error"]), besides the name of an exception the learner's code raised
ERR_TOO_LARGE, ERR_UNSUPPORTED, ERR_UNSAVEABLE = "too large", "unsupported", "unsaveable"
TOO_LARGE_BLOB = b"too large"  # stands in for a serialised answer over MAX_RECORD_BYTES
# bound at import (the fork server imports this module before any learner code): the sealer packs with these,
# so a learner who replaces json.dumps or struct.pack cannot rewrite what the sealer writes
_dumps, _pack, _dict, _list, _len = json.dumps, struct.pack, dict, list, len
MAX_SEALED_FILES = 4096  # records in one sealed step (one per case); more is "not in the grader's format"
MAX_RECORD_BYTES = 64 * 2**20  # one case's saved answer
MAX_SEALED_BYTES = 256 * 2**20  # one sealed step, all records together


def case_file(check: int, case: int) -> str:
    """The sealed record of one case of one check (the check's index in the lab's list)."""
    return f"{check}-{case}.pt"


def missing_file(check: int) -> str:
    """The empty record saying the check's target function is not defined in the kernel."""
    return f"{check}.missing"


def sealed_name(token: str) -> str:
    """The file a step's sealer writes; the token is fresh per step, so nothing planted earlier matches."""
    return f"sealed-{token}.bin"


def driver_call(function: str, *args: Any) -> str:
    """The code of a driver cell: one call into the driver module, with JSON-literal arguments.

    Everything the driver needs (job spec, cases, token) travels inside the cell's code, never in
    a file the learner could rewrite before the driver reads it.
    """
    return f"__import__({DRIVER_MODULE!r}, fromlist=['_']).{function}(*__import__('json').loads({json.dumps(json.dumps(list(args)))}))"


def pack_sealed(header: dict[str, Any], blobs: list[tuple[str, bytes]]) -> bytes:
    """Magic, a JSON header (with each blob's name and size), then the blobs back to back."""
    head = _dict(header, files=[[name, _len(blob)] for name, blob in blobs])
    text = _dumps(head).encode()
    return SEAL_MAGIC + _pack("<Q", _len(text)) + text + b"".join(_list(blob for _, blob in blobs))


def unpack_sealed(data: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Parse a sealed step with caps; raise ValueError on anything out of format."""
    if len(data) > MAX_SEALED_BYTES or not data.startswith(SEAL_MAGIC):
        raise ValueError("not a sealed step")
    at = len(SEAL_MAGIC)
    (size,) = struct.unpack("<Q", data[at : at + 8])
    at += 8
    if size > 16 * 2**20:
        raise ValueError("header too large")
    header = json.loads(data[at : at + size])
    at += size
    files = header.get("files") if isinstance(header, dict) else None
    if not isinstance(files, list) or len(files) > MAX_SEALED_FILES:
        raise ValueError("bad file list")
    blobs: dict[str, bytes] = {}
    for entry in files:
        name, length = entry
        if not isinstance(name, str) or not isinstance(length, int) or length < 0 or length > MAX_RECORD_BYTES:
            raise ValueError("bad entry")
        if name in blobs:  # one record per name: a second one is a forgery, whichever of them is
            raise ValueError("a record named twice")
        blobs[name] = data[at : at + length]
        at += length
    if at != len(data):
        raise ValueError("trailing bytes")
    return header, blobs
