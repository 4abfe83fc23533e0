"""The artefact sandbox (grading.artefacts): hostile files are judged without being trusted.

* an artefact that claims parity but was exported from another model (other weights) fails;
* an ONNX file whose external data points at a grader file is refused, and so is a `.pt2` whose pickle
  payload would run at load time (the runner unpickles weights-only); code that ran in the artefact sandbox
  anyway could neither read the grader's files, nor reach the network, nor write outside its folder, nor
  run as root; a file that never finishes is killed at its timeout;
* whatever happens, the caller gets a one-line reason, never an exception;
* no artefact job outlasts the submission's --timeout.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from onnx import TensorProto, helper
from torch.export import Dim

from torchcontracts.grading import artefacts
from torchcontracts.grading.artefacts import evaluate
from torchcontracts.lessons.l08_deploy import lab06_deployment as L
from torchcontracts.lessons.l08_deploy.lab06_models import judging_inputs

pytestmark = pytest.mark.slow  # grades exported artefacts in a sandbox

needs_bwrap = pytest.mark.skipif(artefacts.isolation() != "bwrap", reason="bubblewrap is not usable here")


def _pt2(model: nn.Module, example: torch.Tensor, dynamic: bool = True) -> bytes:
    shapes = {"x": {0: Dim("batch")}} if dynamic else None
    return L.pt2_bytes(torch.export.export(model.eval(), (example,), dynamic_shapes=shapes))


class _Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


# --- an artefact from another model -----------------------------------------------------------------


def test_a_pt2_exported_from_other_weights_fails_the_dynamic_batch_task():
    case = L.classifier_case("attack", 3, (1, 17))
    state, example, _ = case.args
    impostor = L.make_classifier(seed=1234).eval()  # same architecture, other weights
    program = torch.export.export(impostor, (example,), dynamic_shapes={"x": {0: Dim("batch")}})
    forged = {"pt2": L.pt2_bytes(program), "example_out": L.make_classifier(state).eval()(example).detach()}
    rows = L.judge_dynamic(case, forged)  # the kernel-side output is even forged right
    sandbox_rows = [r for r in rows if r.name.startswith("batch")]
    assert sandbox_rows and not any(r.ok for r in sandbox_rows), [r.line() for r in rows]
    assert all("values differ" in r.status for r in sandbox_rows)


def test_an_onnx_file_from_other_weights_fails_the_parity_task():
    case = L.upsampler_case("attack", 4, (2, 17))
    _, example, _ = case.args
    impostor = L.make_upsampler(seed=77)
    program = torch.onnx.export(
        impostor, (example,), dynamo=True, verbose=False, dynamic_shapes={"x": {0: Dim("batch")}}
    )
    proto = program.model_proto
    proto.doc_string = "parity with the reference: max |diff| 0.0"  # a claim inside the file changes nothing
    rows = L.judge_onnx(case, {"onnx": proto.SerializeToString()})
    parity = [r for r in rows if r.name.startswith("batch")]
    assert parity and not any(r.ok for r in parity), [r.line() for r in rows]


# --- the judging inputs: drawn by the judge from the file, never shipped to the kernel ---------------------


class _LookupNet(nn.Module):
    """A t1 forgery: the branch fixed at export (never halves), plus a lookup that returns the right output
    for one batch the learner expects to be judged on."""

    def __init__(self, state: dict, expected: torch.Tensor, answer: torch.Tensor):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.register_buffer("offset", state["offset"].clone())
        self.load_state_dict({k: v for k, v in state.items()})
        self.register_buffer("expected", expected.clone())
        self.register_buffer("answer", answer.clone())

    def forward(self, x):
        calm = self.fc2(torch.relu(self.fc1(x))) + self.offset
        return torch.where((x == self.expected).all(), self.answer, calm)


def test_an_artefact_that_special_cases_the_inputs_it_expects_fails_on_the_judges_own(tmp_path):
    """Issue 24: the exact batches were shipped with the job, so a file could special-case them. The case now
    holds a batch size, not batches; the judge draws its inputs from the file's bytes, after the file exists."""
    seed, batch = 5, 8
    case = L.fragile_case("t1 attack", seed, batch)
    state, example, size = case.args
    assert size == batch and all(not isinstance(a, list) for a in case.args)  # no batch of inputs in the case
    model = L.make_fragile(state).eval()
    g = torch.Generator().manual_seed(seed + 11)  # what the kernel could rebuild: the old cases' own draws
    torch.randn(batch, 16, generator=g)
    calm, hot = L.branch_inputs(model, g, batch)
    with torch.no_grad():
        forged = _LookupNet(state, hot, model(hot)).eval()
        program = torch.export.export(forged, (example,))
    blob = L.pt2_bytes(program)
    on_expected = evaluate("pt2", blob, [hot, calm])
    assert not on_expected.problem
    assert torch.allclose(on_expected.outputs[0][0], model(hot), atol=1e-5)  # the forgery is right where it aimed
    assert torch.allclose(on_expected.outputs[1][0], model(calm), atol=1e-5)
    rows = L.judge_exportable(case, {"pt2": blob, "example_out": model(example).detach()})
    hot_rows = [r for r in rows if r.name.startswith("h.mean() > 0.5")]
    assert hot_rows and not any(r.ok for r in hot_rows), [r.line() for r in rows]
    judged = judging_inputs("t1", case, blob)
    assert not any(torch.equal(x, y) for x in judged for y in (calm, hot, example))
    other = judging_inputs("t1", case, blob + b"\0")
    assert all(torch.equal(a, b) for a, b in zip(judged, judging_inputs("t1", case, blob)))  # same file, same inputs
    assert not any(torch.equal(a, b) for a, b in zip(judged, other))  # another file, other inputs


# --- ONNX external data -----------------------------------------------------------------------------


def _external_model(location: str) -> bytes:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 2], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "24")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_onnx_external_data_pointing_at_a_grader_file_is_refused(tmp_path, where):
    secret = tmp_path / "grader_secret.bin"
    secret.write_bytes(np.arange(6, dtype=np.float32).tobytes())  # would make a valid weight if read
    location = str(secret) if where == "absolute" else os.path.relpath(secret, "/tmp/x/y")
    ev = evaluate("onnx", _external_model(location), [torch.randn(2, 3)])
    assert "refers to external data" in ev.problem and "\n" not in ev.problem, ev.problem
    assert not ev.outputs


# --- a .pt2 that runs code when it is loaded ----------------------------------------------------------


def _hostile_pt2(code: str) -> bytes:
    """A valid .pt2 whose first weight is marked use_pickle and holds a payload that runs `code` on load."""
    blob = _pt2(_Lin(), torch.randn(2, 3))

    class Payload:
        def __reduce__(self):
            return (exec, (code,))

    evil = io.BytesIO()
    torch.save(Payload(), evil)
    src, out = zipfile.ZipFile(io.BytesIO(blob)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                first = next(iter(config["config"]))
                config["config"][first]["use_pickle"] = True
                data = json.dumps(config).encode()
            elif info.filename.endswith("weights/weight_0"):
                data = evil.getvalue()
            dst.writestr(info, data)
    return out.getvalue()


def _slow_onnx(trips: int = 10**12) -> bytes:
    """A valid ONNX model that never ends in practice: a Loop of ``trips`` additions (what a hostile file does
    once no payload of its own can run)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "acc_in"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None),
        ],
    )
    nodes = [
        helper.make_node("Constant", [], ["M"], value=helper.make_tensor("m", TensorProto.INT64, [], [trips])),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _huge_onnx() -> bytes:
    """A valid ONNX model whose one Expand asks for 160 GB."""
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [200_000, 200_000])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=shape), helper.make_node("Expand", ["x", "s"], ["y"])],
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [200_000, 200_000])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_a_pickle_payload_in_a_pt2_runs_at_load_time_outside_a_sandbox_too(tmp_path):
    """The reason for the sandbox: torch.export.load itself runs the payload (here, in this process)."""
    marker = tmp_path / "ran"
    blob = _hostile_pt2(f"open({str(marker)!r}, 'w').write('x')")
    with pytest.raises(Exception):
        torch.export.load(io.BytesIO(blob))
    assert marker.exists()


def test_the_runner_refuses_a_pickle_payload_in_a_pt2_and_never_runs_it(tmp_path):
    """A payload that ran in the runner could compute the outputs itself (or patch the runner): the .pt2 would be
    judged on code, not on its exported program. The runner loads with weights-only unpickling only."""
    code = (
        "open('result.json', 'w').write(__import__('json').dumps({'error': 'PAYLOAD RAN'})); __import__('os')._exit(0)"
    )
    ev = evaluate("pt2", _hostile_pt2(code), [torch.randn(2, 3)])
    assert "PAYLOAD RAN" not in ev.problem, ev.problem
    assert "holds pickled Python objects (a weight or constant marked use_pickle)" in ev.problem, ev.problem
    assert "\n" not in ev.problem and not ev.outputs


def test_inside_the_runners_guard_no_unpickling_path_runs_code(tmp_path):
    """Each way torch.export.load unpickles: torch.load(weights_only=False), pickle.loads, _pickle_load_obj."""
    import pickle

    from torchcontracts.grading.artefact_runner import PickledObject, _weights_only

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    buf = io.BytesIO()
    torch.save(Payload(), buf)
    plain = io.BytesIO()
    torch.save({"w": torch.ones(2)}, plain)
    refused: list[str] = []
    with _weights_only(refused):
        with pytest.raises(pickle.UnpicklingError):
            torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
        assert torch.equal(torch.load(io.BytesIO(plain.getvalue()), weights_only=False)["w"], torch.ones(2))
        with pytest.raises(PickledObject):
            pickle.loads(pickle.dumps(Payload()))
        if hasattr(torch._C, "_pickle_load_obj"):
            with pytest.raises(PickledObject):
                torch._C._pickle_load_obj(b"")
    assert not marker.exists()
    assert refused[:3] == ["a weight or constant marked use_pickle"] * 2 + ["an opaque Python object"], refused
    assert torch.load is not None and pickle.loads(pickle.dumps(3)) == 3  # restored after the block


def _in_the_artefact_sandbox(tmp_path: Path, code: str) -> dict:
    """What ``code`` finds in the sandbox an artefact job gets (``bwrap_argv`` as ``artefacts._one_shot`` builds it,
    the job's environment, limits and, as root, a uid of its own), standing in for a payload that found a way to
    run: the second line of defence. ``code`` fills a dict ``found``."""
    import subprocess
    import sys

    from torchcontracts.grading.sandbox import bwrap_argv

    work = tmp_path / "job"
    work.mkdir()
    uid = artefacts.ARTEFACT_UID if os.geteuid() == 0 else -1
    if uid >= 0:
        os.chown(work, uid, uid)
    drop = f"from torchcontracts.grading.procs import limit; limit(mem=2**32, fsize=2**28, nproc=256, uid={uid})\n"
    script = drop.replace(f"uid={uid}", "uid=None") if uid < 0 else drop
    script += "found = {}\n" + code + "\nprint('FOUND', repr(found))\n"
    argv = [*bwrap_argv(work, artefacts._COURSE, drop_uid=uid >= 0), sys.executable, "-I", "-c", script]
    proc = subprocess.run(argv, cwd=work, env=artefacts._env(work), capture_output=True, text=True, timeout=120)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("FOUND ")), None)
    assert line, proc.stderr[-2000:]
    return eval(line[len("FOUND ") :])  # noqa: S307 - our own test's dict


@needs_bwrap
def test_code_in_the_artefact_sandbox_cannot_read_grader_files_reach_the_network_or_write_outside(tmp_path):
    secret = tmp_path / "gradebook.csv"
    secret.write_text("alice,14\n")
    marker = tmp_path / "planted"
    code = f"""
import os, socket
try:
    found['secret'] = open({str(secret)!r}).read()
except Exception as err:
    found['secret'] = type(err).__name__
try:
    socket.create_connection(('127.0.0.1', 22), timeout=2)
    found['net'] = 'connected'
except Exception as err:
    found['net'] = type(err).__name__
try:
    open({str(marker)!r}, 'w').write('x')
    found['write'] = 'wrote'
except Exception as err:
    found['write'] = type(err).__name__
found['uid'] = os.getuid()
found['solutions'] = os.path.exists({str(Path(L.__file__).resolve().parents[4] / "solutions")!r}) and \
    bool(os.listdir({str(Path(L.__file__).resolve().parents[4] / "solutions")!r}))
"""
    found = _in_the_artefact_sandbox(tmp_path, code)
    assert found["secret"] in ("FileNotFoundError", "PermissionError"), found
    assert found["net"] != "connected" and found["write"] != "wrote" and not found["solutions"], found
    assert not marker.exists()
    if os.geteuid() == 0:
        assert found["uid"] != 0, found


@needs_bwrap
def test_a_job_whose_uid_has_no_passwd_entry_can_still_ask_for_its_user_name(tmp_path):
    """torch 2.11's torch.export.load asks getpass.getuser() for a cache folder; the job's uid has no passwd entry.

    Without USER/LOGNAME in the sandbox's environment getpass falls back to pwd and raises
    KeyError('getpwuid(): uid not found'), which failed every correct lab 06 artefact on 2.11.
    """
    code = """
import getpass, os
found['uid'] = os.getuid()
for name, call in (('getuser', getpass.getuser),
                   ('cache', lambda: __import__('torch._inductor.runtime.cache_dir_utils',
                                                fromlist=['x']).default_cache_dir())):
    try:
        found[name] = call()
    except Exception as err:
        found[name] = 'RAISED ' + type(err).__name__ + ': ' + str(err)
"""
    found = _in_the_artefact_sandbox(tmp_path, code)
    assert not str(found["getuser"]).startswith("RAISED") and not str(found["cache"]).startswith("RAISED"), found
    if os.geteuid() == 0:  # the case that broke: a uid of its own, with no passwd line
        import pwd

        assert found["uid"] != 0, found
        with pytest.raises(KeyError):
            pwd.getpwuid(found["uid"])


def test_a_file_that_never_finishes_is_killed_at_the_timeout():
    ev = evaluate("onnx", _slow_onnx(), [torch.randn(2, 3)], timeout=8)
    assert "did not finish within 8 s" in ev.problem, ev.problem


def test_a_file_that_exhausts_its_memory_gives_a_one_line_reason():
    ev = evaluate("onnx", _huge_onnx(), [torch.randn(1, 1)], mem_mb=1024)
    reasons = [ev.problem] if ev.problem else list(ev.errors)
    assert reasons and all(r and "\n" not in r for r in reasons) and not any(ev.outputs), ev
    assert any("Expand" in r or "memory" in r for r in reasons), reasons  # it ran, and its allocation failed


def test_the_server_survives_a_job_killed_at_its_timeout_and_judges_the_next_file():
    evaluate("onnx", _slow_onnx(), [torch.randn(3, 3)], timeout=4)
    model = _Lin()
    x = torch.randn(4, 3)
    ev = evaluate("pt2", _pt2(model, torch.randn(2, 3)), [x])
    assert not ev.problem and torch.allclose(ev.outputs[0][0], model(x), atol=1e-6), ev


# --- junk never crashes -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pt2", "onnx", "state_dict"])
@pytest.mark.parametrize("blob", [b"", b"not a file at all", b"PK\x03\x04garbage"])
def test_junk_bytes_give_a_reason_not_an_exception(kind, blob):
    ev = evaluate(kind, blob, [torch.randn(2, 64)], arch={"mlp": [64, 10]})
    assert ev.problem and "\n" not in ev.problem and len(ev.problem) < 300, ev.problem


def test_a_state_dict_with_a_pickled_object_is_refused_by_weights_only():
    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    buf = io.BytesIO()
    torch.save({"0.weight": Payload()}, buf)
    ev = evaluate("state_dict", buf.getvalue(), [torch.randn(2, 64)], arch={"mlp": [64, 10]})
    assert "weights_only=True" in ev.problem, ev.problem


# --- end to end: the grader scores the file, not what the learner's kernel says about it ------------

IMPOSTOR_T3 = '''
def export_onnx(model, example):
    """Exports *another* upsampler (its own weights) and writes a parity claim into the file."""
    from torchcontracts.lessons.l08_deploy.lab06_deployment import make_upsampler
    program = torch.onnx.export(make_upsampler(seed=4242), (example,), dynamo=True, verbose=False,
                                dynamic_shapes={"x": {0: Dim("batch")}})
    program.model_proto.doc_string = "parity: max |diff| 0.0 at every batch size"
    return program
'''


def test_the_grader_scores_zero_for_an_onnx_file_from_another_model(tmp_path):
    import nbformat

    from torchcontracts.grading.run import GradeOptions, grade_file
    from torchcontracts.labs.build import reference_submission
    from torchcontracts.labs.format import cell_meta

    root = Path(L.__file__).resolve().parents[4]
    nb = reference_submission(root, "lab06_deployment")
    for cell in nb.cells:
        if cell_meta(cell).get("task") == "t3" and cell_meta(cell).get("role") == "solution":
            cell.source = IMPOSTOR_T3
    path = tmp_path / "impostor.ipynb"
    nbformat.write(nb, path)
    mode = "bwrap" if artefacts.isolation() == "bwrap" else "none"
    result = grade_file(path, GradeOptions(course=root, lab="lab06_deployment", cell_timeout=60, sandbox=mode))
    scores = {t.id: t.score for t in result.tasks}
    assert scores["t3"] == 0 and scores["t1"] == 4 and scores["t4"] == 3, [
        (t.id, t.score, t.reason) for t in result.tasks
    ]
    t3 = next(t for t in result.tasks if t.id == "t3")
    assert "values differ" in t3.reason, t3.reason


# --- the submission's --timeout bounds artefact judging too -------------------------------------------


def test_a_slow_artefact_is_cut_at_the_submissions_deadline_not_at_its_own_timeout():
    t0 = time.monotonic()
    with artefacts.judging_deadline(t0 + 6):
        ev = evaluate("onnx", _slow_onnx(), [torch.randn(2, 3)], timeout=90)
    took = time.monotonic() - t0
    assert "did not finish within" in ev.problem and took < 30, (ev.problem, took)


def test_no_artefact_runs_once_the_submissions_deadline_has_passed(monkeypatch):
    blob = _pt2(_Lin(), torch.randn(2, 3))  # built before the clock: torch.export takes seconds on a loaded machine
    runs = []
    real_run = artefacts._run
    monkeypatch.setattr(artefacts, "_run", lambda *a, **k: runs.append(a) or real_run(*a, **k))
    with artefacts.judging_deadline(time.monotonic() - 1):
        ev = evaluate("pt2", blob, [torch.randn(4, 3)])
    assert "time limit" in ev.problem and not ev.outputs and not runs, (ev.problem, len(runs))
    ev = evaluate("pt2", blob, [torch.randn(4, 3)])  # no deadline: judged (not cached)
    assert not ev.problem and len(runs) == 1, (ev.problem, len(runs))


def test_the_grader_judges_every_answer_under_the_submissions_deadline(tmp_path, monkeypatch):
    import nbformat

    from torchcontracts.grading import run
    from torchcontracts.labs.build import reference_submission

    seen: list[float | None] = []
    real = run.judge

    def spy(*args, **kw):
        seen.append(artefacts._DEADLINE.get())
        return real(*args, **kw)

    monkeypatch.setattr(run, "judge", spy)
    root = Path(L.__file__).resolve().parents[4]
    path = tmp_path / "ref.ipynb"
    nbformat.write(reference_submission(root, "lab01_strides"), path)
    t0 = time.monotonic()
    run.grade_file(path, run.GradeOptions(course=root, lab="lab01_strides", total_timeout=123, sandbox="none"))
    assert seen and all(d is not None and t0 < d <= t0 + 123 + 1 for d in seen), (seen, t0)
