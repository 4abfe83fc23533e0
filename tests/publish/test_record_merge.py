"""``record --merge``: the partial records of several device calls make one record, and only parts that belong
together are joined. The parts are built from the test fixture, relabelled as GPU records in memory only."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from torchcontracts import course
from torchcontracts.publish.record import main
from torchcontracts.publish.record_merge import merge

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "gpu_record.fixture.json").read_text(encoding="utf-8"))


def part(lessons: list[str], *, torch: str = "2.11.0+cu130", date: str = "2026-12-04", error: str = "") -> dict:
    """A GPU record that ran ``lessons`` (names of the fixture's lessons), with each lesson's claims."""
    rec = copy.deepcopy(FIXTURE)
    rec.update(fixture=False, complete=False, torch=torch, date=date)
    rec["lessons"] = {n: {**rec["lessons"][n], "error": error} for n in lessons}
    rec["claims"] = {cid: c for cid, c in rec["claims"].items() if c["notebook"] in lessons}
    return rec


L03, L04 = "03_memory_contracts.ipynb", "04_async_and_timing.ipynb"


def test_two_parts_join_lessons_claims_and_comparisons():
    a, b = part([L03]), part([L04])
    merged = merge([a, b])
    assert list(merged["lessons"]) == [L03, L04]
    assert set(merged["claims"]) == set(a["claims"]) | set(b["claims"])
    assert merged["figures"] and set(merged["comparisons"]) == set(FIXTURE["comparisons"])
    assert [p["lessons"] for p in merged["parts"]] == [[L03], [L04]]
    assert merged["complete"] is False  # two lessons of eleven


def test_a_lesson_run_twice_keeps_its_last_run_and_only_that_runs_claims():
    failed, fixed = part([L03], error="cell 52: ValueError"), part([L03])
    cid = next(iter(fixed["claims"]))
    fixed["claims"][cid]["evidence"] = "the rerun's evidence"
    merged = merge([failed, fixed])
    assert merged["lessons"][L03]["error"] == ""
    assert merged["claims"][cid]["evidence"] == "the rerun's evidence"
    assert merge([fixed, failed])["lessons"][L03]["error"] == "cell 52: ValueError"


def test_complete_only_when_every_lesson_of_the_manifest_ran_clean():
    names = [les.notebook.split("/")[-1] for les in course.lessons()]
    rec = part([L03])
    rec["lessons"] = {n: {"seconds": 1.0, "error": "", "claims": 0} for n in names}
    assert merge([rec])["complete"] is (all(c["ok"] for c in rec["comparisons"].values()))
    rec["lessons"][names[-1]]["error"] = "boom"
    assert merge([rec])["complete"] is False


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda r: r.update(torch="2.13.0+cpu"), "another torch"),
        (lambda r: r["device"].update(name="NVIDIA A100"), "another GPU"),
        (lambda r: r.update(fixture=True), "a fixture or a rehearsal"),
        (lambda r: r.update(schema="torchcontracts-gpu-record/1-rehearsal", rehearsal=True), "a fixture or a reh"),
        (lambda r: r.update(date="yesterday"), "not a valid record"),
    ],
)
def test_parts_that_do_not_belong_together_are_refused_in_one_line(change, reason):
    b = part([L04])
    change(b)
    with pytest.raises(ValueError, match=reason):
        merge([part([L03]), b])


def test_the_command_writes_the_merged_record_and_refuses_without_a_traceback(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(part([L03])))
    b.write_text(json.dumps(part([L04])))
    out = tmp_path / "gpu_record.json"
    assert main(["--merge", str(a), str(b), "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["lessons"]) == [L03, L04]
    b.write_text("{not json")
    assert main(["--merge", str(a), str(b), "--out", str(tmp_path / "x.json")]) == 1
    assert "not a readable record" in capsys.readouterr().out
