"""Lab 06 (deployment): common wrong answers fail for the right reason, in one line, never a crash.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers) is in
``test_lab_contract.py``; the attacks on the artefact sandbox are in ``test_grade_artefacts.py``.
Each check loads the learner's file in the artefact sandbox, so the wrong answers here are judged the
way the grader judges them.
"""

from __future__ import annotations

import io
import logging
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

from conftest import checks_by_task
from torchcontracts.checks import Check
from torchcontracts.lessons.l08_deploy import lab06_deployment as L

logging.getLogger("torchao").setLevel(logging.ERROR)
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_  # noqa: E402


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(L.lab.lab_id)


def _failures(checks: list[Check], fn: Callable[..., Any], hidden: bool | None = False) -> list[str]:
    chosen = [c for c in checks if hidden is None or c.hidden == hidden]
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in chosen) if not o.ok]


# --- t1 make_exportable ---------------------------------------------------------------------------


class _Cond(nn.Module):
    def __init__(self, model, offset_as: str = "buffer", branch: str = "cond"):
        super().__init__()
        self.fc1, self.fc2, self.branch = model.fc1, model.fc2, branch
        if offset_as == "buffer":
            self.register_buffer("offset", model.offset.clone())
        elif offset_as == "non-persistent":
            self.register_buffer("offset", model.offset.clone(), persistent=False)
        elif offset_as == "parameter":
            self.offset = nn.Parameter(model.offset.clone())
        else:
            self.offset = model.offset.clone()

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.branch == "cond":
            h = torch.cond(h.mean() > 0.5, lambda h: h * 0.5, lambda h: h.clone(), (h,))
        elif self.branch == "where":
            h = torch.where(h.mean() > 0.5, h * 0.5, h)
        elif self.branch == "always":
            h = h * 0.5
        return self.fc2(h) + self.offset


def test_t1_a_torch_where_rewrite_passes(checks):
    assert not _failures(checks["t1"], lambda m: _Cond(m, branch="where"), hidden=None)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda m: m, "torch.export.export(model, (x,)) failed"),  # the Python if is still there
        (lambda m: _Cond(m, offset_as="plain"), "plain tensor attribute"),
        (lambda m: _Cond(m, offset_as="parameter"), "nn.Parameter"),
        (lambda m: _Cond(m, offset_as="non-persistent"), "persistent=False"),
        (lambda m: _Cond(m, branch="always"), "values differ"),  # the branch fixed at export
        (lambda m: _Cond(L.make_fragile(seed=99)), "values differ"),  # another model's weights
        (lambda m: None, "return an nn.Module"),
    ],
)
def test_t1_wrong_answers_fail_for_the_right_reason(checks, wrong, reason):
    fails = _failures(checks["t1"], wrong)
    assert fails and reason in fails[0], fails
    assert "\n" not in fails[0] and len(fails[0]) < 400


def test_t1_a_fixed_branch_is_named_as_such(checks):
    out = checks["t1"][0].run_local(lambda m: _Cond(m, branch="always"), seed=3)
    assert any("one side of the branch only" in r.status for r in out.rows), [r.status for r in out.rows]


# --- t2 export_dynamic ----------------------------------------------------------------------------


def _dynamic(model, example):
    return torch.export.export(model.eval(), (example,), dynamic_shapes={"x": {0: Dim("batch")}})


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda m, x: torch.export.export(m.eval(), (x,)), "the batch size is fixed"),  # no dynamic_shapes
        (
            lambda m, x: torch.export.export(m.eval(), (x,), dynamic_shapes={"x": {0: Dim("b", max=16)}}),
            "no max below 17",
        ),
        (
            lambda m, x: torch.export.export(m, (x,), dynamic_shapes={"x": {0: Dim("b")}}),
            "exported in training mode",
        ),  # training mode
        (lambda m, x: _dynamic(L.make_classifier(seed=7), x), "values differ"),  # another model's weights
        (lambda m, x: m.eval(), "return the torch.export.ExportedProgram itself"),
    ],
)
def test_t2_wrong_answers_fail_for_the_right_reason(checks, wrong, reason):
    fails = _failures(checks["t2"], wrong)
    assert fails and reason in fails[0], fails


def test_t2_training_mode_is_named(checks):
    out = checks["t2"][0].run_local(lambda m, x: torch.export.export(m, (x,), dynamic_shapes={"x": {0: Dim("b")}}))
    assert any("training mode" in r.status for r in out.rows), [r.status for r in out.rows]


def test_t2_reference_passes_hidden_checks_too(checks):
    assert not _failures(checks["t2"], _dynamic, hidden=None)


# --- t3 export_onnx -------------------------------------------------------------------------------


def _onnx(model, example, **kw):
    return torch.onnx.export(model.eval(), (example,), dynamo=True, verbose=False, **kw)


def _legacy_bytes(model, example):
    buf = io.BytesIO()
    torch.onnx.export(
        model.eval(),
        (example,),
        buf,
        dynamo=False,
        opset_version=11,
        input_names=["x"],
        dynamic_axes={"x": {0: "batch"}},
    )
    return buf.getvalue()


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda m, x: _onnx(m, x), "running it failed"),  # static batch
        (lambda m, x: _onnx(m, x, opset_version=17, dynamic_shapes={"x": {0: Dim("b")}}), "below 18"),
        (lambda m, x: _onnx(L.make_upsampler(seed=5), x, dynamic_shapes={"x": {0: Dim("b")}}), "values differ"),
        (lambda m, x: m, "return the torch.onnx.ONNXProgram"),
    ],
)
def test_t3_wrong_answers_fail_for_the_right_reason(checks, wrong, reason):
    fails = _failures(checks["t3"], wrong)
    assert fails and reason in fails[0], fails


def test_t3_the_torchscript_exporter_at_opset_11_fails_the_opset_row(checks):
    fails = _failures(checks["t3"], _legacy_bytes)
    assert fails and "below 18" in fails[0], fails


# --- t4 quantize_int8 -----------------------------------------------------------------------------


def _w8(model):
    quantize_(model, Int8WeightOnlyConfig())
    return model


def _first_layer_only(model):
    quantize_(model, Int8WeightOnlyConfig(), filter_fn=lambda mod, fqn: fqn == "0")
    return model


def test_t4_dynamic_int8_passes_too(checks):
    def dyn(model):
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        return model

    assert not _failures(checks["t4"], dyn, hidden=None)
    assert not _failures(checks["t4"], _w8, hidden=None)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda m: m, "only 1.00x smaller"),  # not quantized at all
        (lambda m: m.half(), "smaller than the fp32 file"),  # half precision: under 2x, not int8
        (_first_layer_only, "quantize every Linear"),
        (lambda m: torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8), "do not fit"),
        (lambda m: "model", "return the quantized nn.Module"),
    ],
)
def test_t4_wrong_answers_fail_for_the_right_reason(checks, wrong, reason):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fails = _failures(checks["t4"], wrong)
    assert fails and reason in fails[0], fails


def test_t4_half_precision_is_also_named_not_quantized(checks):
    out = checks["t4"][0].run_local(lambda m: m.half())
    assert any("not quantized" in r.status for r in out.rows), [r.status for r in out.rows]
