"""The claim API asserts honestly, records for the ledger, and notebooks use it for every claim they own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import torchcontracts as tc
from torchcontracts.claims import LEDGER_ENV, ClaimContradicted, all_claims

from conftest import ROOT, read

VERDICT_CALL = re.compile(r"verdict\(\s*[\"'](C\d+b?)[\"']")
# What each lesson must cover (from the issues and CURRICULUM.md). Lessons not written yet are skipped.
OWNED = {
    "01_tensor_contracts": "C001 C021 C022 C025 C031 C033 C040 C051 C082 C131 C136 C137",
    "02_autograd_engine": "C002 C003 C004 C005 C006 C007 C008 C009 C011 C012 C013 C014 C015 C016 C034 C043 "
                          "C044 C087 C088 C096 C097 C098 C099 C100 C101 C102 C105 C106 C130 C133 C134 C138",
    "03_memory_contracts": "C010 C018 C019 C020 C024 C026 C057 C080 C081 C083 C085 C085b C086 C135 C146",
}


def test_course_data_has_all_124_claims_matching_the_shared_source():
    claims = all_claims()
    assert len(claims) == 124
    shared = ROOT.parent / "shared" / "claims.csv"
    if shared.exists():
        packaged = (ROOT / "helpers/torchcontracts/data/claims.csv").read_text(encoding="utf-8")
        assert packaged == shared.read_text(encoding="utf-8"), "data/claims.csv drifted from shared/claims.csv"


def test_verdict_raises_when_the_measurement_contradicts_it():
    with pytest.raises(ClaimContradicted, match="C022"):
        tc.verdict("C022", "false", evidence="pretend transpose copied", proof=False)


def test_verdict_rejects_non_boolean_proof_and_unknown_verdicts():
    with pytest.raises(TypeError):
        tc.verdict("C022", "false", evidence="x", proof=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        tc.verdict("C022", "wrong", evidence="x", proof=True)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="unknown claim id"):
        tc.claim("C999")


def test_verdict_appends_a_json_record_for_the_ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    tc.verdict("C131", "true", evidence="@ matches numpy.matmul", proof=True)
    rec = json.loads(path.read_text().splitlines()[-1])
    assert rec["id"] == "C131" and rec["verdict"] == "true" and rec["source"].startswith("measured on")


def _verdicts_by_notebook() -> dict[str, list[str]]:
    found = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        found[path.stem] = [cid for c in read(path).cells for cid in VERDICT_CALL.findall(c.source)]
    return found


@pytest.mark.parametrize("lesson", sorted(OWNED))
def test_lesson_covers_every_claim_it_owns(lesson):
    found = _verdicts_by_notebook()
    if lesson not in found:
        pytest.skip(f"{lesson} is not written yet")
    missing = set(OWNED[lesson].split()) - set(found[lesson])
    assert not missing, f"{lesson} lacks claim cells for {sorted(missing)}"


def test_each_claim_is_judged_in_exactly_one_lesson_and_exists():
    seen: dict[str, str] = {}
    for lesson, ids in _verdicts_by_notebook().items():
        for cid in set(ids):
            assert cid in all_claims(), f"{lesson}: unknown claim {cid}"
            assert cid not in seen, f"{cid} is judged in both {seen[cid]} and {lesson}"
            seen[cid] = lesson


def test_no_claim_cell_passes_a_literal_proof():
    for path in sorted(Path(ROOT / "notebooks").glob("*.ipynb")):
        for cell in read(path).cells:
            assert not re.search(r"proof\s*=\s*(True|False)\b", cell.source), f"{path.name}: proof must be measured"
