"""What a GPU record file holds: its schema, the validator every reader runs, and the builder ``record`` writes with.

``torchcontracts record`` assembles the record with :func:`assemble`; :func:`validate` lists every way a file
differs from the schema (lessons read records only through ``torchcontracts.publish.record``, which validates).
"""

from __future__ import annotations

import math
import platform
import re
import time
from typing import Any

__all__ = ["BUDGET_S", "REHEARSAL_SCHEMA", "SCHEMA", "assemble", "validate"]

SCHEMA = "torchcontracts-gpu-record/1"
# A CPU rehearsal of the record (`record --rehearsal`): its own schema and "rehearsal": true, so that no reader of
# GPU records (this version's load_record, or an older one that checks only the schema) takes it for a GPU's.
REHEARSAL_SCHEMA = "torchcontracts-gpu-record/1-rehearsal"
BUDGET_S = 480.0  # the whole record must fit in 8 minutes on one GPU
_KEY = re.compile(r"^[a-z0-9_]+\.[A-Za-z0-9_]+$")


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(data: Any) -> list[str]:
    """Every way ``data`` differs from the record schema (an empty list: it is a valid record)."""
    from torchcontracts.core.claims import VERDICTS, all_claims

    if not isinstance(data, dict):
        return ["a record is a JSON object"]
    p: list[str] = []
    if data.get("schema") not in (SCHEMA, REHEARSAL_SCHEMA):
        p.append(f"schema must be {SCHEMA!r} (or {REHEARSAL_SCHEMA!r}), got {data.get('schema')!r}")
    rehearsal = data.get("schema") == REHEARSAL_SCHEMA
    if data.get("rehearsal", False) is not rehearsal:
        p.append(f"rehearsal must be {'true' if rehearsal else 'false or absent'} with schema {data.get('schema')!r}")
    skipped = data.get("skipped", {})
    if not (isinstance(skipped, dict) and all(isinstance(v, str) and v for v in skipped.values())):
        p.append("skipped must map comparison names to the reason each was skipped")
    for key, kind in (("fixture", bool), ("complete", bool), ("torch", str), ("python", str), ("date", str)):
        if not isinstance(data.get(key), kind):
            p.append(f"{key} must be a {kind.__name__}")
    if isinstance(data.get("date"), str) and not re.fullmatch(r"\d{4}-\d\d-\d\d", data["date"]):
        p.append(f"date must read YYYY-MM-DD, got {data['date']!r}")
    for key in ("seconds", "budget_s"):
        if not _is_num(data.get(key)) or data[key] < 0:
            p.append(f"{key} must be a number of seconds")
    dev = data.get("device")
    if not isinstance(dev, dict):
        p.append("device must be an object")
    else:
        if not (isinstance(dev.get("name"), str) and dev["name"]):
            p.append("device.name must be the GPU's name")
        if not (isinstance(dev.get("capability"), str) and re.fullmatch(r"\d+\.\d+", dev["capability"])):
            p.append(f"device.capability must read like '9.0', got {dev.get('capability')!r}")
        for key in ("driver", "cuda"):
            if not isinstance(dev.get(key), str):
                p.append(f"device.{key} must be a string")
        if not _is_num(dev.get("memory_gib")):
            p.append("device.memory_gib must be a number")
    sections = {k: data.get(k) for k in ("lessons", "claims", "comparisons", "figures")}
    for key, val in sections.items():
        if not isinstance(val, dict):
            p.append(f"{key} must be an object")
    if p:
        return p
    for name, les in data["lessons"].items():
        if not re.fullmatch(r"\d\d_\w+\.ipynb", name) or not isinstance(les, dict):
            p.append(f"lessons: {name!r} is not a lesson notebook name with an object")
        elif not _is_num(les.get("seconds")) or not isinstance(les.get("error"), str):
            p.append(f"lessons.{name} needs seconds (a number) and error (a string, empty when it ran)")
    known = all_claims()
    for cid, c in data["claims"].items():
        if cid not in known:
            p.append(f"claims: unknown claim id {cid!r}")
        elif not isinstance(c, dict) or c.get("verdict") not in VERDICTS:
            p.append(f"claims.{cid}.verdict must be one of {VERDICTS}")
        elif not all(isinstance(c.get(k), str) and c.get(k) for k in ("evidence", "source", "notebook")):
            p.append(f"claims.{cid} needs evidence, source and notebook (non-empty strings)")
    for name, comp in data["comparisons"].items():
        if not (
            isinstance(comp, dict)
            and isinstance(comp.get("ok"), bool)
            and isinstance(comp.get("detail"), str)
            and isinstance(comp.get("lesson"), str)
            and _is_num(comp.get("seconds"))
        ):
            p.append(f"comparisons.{name} needs lesson, ok (a bool), detail and seconds")
    for key, fig in data["figures"].items():
        if not _KEY.match(key):
            p.append(f"figures: key {key!r} must read area.quantity_unit")
        elif not (
            isinstance(fig, dict)
            and _is_num(fig.get("value"))
            and isinstance(fig.get("unit"), str)
            and isinstance(fig.get("what"), str)
        ):
            p.append(f"figures.{key} needs value (a finite number), unit and what")
        elif fig.get("comparison") not in data["comparisons"]:
            p.append(f"figures.{key}.comparison must name one of the record's comparisons")
    ran_clean = all(les["error"] == "" for les in data["lessons"].values() if isinstance(les, dict)) and all(
        c.get("ok") for c in data["comparisons"].values() if isinstance(c, dict)
    )
    if not p and data["complete"] and not ran_clean:
        p.append("complete is true but a lesson failed or a comparison did not agree")
    return p


def assemble(
    lessons: dict[str, dict[str, Any]],
    claims: dict[str, dict[str, str]],
    comparisons: dict[str, dict[str, Any]],
    *,
    device: dict[str, Any],
    seconds: float,
    torch_version: str,
    date: str | None = None,
    partial: bool = False,
    rehearsal: bool = False,
    skipped: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The record's JSON object from what the lessons and comparisons produced (``validate`` checks it).

    ``rehearsal``: a CPU rehearsal (``record --rehearsal``), with its own schema; ``skipped`` names the comparisons
    that did not run, each with why (a rehearsal's comparisons without a CPU half).
    """
    figures = {
        key: {**fig, "comparison": name}
        for name, comp in comparisons.items()
        for key, fig in comp.get("figures", {}).items()
    }
    clean = all(not les["error"] for les in lessons.values()) and all(c["ok"] for c in comparisons.values())
    extra: dict[str, Any] = {"rehearsal": True} if rehearsal else {}
    if skipped:
        extra["skipped"] = dict(skipped)
    return {
        "schema": REHEARSAL_SCHEMA if rehearsal else SCHEMA,
        **extra,
        "fixture": False,
        "date": date or time.strftime("%Y-%m-%d"),
        "complete": clean and not partial,
        "seconds": round(seconds, 1),
        "budget_s": BUDGET_S,
        "device": device,
        "torch": torch_version,
        "python": platform.python_version(),
        "lessons": lessons,
        "claims": claims,
        "comparisons": comparisons,
        "figures": figures,
    }
