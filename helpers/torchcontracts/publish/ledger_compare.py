"""``torchcontracts ledger --compare A.csv B.csv [C.csv ...]``: which claims changed verdict or evidence across ledgers.

Ledgers from several torch versions (or devices) say whether a contract still holds: a claim whose verdict, or the
kind of evidence behind it, differs between any two of them is printed in one table, one column per ledger; claims
the same in all are counted, not listed. The kind of evidence is the ``basis`` column (measured, source, docs, model,
citation); a ledger kept before that column existed has it read from the ``source`` column's wording ("measured on
cpu", "torch source ...", "allocator model", "docs ..."). A gpu-only verdict reads with what it expects
("gpu-only, expects false"), so a changed expectation shows too. ``--check`` makes a difference an error (exit 1): CI compares each leg's ledger with the one the package
keeps for that torch version (:mod:`torchcontracts.publish.ledger_versions`).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["Change", "compare", "compare_many", "evidence_kind", "label", "read_ledger", "render", "run_compare"]

_KINDS = (("measured", "measured"), ("torch source", "source"), ("allocator model", "model"))
Ledger = dict[str, dict[str, str]]


def evidence_kind(source: str | dict[str, str]) -> str:
    """'measured', 'source', 'model', 'docs' or 'citation': a row's ``basis``, or (a row or text without one) read
    from its ``source`` wording."""
    if isinstance(source, dict):
        if source.get("basis"):
            return source["basis"]
        source = source.get("source", "")
    low = source.strip().lower()
    for prefix, kind in _KINDS:
        if low.startswith(prefix):
            return kind
    if low.startswith("docs"):
        return "docs"
    return "citation" if low and low != "not covered" else "not covered"


def read_ledger(path: Path) -> Ledger:
    """The ledger's rows by claim id; ValueError names a file that is not a ledger."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"id", "verdict", "source"} <= set(rows[0]):
        raise ValueError(f"{path} is not a ledger (it needs the columns id, verdict and source)")
    return {r["id"]: r for r in rows}


Change = tuple[str, str, str, str, str]  # id, verdict in A, verdict in B, evidence in A, evidence in B


def _cell(rows: Ledger, cid: str) -> tuple[str, str]:
    row = rows.get(cid)
    if not row:
        return ("absent", "absent")
    verdict = row["verdict"] + (f", expects {row['expect']}" if row.get("expect") else "")
    return (verdict, evidence_kind(row))


def compare_many(ledgers: Sequence[Ledger]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The claims whose (verdict, kind of evidence) is not the same in every ledger, with each ledger's pair."""
    ids = sorted(set().union(*ledgers)) if ledgers else []
    out = []
    for cid in ids:
        cells = [_cell(rows, cid) for rows in ledgers]
        if len(set(cells)) > 1:
            out.append((cid, cells))
    return out


def compare(a: Ledger, b: Ledger) -> list[Change]:
    """Two ledgers: the claims whose verdict or kind of evidence differs (a claim missing on one side reads 'absent')."""
    return [(cid, va, vb, ka, kb) for cid, [(va, ka), (vb, kb)] in compare_many([a, b])]


def label(rows: Ledger, path: Path) -> str:
    """What a ledger is called in the table: its torch version(s), or its file name."""
    versions = sorted({r.get("torch", "") for r in rows.values()} - {""})
    return f"torch {', '.join(versions)}" if versions else path.name


def render(changes: Iterable[tuple[str, list[tuple[str, str]]]], labels: Sequence[str], same: int) -> str:
    """One table of the changed claims (a verdict and an evidence column per ledger), or one line saying none did."""
    changes = list(changes)
    if not changes:
        return f"ledger --compare: no claim changed verdict or evidence between {' and '.join(labels)} ({same} claims)"
    head = ("claim", *(f"verdict ({lb})" for lb in labels), *(f"evidence ({lb})" for lb in labels))
    body = [(cid, *(v for v, _ in cells), *(k for _, k in cells)) for cid, cells in changes]
    widths = [max(len(str(row[i])) for row in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, f"{len(changes)} of {len(changes) + same} claims changed; {same} held"])


def run_compare(paths: Sequence[Path], *, check: bool = False) -> int:
    """Print the comparison. Exit 0 when every file was read (whatever changed) or, with ``check``, when nothing
    changed; 1 when a file is not a ledger, or with ``check`` when a claim changed."""
    if len(paths) < 2:
        print("ledger --compare: give two ledgers or more")
        return 1
    try:
        ledgers = [read_ledger(Path(p)) for p in paths]
    except (OSError, ValueError) as err:
        print(f"ledger --compare: {err}")
        return 1
    changes = compare_many(ledgers)
    labels = [label(rows, Path(p)) for rows, p in zip(ledgers, paths)]
    if len(set(labels)) < len(labels):  # two ledgers of one torch version: tell them apart by file name
        labels = [f"{lb} ({Path(p).name})" for lb, p in zip(labels, paths)]
    print(render(changes, labels, len(set().union(*ledgers)) - len(changes)))
    return 1 if check and changes else 0
