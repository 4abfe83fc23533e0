"""One GPU record from the partial records of several device calls (``torchcontracts record --merge A B ...``).

Why: a device call runs at most 600 s, and the whole course on an H200 takes longer than one call leaves (measured
on 2026-12-04: lessons 00-08 alone took 430 s with the comparisons, lesson 09 not reached). So the kit records the
course in parts (``record --only 00 01 02 03 04 05``, then ``--only 06 07 08 09 10``), and this joins them. Parts
must come from the same GPU and torch build; a lesson in several parts keeps its last run (the rerun after a fix),
with that run's claims; a comparison likewise, with its figures. The result is ``complete`` only when every lesson
of the manifest ran clean and every comparison agreed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from torchcontracts import course
from torchcontracts.publish.record_schema import SCHEMA, validate

__all__ = ["merge", "merge_files"]


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The record the ``parts`` make together; ValueError says in one line why they cannot be joined."""
    if not parts:
        raise ValueError("record --merge needs at least one record")
    for i, part in enumerate(parts, 1):
        problems = validate(part)
        if problems:
            raise ValueError(f"part {i} is not a valid record: {problems[0]}")
        if part.get("schema") != SCHEMA or part.get("fixture") or part.get("rehearsal"):
            raise ValueError(f"part {i} is a fixture or a rehearsal, not a GPU record")
    first = parts[0]
    for i, part in enumerate(parts[1:], 2):
        for key in ("name", "capability"):
            if part["device"][key] != first["device"][key]:
                raise ValueError(f"part {i} ran on another GPU ({part['device'][key]} vs {first['device'][key]})")
        if part["torch"] != first["torch"]:
            raise ValueError(f"part {i} ran on another torch ({part['torch']} vs {first['torch']})")
    lessons: dict[str, Any] = {}
    claims: dict[str, Any] = {}
    comparisons: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    for part in parts:
        for name, les in part["lessons"].items():
            lessons[name] = les
            claims = {cid: c for cid, c in claims.items() if c["notebook"] != name}
            claims.update({cid: c for cid, c in part["claims"].items() if c["notebook"] == name})
        for name, comp in part["comparisons"].items():
            comparisons[name] = comp
            figures = {k: f for k, f in figures.items() if f["comparison"] != name}
            figures.update({k: f for k, f in part["figures"].items() if f["comparison"] == name})
    order = [les.notebook.split("/")[-1] for les in course.lessons()]
    lessons = {name: lessons[name] for name in sorted(lessons, key=lambda n: order.index(n) if n in order else 99)}
    clean = all(not les["error"] for les in lessons.values()) and all(c["ok"] for c in comparisons.values())
    merged = {
        **{k: v for k, v in parts[-1].items() if k not in ("lessons", "claims", "comparisons", "figures")},
        "date": max(p["date"] for p in parts),
        "seconds": round(sum(p["seconds"] for p in parts), 1),
        "complete": clean and set(order) <= set(lessons) and bool(comparisons),
        "lessons": lessons,
        "claims": claims,
        "comparisons": comparisons,
        "figures": figures,
        "parts": [{"date": p["date"], "seconds": p["seconds"], "lessons": list(p["lessons"])} for p in parts],
    }
    problems = validate(merged)
    if problems:
        raise ValueError(f"the merged record came out malformed: {problems[0]}")
    return merged


def merge_files(paths: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Read the parts, merge them, write ``out``; return the merged record."""
    parts = []
    for path in paths:
        try:
            parts.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as err:
            raise ValueError(f"{path}: not a readable record ({type(err).__name__})") from None
    merged = merge(parts)
    Path(out).write_text(json.dumps(merged, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return merged
