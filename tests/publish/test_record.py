"""`torchcontracts record`: refuses on a CPU in one line; its record has a schema; lessons read a record honestly.

No GPU is lent to this project's CI, so the record itself is never made here. What runs on a CPU is tested:
the refusal, the schema (against tests/fixtures/gpu_record.fixture.json, a fixture that says so), the record
assembled from lesson and comparison results, the comparisons' registry and their timing code on the CPU,
and the API lessons use to show a recorded figure beside their own.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
import types

import pytest
import torch

from torchcontracts.publish import gpu_checks, record
from torchcontracts.publish.record import RECORD_ENV, RecordError, assemble, beside, load_record, recorded, validate

from conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "gpu_record.fixture.json"


def fixture_data() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for CPU machines")
def test_record_refuses_on_a_cpu_in_one_line_and_writes_nothing():
    target = record.package_record_file()
    before = target.stat().st_mtime_ns if target.exists() else None
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "record"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("record: no CUDA device here") and "nothing was written" in lines[0]
    assert "Traceback" not in proc.stderr
    assert (target.stat().st_mtime_ns if target.exists() else None) == before


def test_the_fixture_is_a_valid_record_and_says_it_is_a_fixture():
    assert validate(fixture_data()) == []
    rec = load_record(FIXTURE)
    assert rec is not None and rec.fixture and "FIXTURE" in rec.label
    frame = rec.claims_frame()
    assert list(frame.columns) == ["id", "verdict", "basis", "evidence", "source", "notebook"] and len(frame) == 4
    assert set(frame["basis"]) <= {"measured", "source", "docs", "model", "citation"}


def _set(data: dict, path: str, value) -> dict:
    d = copy.deepcopy(data)
    *keys, last = path.split("/")
    node = d
    for k in keys:
        node = node[k]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return d


@pytest.mark.parametrize(
    "path, value, says",
    [
        ("schema", "torchcontracts-gpu-record/0", "schema"),
        ("date", "1 Jan 2000", "date"),
        ("device/name", "", "device.name"),
        ("device/capability", "sm90", "device.capability"),
        ("device", KeyError, "device"),
        ("claims/C999", {"verdict": "true", "evidence": "x", "source": "x", "notebook": "x"}, "unknown claim id"),
        ("claims/C019/verdict", "probably", "verdict"),
        ("claims/C019/evidence", "", "evidence"),
        ("figures/roofline.hbm_GBps/value", float("nan"), "finite number"),
        ("figures/roofline.hbm_GBps/value", "fast", "finite number"),
        ("figures/roofline.hbm_GBps/comparison", "nowhere", "comparisons"),
        (
            "figures/HBM",
            {"value": 1, "unit": "GB/s", "what": "x", "comparison": "roofline.ceilings"},
            "area.quantity_unit",
        ),
        ("lessons/notes.txt", {"seconds": 1, "error": ""}, "lesson notebook name"),
        ("comparisons/roofline.ceilings/ok", "yes", "ok (a bool)"),
        ("complete", True, "complete is true"),  # the fixture has a lesson that did not run
    ],
)
def test_the_schema_check_names_what_is_wrong(path, value, says):
    problems = validate(_set(fixture_data(), path, value))
    assert problems and any(says in p for p in problems), problems


def test_a_broken_record_file_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    with pytest.raises(RecordError, match="not a readable JSON record"):
        load_record(bad)
    bad.write_text(json.dumps(_set(fixture_data(), "device/capability", "x")))
    with pytest.raises(RecordError, match=r"device\.capability"):
        load_record(bad)
    assert load_record(tmp_path / "absent.json") is None


def test_the_packages_own_record_is_never_a_fixture(tmp_path, monkeypatch):
    real = record.package_record_file()
    if real.exists():  # a committed record: a real one, valid, from a GPU
        rec = load_record(real)
        assert rec is not None and not rec.fixture and validate(rec.data) == []
    fake = tmp_path / "gpu_record.json"
    fake.write_text(FIXTURE.read_text())
    monkeypatch.setattr(record, "package_record_file", lambda: fake)
    with pytest.raises(RecordError, match="fixture"):
        load_record()


def test_a_lesson_shows_the_recorded_figure_beside_its_own_with_device_and_date(monkeypatch):
    monkeypatch.setenv(RECORD_ENV, str(FIXTURE))
    fig = recorded("roofline.hbm_GBps")
    assert fig is not None and fig.value == 1234.0 and fig.unit == "GB/s"
    assert fig.device == "FIXTURE GPU" and fig.date == "2000-01-01" and "FIXTURE" in fig.label
    line = beside("roofline.hbm_GBps", 101.37, "GB/s", here_label="cpu")
    assert line == (
        "roofline.hbm_GBps: this machine (cpu): 101 GB/s | recorded: 1,234 GB/s on FIXTURE GPU "
        "(capability 9.0), 2000-01-01 [FIXTURE: test data, not a measurement]"
    )
    assert "noisy: rerun" in beside("roofline.hbm_GBps", "noisy: rerun on a quiet machine", "GB/s")
    assert recorded("roofline.no_such_figure") is None
    assert "the GPU record (FIXTURE GPU" in beside("roofline.no_such_figure", 1.0, "x") and "has no" in beside(
        "roofline.no_such_figure", 1.0, "x"
    )


def test_without_a_record_a_lesson_says_so_instead_of_a_figure(tmp_path, monkeypatch):
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "none.json"))
    assert recorded("roofline.hbm_GBps") is None
    line = beside("roofline.hbm_GBps", 100.0, "GB/s", here_label="cpu")
    assert "100 GB/s" in line and "no GPU record" in line and "torchcontracts record" in line


def _comparisons(ok: bool = True) -> dict:
    return {
        "roofline.ceilings": {
            "lesson": "04",
            "what": "ceilings",
            "ok": ok,
            "detail": "d",
            "seconds": 1.0,
            "figures": {"roofline.hbm_GBps": {"value": 4000.0, "unit": "GB/s", "what": "copy"}},
        }
    }


def test_assemble_makes_a_valid_record_and_marks_failures_incomplete():
    lessons = {"03_memory_contracts.ipynb": {"seconds": 12.0, "error": "", "claims": 1}}
    claims = {
        "C019": {
            "verdict": "false",
            "evidence": "e",
            "source": "measured on cuda",
            "notebook": "03_memory_contracts.ipynb",
        }
    }
    device = {"name": "Some GPU", "capability": "9.0", "driver": "1.0", "cuda": "13.0", "memory_gib": 80.0, "count": 1}
    rec = assemble(lessons, claims, _comparisons(), device=device, seconds=100.0, torch_version="2.13.0")
    assert validate(rec) == [] and rec["complete"] and not rec["fixture"]
    assert rec["figures"]["roofline.hbm_GBps"]["comparison"] == "roofline.ceilings"
    assert time.strftime("%Y") in rec["date"]
    failed = assemble(
        {"03_memory_contracts.ipynb": {"seconds": 1.0, "error": "cell 5: ClaimContradicted: ...", "claims": 0}},
        {},
        _comparisons(ok=False),
        device=device,
        seconds=1.0,
        torch_version="2.13.0",
    )
    assert validate(failed) == [] and not failed["complete"]
    assert not assemble(lessons, claims, _comparisons(), device=device, seconds=1.0, torch_version="x", partial=True)[
        "complete"
    ]


def test_the_registry_holds_each_lessons_gpu_comparisons():
    gpu_checks.load_modules()
    want = {
        "alloc.model_vs_real": "03",
        "roofline.ceilings": "04",
        "async.launch_returns_early": "04",
        "streams.copy_compute_overlap": "04",
    }
    assert {n: gpu_checks.REGISTRY[n].lesson for n in want} == want
    assert all(c.what for c in gpu_checks.REGISTRY.values())


def test_run_all_records_failures_and_the_budget_instead_of_raising(monkeypatch):
    reg = {}
    monkeypatch.setattr(gpu_checks, "REGISTRY", reg)
    gpu_checks.comparison("t.good", lesson="99", what="w")(
        lambda: gpu_checks.Outcome(True, "fine", {"t.x_ms": gpu_checks.Measured(1.5, "ms", "x")})
    )
    gpu_checks.comparison("t.raises", lesson="99", what="w")(lambda: 1 / 0)
    out = gpu_checks.run_all(progress=False)
    assert out["t.good"]["ok"] and out["t.good"]["figures"] == {"t.x_ms": {"value": 1.5, "unit": "ms", "what": "x"}}
    assert not out["t.raises"]["ok"] and out["t.raises"]["detail"].startswith("failed: ZeroDivisionError")
    late = gpu_checks.run_all(deadline=time.monotonic() - 1, progress=False)
    assert all(not v["ok"] and "budget" in v["detail"] for v in late.values())


def test_a_missing_lesson_module_is_skipped_but_a_broken_one_is_not(monkeypatch):
    assert gpu_checks.load_modules(("torchcontracts.no_such_lesson_module",)) == [
        "torchcontracts.no_such_lesson_module"
    ]

    def broken(name):  # the module exists, but one of its own imports is missing
        raise ModuleNotFoundError("No module named 'triton'", name="triton")

    monkeypatch.setattr(gpu_checks, "importlib", types.SimpleNamespace(import_module=broken))
    with pytest.raises(ModuleNotFoundError, match="triton"):
        gpu_checks.load_modules(("torchcontracts.lessons.l04_async.roofline",))


def test_the_roofline_timing_code_runs_on_a_cpu_with_small_sizes():
    gbps = gpu_checks.copy_bandwidth("cpu", 1 << 20, repeats=3)
    tflops = gpu_checks.matmul_throughput("cpu", 64, torch.float32, repeats=3)
    assert gbps > 0 and tflops > 0


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}


def test_the_cli_and_the_module_offer_the_same_record_options():
    from torchcontracts.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert _options(sub.choices["record"]) == _options(record.add_arguments(argparse.ArgumentParser()))


def test_the_command_wires_lessons_comparisons_and_the_file_together(tmp_path, monkeypatch, capsys):
    """record.run on this CPU with the refusal lifted and the device faked: lesson 00 runs, one fake comparison,
    and the JSON lands in tmp_path only (never in the package; nothing here is a GPU measurement)."""
    monkeypatch.setattr(record, "refusal", lambda: None)
    monkeypatch.setattr(
        record,
        "device_info",
        lambda: {
            "name": "TEST, not a GPU",
            "capability": "0.0",
            "driver": "none",
            "cuda": "",
            "memory_gib": 0.0,
            "count": 0,
        },
    )
    monkeypatch.setattr(gpu_checks, "REGISTRY", {})
    monkeypatch.setattr(gpu_checks, "MODULES", ())
    gpu_checks.comparison("t.fake", lesson="00", what="w")(
        lambda: gpu_checks.Outcome(True, "ran", {"t.fake_ms": gpu_checks.Measured(2.0, "ms", "nothing real")})
    )
    out = tmp_path / "rec.json"
    args = record.add_arguments(argparse.ArgumentParser()).parse_args(["--out", str(out), "--only", "00", "--quiet"])
    monkeypatch.chdir(ROOT)
    assert record.run(args) == 0
    data = json.loads(out.read_text())
    assert validate(data) == [] and not data["complete"]  # --only: a partial record
    assert data["lessons"]["00_start_here.ipynb"]["error"] == "" and data["figures"]["t.fake_ms"]["value"] == 2.0
    assert "record: TEST, not a GPU" in capsys.readouterr().out


def test_a_run_stopped_after_its_lessons_still_leaves_their_partial_record(tmp_path, monkeypatch):
    """The device call's limit can stop the run anywhere: the record is rewritten after every lesson, so what
    finished is kept (here the run 'dies' where the comparisons would start)."""
    monkeypatch.setattr(record, "refusal", lambda: None)
    monkeypatch.setattr(
        record,
        "device_info",
        lambda: {"name": "TEST, not a GPU", "capability": "0.0", "driver": "none", "cuda": "", "memory_gib": 0.0},
    )

    def killed() -> None:
        raise RuntimeError("stopped at the call's limit")

    monkeypatch.setattr(gpu_checks, "load_modules", killed)
    out = tmp_path / "rec.json"
    args = record.add_arguments(argparse.ArgumentParser()).parse_args(["--out", str(out), "--only", "00", "--quiet"])
    monkeypatch.chdir(ROOT)
    with pytest.raises(RuntimeError, match="call's limit"):
        record.run(args)
    data = json.loads(out.read_text())
    assert validate(data) == [] and data["complete"] is False
    assert list(data["lessons"]) == ["00_start_here.ipynb"] and data["comparisons"] == {}
