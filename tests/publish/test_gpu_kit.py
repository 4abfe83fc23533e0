"""The GPU kit (.ci/gpu-kit): its wheel list, fetch.sh's refusals, the device call, and `record --rehearsal`.

Nothing here downloads or needs a GPU: fetch.sh is fed fake wheel files with TC_KIT_NO_DOWNLOAD=1, and the rehearsal
record is checked for what matters most, that no lesson can take it for a GPU record. The one test that executes a
lesson (a rehearsal of lesson 00) is marked slow.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from torchcontracts import course
from torchcontracts.publish import record, rehearsal
from torchcontracts.publish.record import RECORD_ENV, RecordError, assemble, beside, load_record, recorded, validate
from torchcontracts.publish.record_schema import REHEARSAL_SCHEMA, SCHEMA

from conftest import ROOT

KIT = ROOT / ".ci" / "gpu-kit"
DOC = ROOT / "docs" / "GPU_KIT.md"
LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)\s+#\s*\S")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_specs() -> dict[str, str]:
    specs: dict[str, str] = {}
    for line in KIT.joinpath("wheels.txt").read_text(encoding="utf-8").splitlines():
        if not line.split("#")[0].strip():
            continue
        m = LINE.match(line)
        assert m, f"wheels.txt: {line!r} is not `name==version  # why`"
        assert _norm(m[1]) not in specs, f"wheels.txt names {m[1]} twice (one version each)"
        specs[_norm(m[1])] = m[2]
    return specs


def test_the_wheel_list_parses_one_version_each_and_covers_what_record_needs():
    specs = wheel_specs()
    needed = (
        "jupyter_client ipykernel nbclient nbformat ipywidgets torchao pyzmq tornado traitlets jupyter_core comm "
        "ipython jsonschema fastjsonschema platformdirs debugpy nest_asyncio2 matplotlib_inline referencing rpds_py"
    )
    assert not [n for n in needed.split() if n not in specs]
    major, minor = (int(x) for x in specs["torchao"].split(".")[:2])
    assert (major, minor) >= (0, 18), "torchao >= 0.18 is the first ABI-stable against torch >= 2.11"
    image = "torch numpy onnx onnxruntime pandas matplotlib tqdm psutil packaging pygments attrs typing_extensions"
    assert not [n for n in image.split() if n in specs], "the image has these: carrying another version shadows it"


def _fake_wheels(folder, specs: dict[str, str], big: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, ver) in enumerate(specs.items()):
        (folder / f"{name}-{ver}-py3-none-any.whl").write_bytes(b"x" * (big if i == 0 else 16))


def _fetch(folder, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(KIT / "fetch.sh")],
        env={**os.environ, "TC_KIT_WHL": str(folder), "TC_KIT_NO_DOWNLOAD": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_fetch_accepts_the_listed_wheels_prints_the_total_and_removes_strays(tmp_path):
    whl = tmp_path / "whl"
    _fake_wheels(whl, wheel_specs())
    (whl / "nbclient-0.0.1-py3-none-any.whl").write_bytes(b"old")  # a second version would stop the install
    proc = _fetch(whl)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removing nbclient-0.0.1" in proc.stdout and "MiB in total" in proc.stdout.splitlines()[-1]
    assert not (whl / "nbclient-0.0.1-py3-none-any.whl").exists()


def test_fetch_refuses_wheels_over_the_limit_in_one_line(tmp_path):
    whl = tmp_path / "whl"
    _fake_wheels(whl, wheel_specs(), big=2 << 20)
    proc = _fetch(whl, TC_KIT_LIMIT_MIB="1")
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 1 and lines[-1].startswith("fetch: refused:") and "over the 1 MiB" in lines[-1]


def test_fetch_refuses_when_a_listed_wheel_is_missing(tmp_path):
    whl = tmp_path / "whl"
    specs = wheel_specs()
    _fake_wheels(whl, {k: v for k, v in specs.items() if k != "torchao"})
    proc = _fetch(whl)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 1 and "missing" in last and f"torchao=={specs['torchao']}" in last


def test_the_kit_scripts_are_valid_bash():
    for name in ("fetch.sh", "run.sh", "rehearse.sh"):
        proc = subprocess.run(["bash", "-n", str(KIT / name)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"


def device_calls() -> list[dict]:
    """The device `run` calls that docs/GPU_KIT.md gives, as JSON (its one ```json block, a list)."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "docs/GPU_KIT.md gives the device calls as one ```json block"
    return json.loads(blocks[0])


def test_the_device_calls_fit_the_tool_and_record_every_lesson_once():
    calls = device_calls()
    only: list[str] = []
    for call in calls:
        assert len(call["command"]) <= 2000 and ".ci/gpu-kit/run.sh" in call["command"]
        assert call["carry"] == [".whl"] and 1 <= call["timeout_s"] <= 600
        limit = int(re.search(r"TC_LIMIT=(\d+)", call["command"]).group(1))
        assert limit + 15 <= call["timeout_s"], "run.sh must stop itself before the call's limit"
        only += call["command"].split("--only", 1)[1].split()
    assert sum(c["timeout_s"] for c in calls) + 30 * len(calls) <= 15 * 60, "a session has 15 minutes of device time"
    assert sorted(only) == sorted(les.notebook.split("/")[-1][:2] for les in course.lessons())
    assert "/.whl/" in (ROOT / ".gitignore").read_text().splitlines() or ".whl/" in (ROOT / ".gitignore").read_text()


# -- the rehearsal record: never a GPU record ----------------------------------------------------------------------
def _rehearsal_record() -> dict:
    lessons = {"00_start_here.ipynb": {"seconds": 3.0, "error": "", "claims": 0}}
    comps = {
        "roofline.ceilings": {
            "lesson": "04",
            "what": "w",
            "ok": True,
            "detail": "d",
            "seconds": 0.5,
            "figures": {"roofline.hbm_GBps": {"value": 5.0, "unit": "GB/s", "what": "CPU"}},
        }
    }
    return assemble(
        lessons,
        {},
        comps,
        device=rehearsal.cpu_device(),
        seconds=10.0,
        torch_version=torch.__version__,
        rehearsal=True,
        skipped={"streams.copy_compute_overlap": "no CPU half"},
    )


def test_a_rehearsal_record_is_valid_but_marked_and_says_cpu():
    data = _rehearsal_record()
    assert validate(data) == [] and data["rehearsal"] is True and data["schema"] == REHEARSAL_SCHEMA
    assert data["device"]["name"].startswith("CPU rehearsal, not a GPU") and data["skipped"]
    assert validate({**data, "rehearsal": False}) and validate({**data, "schema": SCHEMA})
    assert validate({**data, "skipped": {"x": ""}})


def test_no_lesson_can_read_a_rehearsal_as_a_gpu_record(tmp_path, monkeypatch):
    path = tmp_path / "gpu_record.json"
    path.write_text(json.dumps(_rehearsal_record()))
    with pytest.raises(RecordError, match="rehearsal"):
        load_record(path)
    monkeypatch.setenv(RECORD_ENV, str(path))
    with pytest.raises(RecordError, match="rehearsal"):
        recorded("roofline.hbm_GBps")
    with pytest.raises(RecordError, match="rehearsal"):
        beside("roofline.hbm_GBps", 1.0, "GB/s", here_label="cpu")
    assert rehearsal.load_rehearsal(path)["rehearsal"] is True


def test_a_rehearsal_never_writes_the_packages_record(capsys):
    args = record.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--rehearsal", "--out", str(record.package_record_file())]
    )
    assert record.run(args) == 1 and "refused" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for CPU machines")
def test_record_without_rehearsal_still_refuses_on_a_cpu_and_writes_no_progress(tmp_path):
    prog = tmp_path / "progress.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "record", "--progress", str(prog), "--out", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout.startswith("record: no CUDA device here")
    assert not (tmp_path / "r.json").exists() and not prog.exists()


def test_the_progress_file_is_json_lines_flushed_as_written(tmp_path):
    prog = rehearsal.Progress(tmp_path / "out" / "progress.jsonl")
    prog.write("start", mode="rehearsal", budget_s=480.0, torch="x", only=[])
    prog.write("lesson", lesson="00_start_here.ipynb", status="ok", seconds=1.0, claims=0, error="")
    rows = [json.loads(line) for line in (tmp_path / "out" / "progress.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rows] == ["start", "lesson"] and all(isinstance(r["elapsed"], float) for r in rows)
    assert {r["event"] for r in rows} <= set(rehearsal.PROGRESS_EVENTS)
    rehearsal.Progress(None).write("start")  # no file: nothing happens


def test_every_registered_comparison_has_a_cpu_half_or_a_reason():
    from torchcontracts.publish import gpu_checks

    gpu_checks.load_modules()
    assert set(gpu_checks.REGISTRY) <= set(rehearsal.CPU_HALVES)


@pytest.mark.slow
def test_a_rehearsal_of_lesson_00_writes_a_marked_record_and_its_progress(tmp_path, monkeypatch, capsys):
    out, prog = tmp_path / "gpu_rehearsal.json", tmp_path / "progress.jsonl"
    args = record.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--rehearsal", "--only", "00", "--quiet", "--out", str(out), "--progress", str(prog)]
    )
    monkeypatch.chdir(ROOT)
    assert record.run(args) == 0
    data = rehearsal.load_rehearsal(out)
    assert data["lessons"]["00_start_here.ipynb"]["error"] == "" and not data["complete"]  # --only: partial
    assert set(data["comparisons"]) | set(data["skipped"]) == set(rehearsal.CPU_HALVES)
    events = [json.loads(line) for line in prog.read_text().splitlines()]
    assert [e["event"] for e in events][:3] == ["start", "begin", "lesson"] and events[-1]["event"] == "end"
    assert events[-1]["exit"] == 0 and "480 s budget" in capsys.readouterr().out
