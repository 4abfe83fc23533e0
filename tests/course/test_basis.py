"""What a verdict rests on is data (issue 25): ``tc.verdict`` records a basis, and only measured verdicts may be
called proved or measured, in a verdict line or in a lesson's prose.

The label check reads every lesson's markdown: in a clause (text between ``;``, ``|`` or a full stop) that names a
claim id and says proved/proven/measured, with no GPU or CUDA in it, every claim named must rest on a measurement in
the cached CPU ledger. "Measured on a GPU" is a statement about the GPU path, which the CPU ledger cannot check.
"""

from __future__ import annotations

import csv
import json
import re

import pytest

import torchcontracts as tc
from conftest import ROOT, read
from torchcontracts.core.claims import BASES, CLAIMS_A_RUN, VERDICTS, recorded
from torchcontracts.course import lessons
from torchcontracts.publish.ledger import COLUMNS, cache_paths
from torchcontracts.publish.ledger_compare import evidence_kind

LESSONS = [ROOT / les.notebook for les in lessons()]
CLAIM_ID = re.compile(r"\bC\d{3}b?\b")
RUN_WORD = CLAIMS_A_RUN  # the rule verdict() applies to evidence, applied to prose
GPU_WORD = re.compile(r"\b(GPU|CUDA|H200)\b", re.I)


def cached_basis() -> dict[str, str]:
    with open(cache_paths()[0], newline="", encoding="utf-8") as fh:
        return {r["id"]: evidence_kind(r) for r in csv.DictReader(fh)}


def mislabelled(text: str, basis: dict[str, str]) -> list[str]:
    """The clauses of ``text`` that call a non-measured verdict proved or measured, and the rows of a table whose
    header does (a column headed "measured here" labels every claim below it)."""
    bad = []
    header_says_run = False
    for line in text.splitlines():
        if not line.startswith("|"):
            header_says_run = False
        elif header_says_run is False and not CLAIM_ID.search(line):
            header_says_run = bool(RUN_WORD.search(line))
            continue
        if header_says_run and not GPU_WORD.search(line):
            bad += [
                f"{cid} ({basis[cid]}): under a 'measured' header"
                for cid in CLAIM_ID.findall(line)
                if basis.get(cid, "measured") != "measured"
            ]
        for clause in re.split(r"[;|]|\.\s", line):
            if not RUN_WORD.search(clause) or GPU_WORD.search(clause):
                continue
            for cid in CLAIM_ID.findall(clause):
                if basis.get(cid, "measured") != "measured":
                    bad.append(f"{cid} ({basis[cid]}): {clause.strip()[:120]}")
    return bad


# -- the API ------------------------------------------------------------------------------------------------------


def test_a_verdict_without_a_source_is_measured_here_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "v.jsonl"
    monkeypatch.setenv("TORCHCONTRACTS_LEDGER", str(path))
    tc.verdict("C131", "true", evidence="@ matches numpy.matmul", proof=True)
    rec = json.loads(path.read_text())
    assert rec["basis"] == "measured" and rec["expect"] == "" and rec["source"].startswith("measured on ")


def test_a_source_needs_a_basis_and_the_basis_must_be_known():
    with pytest.raises(TypeError, match="needs basis="):
        tc.verdict("C030", "outdated", evidence="x", proof=True, source="a README")
    with pytest.raises(ValueError, match="basis must be one of"):
        tc.verdict("C030", "outdated", evidence="x", proof=True, source="a README", basis="hearsay")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "evidence", ["the source proved it", "measured on cpu", "this is proven", "the run proves it", "Measured here"]
)
def test_a_cited_or_modelled_verdict_may_not_call_itself_proved_or_measured(evidence):
    with pytest.raises(ValueError, match="may not say"):
        tc.verdict("C115", "false", evidence=evidence, proof=True, source="Conv_v8.cpp", basis="source")


def test_not_measured_is_an_honest_thing_to_say_of_a_cited_verdict(capsys):
    tc.verdict(
        "C030", "outdated", evidence="not measured: the README says so", proof=True, source="README", basis="citation"
    )
    assert "OUTDATED (cited: a citation)" in capsys.readouterr().out


def test_gpu_only_states_what_a_gpu_run_should_show_and_what_that_rests_on(capsys):
    with pytest.raises(ValueError, match="expect="):
        tc.verdict("C115", "gpu-only", evidence="x", proof=True, source="Conv_v8.cpp", basis="source")
    with pytest.raises(ValueError, match="names what the expectation rests on"):
        tc.verdict("C115", "gpu-only", evidence="x", proof=True, expect="false")
    with pytest.raises(ValueError, match="belongs to gpu-only"):
        tc.verdict("C115", "false", evidence="x", proof=True, expect="false")
    tc.verdict("C115", "gpu-only", evidence="x", proof=True, source="Conv_v8.cpp", basis="source", expect="false")
    out = capsys.readouterr().out
    assert "GPU-ONLY - expected FALSE from the torch source; a GPU run decides" in out
    rec = recorded()["C115"]
    assert rec.expect == "false" and rec.basis == "source"


# -- the ledger ---------------------------------------------------------------------------------------------------


def test_the_ledger_has_basis_and_expect_columns():
    assert COLUMNS.index("basis") == COLUMNS.index("verdict") + 1 and "expect" in COLUMNS


def test_the_cached_ledger_gives_every_claim_a_basis_and_every_gpu_only_verdict_an_expectation():
    with open(cache_paths()[0], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 124 and "basis" in rows[0], "rerun `torchcontracts ledger --cache`"
    assert {r["basis"] for r in rows} <= set(BASES), {r["basis"] for r in rows}
    for r in rows:
        if r["verdict"] == "gpu-only":
            assert r["expect"] in VERDICTS[:4] and r["basis"] != "measured", r["id"]
        else:
            assert r["expect"] == "", r["id"]


def test_a_ledger_kept_before_the_basis_column_reads_its_kind_from_the_source():
    assert evidence_kind({"source": "torch source (x.h)"}) == "source"
    assert evidence_kind({"source": "allocator model"}) == "model"
    assert evidence_kind({"source": "measured on cpu", "basis": ""}) == "measured"
    assert evidence_kind({"source": "measured on cpu", "basis": "citation"}) == "citation"


# -- the prose ----------------------------------------------------------------------------------------------------


def test_the_label_check_catches_a_cited_verdict_called_proved():
    basis = {"C115": "source", "C001": "measured"}
    assert mislabelled("| a warm-up searches nothing | C115 `false`, proved |", basis)
    assert mislabelled("C115 was measured here.", basis)
    assert not mislabelled("| C115 `false` measured on a GPU; on a CPU `gpu-only`, cited |", basis)
    assert not mislabelled("C001 `false` measured; C115 cited from the torch source", basis)
    assert not mislabelled("C115: not measured here", basis)
    table = "| contract | measured here |\n| --- | --- |\n| a warm-up searches nothing | C115 false |"
    assert mislabelled(table, basis)
    assert not mislabelled(table.replace("measured here", "verdict"), basis)
    assert not mislabelled("| contract | measured here |\n| --- | --- |\n| views | C001 false |", basis)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem[:2])
def test_no_lesson_calls_a_cited_or_modelled_verdict_proved_or_measured(path):
    basis = cached_basis()
    text = "\n".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    assert not mislabelled(text, basis)


def test_lesson_10_counts_from_the_basis_column_with_no_wording_classifier():
    src = "\n".join(c.source for c in read(ROOT / "notebooks" / "10_claims_ledger.ipynb").cells)
    assert "source_kind" not in src and "measured live" not in src
    assert 'judged["basis"].value_counts()' in src
