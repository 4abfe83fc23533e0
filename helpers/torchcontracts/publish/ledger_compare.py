"""``torchcontracts ledger --compare A.csv B.csv``: which claims changed verdict or evidence between two ledgers.

Two ledgers from two torch versions (or devices) say whether a contract still holds: a claim whose verdict, or the
kind of evidence behind it, differs is printed in one table; claims the same in both are counted, not listed. The
kind of evidence is read from the ``source`` column's wording ("measured on cpu", "torch source ...", "allocator
model", "docs ..."), until the ledger carries a basis column of its own.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

__all__ = ["Change", "compare", "evidence_kind", "read_ledger", "render", "run_compare"]

_KINDS = (("measured", "measured"), ("torch source", "torch source"), ("allocator model", "allocator model"))


def evidence_kind(source: str) -> str:
    """'measured', 'torch source', 'allocator model', 'docs' or 'citation', from a ledger row's ``source``."""
    low = source.strip().lower()
    for prefix, kind in _KINDS:
        if low.startswith(prefix):
            return kind
    if low.startswith("docs"):
        return "docs"
    return "citation" if low and low != "not covered" else "not covered"


def read_ledger(path: Path) -> dict[str, dict[str, str]]:
    """The ledger's rows by claim id; ValueError names a file that is not a ledger."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"id", "verdict", "source"} <= set(rows[0]):
        raise ValueError(f"{path} is not a ledger (it needs the columns id, verdict and source)")
    return {r["id"]: r for r in rows}


Change = tuple[str, str, str, str, str]  # id, verdict in A, verdict in B, evidence in A, evidence in B


def compare(a: dict[str, dict[str, str]], b: dict[str, dict[str, str]]) -> list[Change]:
    """The claims whose verdict or kind of evidence differs (a claim missing on one side reads 'absent')."""
    changes = []
    for cid in sorted(set(a) | set(b)):
        ra, rb = a.get(cid), b.get(cid)
        va, vb = (ra["verdict"] if ra else "absent"), (rb["verdict"] if rb else "absent")
        ka, kb = (evidence_kind(ra["source"]) if ra else "absent"), (evidence_kind(rb["source"]) if rb else "absent")
        if (va, ka) != (vb, kb):
            changes.append((cid, va, vb, ka, kb))
    return changes


def _label(rows: dict[str, dict[str, str]], path: Path) -> str:
    versions = sorted({r.get("torch", "") for r in rows.values()} - {""})
    return f"torch {', '.join(versions)}" if versions else path.name


def render(changes: Iterable[Change], label_a: str, label_b: str, same: int) -> str:
    """One table of the changed claims, or one line saying that none changed."""
    changes = list(changes)
    if not changes:
        return f"ledger --compare: no claim changed verdict or evidence between {label_a} and {label_b} ({same} claims)"
    head = ("claim", f"verdict ({label_a})", f"verdict ({label_b})", f"evidence ({label_a})", f"evidence ({label_b})")
    widths = [max(len(str(row[i])) for row in [head, *changes]) for i in range(5)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *changes]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, f"{len(changes)} of {len(changes) + same} claims changed; {same} held"])


def run_compare(path_a: Path, path_b: Path) -> int:
    """Print the comparison; 0 when both files were read (whatever changed), 1 when one is not a ledger."""
    try:
        a, b = read_ledger(path_a), read_ledger(path_b)
    except (OSError, ValueError) as err:
        print(f"ledger --compare: {err}")
        return 1
    changes = compare(a, b)
    print(render(changes, _label(a, path_a), _label(b, path_b), len(set(a) | set(b)) - len(changes)))
    return 0
