"""The ledgers the package keeps, one per torch build that CI tests, and what changed between them.

Each CI leg runs README command 2, whose nbval pass executes every lesson; with ``TORCHCONTRACTS_LEDGER_DIR`` set,
``tests/conftest.py`` has each lesson's kernel append its verdicts to ``<dir>/<lesson>.jsonl``, and
``torchcontracts ledger --from-records DIR`` turns those files into a ledger (no second execution). CI then compares
that ledger with the one kept here for the same torch build (``--compare --check``: a verdict that changed fails the
leg until the kept copy is updated with ``--keep``), and at the end compares the legs' ledgers with each other.

Lesson 10 reads :func:`kept` and :func:`version_table`: which claims' verdicts differ between the tested torch
versions, and which held in all of them.
"""

from __future__ import annotations

import re
from pathlib import Path

from torchcontracts.publish.ledger_compare import compare_many, read_ledger

__all__ = ["KEPT_DIR", "kept", "kept_path", "version_key", "version_table"]

KEPT_DIR = Path(__file__).resolve().parents[1] / "data" / "ledgers"


def kept_path(torch_version: str) -> Path:
    """Where the package keeps the ledger of one torch build (``2.11.0+cu130`` -> ``torch-2.11.0+cu130.csv``)."""
    if not re.fullmatch(r"[0-9A-Za-z.+_-]+", torch_version):
        raise ValueError(f"not a torch version: {torch_version!r}")
    return KEPT_DIR / f"torch-{torch_version}.csv"


def version_key(torch_version: str) -> tuple[int, ...]:
    """Sort key of a torch version: its numeric release (the local ``+cu130`` part does not count)."""
    release = torch_version.split("+")[0]
    return tuple(int(x) for x in re.findall(r"\d+", release)[:3])


def kept() -> dict[str, Path]:
    """The kept ledgers by torch build, oldest first."""
    found = {p.stem.removeprefix("torch-"): p for p in KEPT_DIR.glob("torch-*.csv")}
    return {v: found[v] for v in sorted(found, key=lambda v: (version_key(v), v))}


def version_table(paths: dict[str, Path] | None = None):
    """(a pandas table with one verdict column per torch build and a row per claim, the ids whose verdict or kind
    of evidence is not the same in every build)."""
    import pandas as pd

    paths = kept() if paths is None else paths
    ledgers = {v: read_ledger(p) for v, p in paths.items()}
    ids = sorted(set().union(*ledgers.values())) if ledgers else []
    table = pd.DataFrame(
        {f"torch {v}": [rows.get(cid, {}).get("verdict", "absent") for cid in ids] for v, rows in ledgers.items()},
        index=pd.Index(ids, name="id"),
    )
    changed = [cid for cid, _ in compare_many(list(ledgers.values()))]
    return table, changed
