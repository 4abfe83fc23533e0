"""Claims from the seed articles, tested on the learner's machine and recorded for the ledger.

A lesson cell states a claim (``claim``), measures, then calls ``verdict`` with a boolean
``proof`` computed from the measurement. ``proof`` must be False if PyTorch behaved the
other way, so the assertion inside ``verdict`` keeps the course honest on every machine.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
import re
from importlib import resources
from typing import Literal

import torch

__all__ = [
    "Claim",
    "ClaimContradicted",
    "VERDICTS",
    "all_claims",
    "claim",
    "owned_by",
    "recorded",
    "BASES",
    "seed_section",
    "verdict",
]

Verdict = Literal["true", "false", "partly", "outdated", "gpu-only"]
VERDICTS: tuple[str, ...] = ("true", "false", "partly", "outdated", "gpu-only")
Basis = Literal["measured", "source", "docs", "model", "citation"]
# What a verdict rests on: a run on this device, torch's source, the docs, the course's allocator model, or a text
# outside torch (a README, release notes). Only "measured" may be called proved or measured anywhere in the course.
BASES: tuple[str, ...] = ("measured", "source", "docs", "model", "citation")
BASIS_WORDS = {
    "measured": "measured",
    "source": "the torch source",
    "docs": "the docs",
    "model": "the allocator model",
    "citation": "a citation",
}
# A non-measured verdict may not claim a measurement, in its evidence or in lesson prose (tests/course/test_basis.py):
# "not measured" and "unmeasured" are fine.
CLAIMS_A_RUN = re.compile(r"(?<!not )(?<!nothing )(?<!un)\b(proved|proven|proves|measured)\b", re.I)
LEDGER_ENV = "TORCHCONTRACTS_LEDGER"  # JSON-lines file that `torchcontracts ledger` collects


@dataclasses.dataclass(frozen=True)
class Claim:
    """A checkable statement from a seed article (``claims.csv``)."""

    id: str
    topic: str
    seed_file: str
    en: str
    zh: str
    lesson: str = ""  # "01".."09": the one lesson that judges it (data/claim_places.csv)
    section: str = ""  # where the seed says it: "§2.4 GPU 显存层" (data/claim_places.csv)


@dataclasses.dataclass(frozen=True)
class Record:
    """A verdict measured in a notebook, as the ledger stores it."""

    id: str
    verdict: str
    evidence: str
    source: str
    device: str
    torch: str
    basis: str = "measured"  # one of BASES
    expect: str = ""  # gpu-only only: the verdict the source/docs/model expect a GPU run to give


class ClaimContradicted(AssertionError):
    """The measurement on this machine does not support the stated verdict."""


@functools.cache
def all_claims() -> dict[str, Claim]:
    """Every claim in the course data, keyed by id (C001 ...)."""
    data = resources.files("torchcontracts").joinpath("data")
    rows = csv.DictReader(data.joinpath("claims.csv").read_text(encoding="utf-8").splitlines())
    places = {
        r["id"]: r for r in csv.DictReader(data.joinpath("claim_places.csv").read_text(encoding="utf-8").splitlines())
    }
    return {
        r["id"]: Claim(
            r["id"],
            r["topic"],
            r["seed_file"],
            r["claim_en"],
            r["claim_zh"],
            places.get(r["id"], {}).get("lesson", ""),
            places.get(r["id"], {}).get("section", ""),
        )
        for r in rows
    }


def owned_by(lesson: str) -> list[str]:
    """The ids of the claims one lesson judges ("01".."09"): one place for ownership, read by tests and summaries."""
    return sorted(cid for cid, c in all_claims().items() if c.lesson == lesson)


_KEEP = re.compile(r"[0-9A-Za-z\u4e00-\u9fff]")
_HEADING = re.compile(
    r"(?:^|(?<=[。！？\n]))[ \t]*([1-9]\d?(?:\.[1-9]\d?)*)\.?[ \t]*(?![\d%.~])(\S[^\n。！？]{0,60})", re.M
)


def seed_section(zh: str, text: str) -> str:
    """The numbered section of a seed article that holds a claim's Chinese words ("" if not found).

    The claims data strips punctuation from the seed's sentences, so both sides are compared as
    letters, digits and CJK only; the longest fragment that matches wins. This is how the
    ``section`` column of data/claim_places.csv was made, and tests re-derive it from the seeds.
    """
    idx = [i for i, ch in enumerate(text) if _KEEP.match(ch)]
    flat = "".join(text[i] for i in idx)
    fragments = sorted(
        ("".join(ch for ch in f if _KEEP.match(ch)) for f in re.split(r"\.\.\.|…", zh)), key=len, reverse=True
    )
    for frag in fragments:
        for size in range(len(frag), 7, -4) if len(frag) >= 8 else [len(frag)] if frag else []:
            for start in range(0, len(frag) - size + 1, 2):
                k = flat.find(frag[start : start + size])
                if k < 0:
                    continue
                heads = [m for m in _HEADING.finditer(text) if m.start() <= idx[k]]
                if not heads:
                    return "opening"
                title = re.split(r"[，,：:]", heads[-1].group(2).strip())[0]
                return f"§{heads[-1].group(1)} {title[:18]}" + ("…" if len(title) > 18 else "")
    return ""


_RECORDS: dict[str, Record] = {}


def recorded() -> dict[str, Record]:
    """The verdicts recorded in this process so far."""
    return dict(_RECORDS)


def _lookup(claim_id: str) -> Claim:
    try:
        return all_claims()[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim id {claim_id!r}: ids are listed in torchcontracts/data/claims.csv") from None


def claim(claim_id: str) -> Claim:
    """Show a seed claim as a claim *under test*, never as fact."""
    c = _lookup(claim_id)
    where = f"{c.seed_file}" + (f", {c.section}" if c.section else "")
    print(f"CLAIM {c.id} ({c.topic}), as the seed article states it - to be tested, not trusted:")
    print(f"  \u201c{c.en}\u201d")
    print(f"  seed words: \u201c{c.zh}\u201d  [{where}]")
    return c


def verdict(
    claim_id: str,
    verdict: Verdict,
    *,
    evidence: str,
    proof: bool,
    source: str | None = None,
    basis: Basis | None = None,
    expect: str | None = None,
) -> None:
    """Assert the ``proof`` of a verdict, print it with what it rests on, and record it for the ledger.

    ``basis`` says what the verdict rests on (``BASES``). Left out, the cell measured it on this
    device and ``source`` becomes "measured on cpu" (or cuda). A ``source`` text (the file, page or
    README) needs a ``basis``, and a verdict that does not rest on a measurement may not call itself
    proved or measured. A ``gpu-only`` verdict decides nothing here, so it says what a GPU run is
    expected to show (``expect``) and what that expectation rests on; the GPU record confirms it or not.
    Returns None so a claim cell ends quietly; ``recorded()`` holds the records.
    """
    c = _lookup(claim_id)
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if not isinstance(proof, bool):
        raise TypeError(f"{claim_id}: proof must be a bool computed from a measurement, got {type(proof).__name__}")
    if source is not None and basis is None:
        raise TypeError(f"{claim_id}: a source={source!r} needs basis=, one of {BASES}")
    basis = basis or "measured"
    if basis not in BASES:
        raise ValueError(f"{claim_id}: basis must be one of {BASES}, got {basis!r}")
    if verdict == "gpu-only":
        if expect not in VERDICTS[:4]:
            raise ValueError(
                f"{claim_id}: a gpu-only verdict says what a GPU run should show: expect= one of {VERDICTS[:4]}"
            )
        if basis == "measured":
            raise ValueError(f"{claim_id}: gpu-only decides nothing here; basis= names what the expectation rests on")
    elif expect is not None:
        raise ValueError(f"{claim_id}: expect= belongs to gpu-only verdicts; '{verdict}' is already decided")
    if basis != "measured":
        word = CLAIMS_A_RUN.search(f"{evidence} {source or ''}")
        if word:
            raise ValueError(
                f"{claim_id}: rests on {BASIS_WORDS[basis]}, so it may not say '{word.group(0)}': say cited or modelled"
            )
    if not proof:
        raise ClaimContradicted(
            f"{c.id}: this machine's measurement does not support the verdict '{verdict}'. "
            f"Evidence: {evidence}. Re-read the cell: PyTorch behaved differently here."
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    src = source or (f"measured on {device}" if basis == "measured" else BASIS_WORDS[basis])
    rec = Record(c.id, verdict, evidence, src, device, torch.__version__, basis, expect or "")
    _RECORDS[c.id] = rec
    head = (
        f"GPU-ONLY - expected {rec.expect.upper()} from {BASIS_WORDS[basis]}; a GPU run decides"
        if verdict == "gpu-only"
        else verdict.upper()
        + ("" if basis == "measured" else f" ({'modelled' if basis == 'model' else 'cited'}: {BASIS_WORDS[basis]})")
    )
    print(f"VERDICT {c.id}: {head} - {evidence}  [{rec.source}, torch {torch.__version__}]")
    path = os.environ.get(LEDGER_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(dataclasses.asdict(rec)) + "\n")
