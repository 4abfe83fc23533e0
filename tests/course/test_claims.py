"""The claim API asserts honestly, records for the ledger, and notebooks use it for every claim they own."""

from __future__ import annotations

import json
import re

import pytest

import torchcontracts as tc
from torchcontracts.core.claims import LEDGER_ENV, ClaimContradicted, all_claims, owned_by, seed_section

from conftest import ROOT, lesson_paths, read
from torchcontracts.course import lessons

VERDICT_CALL = re.compile(r"verdict\(\s*[\"'](C\d+b?)[\"']")
OWNED = {les.stem: " ".join(owned_by(les.number)) for les in lessons() if owned_by(les.number)}


def test_course_data_has_all_124_claims_matching_the_shared_source():
    claims = all_claims()
    assert len(claims) == 124
    shared = ROOT.parent / "shared" / "claims.csv"
    if shared.exists():
        packaged = (ROOT / "helpers/torchcontracts/data/claims.csv").read_text(encoding="utf-8")
        assert packaged == shared.read_text(encoding="utf-8"), "data/claims.csv drifted from shared/claims.csv"


def test_every_claim_has_one_lesson_and_the_seed_section_that_holds_its_words():
    claims = all_claims()
    assert all(c.lesson in {les.number for les in lessons()} for c in claims.values()), "a claim lacks a lesson"
    assert sum(len(owned_by(les.number)) for les in lessons()) == len(claims)
    seeds = ROOT.parent / "shared" / "seeds"
    if not seeds.is_dir():
        pytest.skip("the seed articles (../shared/seeds) are not on this machine")
    texts = {p.name: p.read_text(encoding="utf-8") for p in seeds.glob("*.txt")}
    wrong = {
        c.id: (c.section, seed_section(c.zh, texts[c.seed_file]))
        for c in claims.values()
        if c.section != seed_section(c.zh, texts[c.seed_file]) or not c.section
    }
    assert not wrong, f"data/claim_places.csv sections disagree with the seeds: {wrong}"


def test_seed_section_finds_a_fragment_in_a_numbered_section_and_nothing_elsewhere():
    text = "1. 开场白 这里是第一段。2. 张量 本节讲视图与步长。3. 内存 这里讲缓存"
    assert seed_section("本节讲视图与步长", text) == "§2 张量 本节讲视图与步长"
    assert seed_section("这里讲缓存", text).startswith("§3 ")
    assert seed_section("完全不存在的句子内容", text) == ""


def test_claim_shows_the_seed_words_and_where_they_come_from(capsys):
    c = tc.claim("C069")
    out = capsys.readouterr().out
    assert c.zh in out and c.seed_file in out and c.section and c.section in out and "not trusted" in out


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
    for path in lesson_paths():
        found[path.stem] = [cid for c in read(path).cells for cid in VERDICT_CALL.findall(c.source)]
    return found


@pytest.mark.parametrize("lesson", sorted(OWNED))
def test_lesson_covers_every_claim_it_owns(lesson):
    found = _verdicts_by_notebook()
    assert lesson in found, f"{lesson} has no claim cells"
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
    for path in lesson_paths():
        for cell in read(path).cells:
            assert not re.search(r"proof\s*=\s*(True|False)\b", cell.source), f"{path.name}: proof must be measured"
