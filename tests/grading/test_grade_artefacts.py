"""The artefact sandbox (grading.artefacts): hostile files are judged without being trusted.

* an artefact that claims parity but was exported from another model (other weights) fails;
* an ONNX file whose external data points at a grader file is refused, and a `.pt2` whose pickle
  payload runs at load time can neither read the grader's files, nor reach the network, nor write
  outside its folder, nor run as root, nor outlive its timeout;
* whatever happens, the caller gets a one-line reason, never an exception.
"""

from __future__ import annotations

import io
import json
import os
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


def test_a_pickle_payload_in_a_pt2_runs_at_load_time_outside_a_sandbox_too(tmp_path):
    """The reason for the sandbox: torch.export.load itself runs the payload (here, in this process)."""
    marker = tmp_path / "ran"
    blob = _hostile_pt2(f"open({str(marker)!r}, 'w').write('x')")
    with pytest.raises(Exception):
        torch.export.load(io.BytesIO(blob))
    assert marker.exists()


@needs_bwrap
def test_a_pickle_payload_cannot_read_grader_files_reach_the_network_or_write_outside(tmp_path):
    secret = tmp_path / "gradebook.csv"
    secret.write_text("alice,14\n")
    marker = tmp_path / "planted"
    code = f"""
import os, socket
found = {{}}
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
open('result.json', 'w').write(__import__('json').dumps({{'error': 'FOUND ' + repr(found)}}))  # its own folder
os._exit(0)
"""
    ev = evaluate("pt2", _hostile_pt2(code), [torch.randn(2, 3)])
    assert "FOUND" in ev.problem, ev.problem
    found = eval(ev.problem[ev.problem.index("{") : ev.problem.rindex("}") + 1])  # noqa: S307 - our own test's dict
    assert found["secret"] in ("FileNotFoundError", "PermissionError"), found
    assert found["net"] != "connected" and found["write"] != "wrote" and not found["solutions"], found
    assert not marker.exists()
    if os.geteuid() == 0:
        assert found["uid"] != 0, found


def test_a_payload_that_never_returns_is_killed_at_the_timeout():
    ev = evaluate("pt2", _hostile_pt2("while True: pass"), [torch.randn(2, 3)], timeout=8)
    assert "did not finish within 8 s" in ev.problem, ev.problem


def test_a_payload_that_kills_its_process_gives_a_one_line_reason():
    ev = evaluate("pt2", _hostile_pt2("import os; os._exit(3)"), [torch.randn(2, 3)])
    assert ev.problem and "\n" not in ev.problem and not ev.outputs, ev.problem


def test_the_server_survives_a_hostile_job_and_judges_the_next_file():
    evaluate("pt2", _hostile_pt2("import os; os._exit(3)"), [torch.randn(3, 3)])
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
