"""Lesson 08's proof predicates can fail: each returns False on the behaviour the seed describes
(measured from a tool that behaves the seed's way, or a stub) and True on what torch really does.

The predicates are loaded from the notebook itself, so these tests check the very functions the
claim cells call. ONNX models are built by hand with ``onnx.helper`` (no exporter run), so the file
stays fast.
"""

from __future__ import annotations

import functools
import io
import sys
import textwrap
import warnings
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from conftest import ROOT, notebook_functions
from torchcontracts.lessons.l08_deploy import deploy

NB = ROOT / "notebooks" / "08_deployment.ipynb"
FNS = notebook_functions(
    NB,
    "proof_c065",
    "proof_c066",
    "proof_c067",
    "proof_c111",
    "proof_c029",
    "proof_c110",
    "proof_c072",
    "proof_c028",
    "proof_c069",
    "proof_c070",
    "proof_c071",
    "proof_c108",
    "proof_c109",
    "proof_c144",
    "proof_c032",
    "bn_under_qat",
    "proof_c112",
    "proof_c132",
    "proof_c030",
    "jit_warnings",
    "try_script",
    "checker_passes",
    "where_things_are",
)


# C065: torch.save(model) stores references, not the class ---------------------------------------


def _moved_class_facts(tmp_path, monkeypatch) -> dict:
    (tmp_path / "c065_models.py").write_text(
        textwrap.dedent("""
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
            def forward(self, x):
                return self.fc(x) * 3   # only in the module file
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import c065_models

    buf = io.BytesIO()
    torch.save(c065_models.Net(), buf)
    blob = buf.getvalue()
    sd = io.BytesIO()
    torch.save(c065_models.Net().state_dict(), sd)
    (tmp_path / "c065_models.py").rename(tmp_path / "c065_models_v2.py")
    monkeypatch.delitem(sys.modules, "c065_models")
    try:
        torch.load(io.BytesIO(blob), weights_only=False)
        full = "loaded"
    except Exception as err:  # noqa: BLE001
        full = f"{type(err).__name__}: {err}"
    import c065_models_v2

    c065_models_v2.Net().load_state_dict(torch.load(io.BytesIO(sd.getvalue())))
    return {
        "pickle names the class": ("c065_models", "Net") in deploy.pickle_globals(blob),
        "source in the file": b"* 3" in blob,
        "full model after the move": full,
        "state_dict after the move": "loaded into c065_models_v2.Net",
    }


def test_c065_holds_on_what_torch_does(tmp_path, monkeypatch):
    facts = _moved_class_facts(tmp_path, monkeypatch)
    assert facts["full model after the move"].startswith("ModuleNotFoundError"), facts
    assert FNS["proof_c065"](facts)


def test_c065_fails_if_the_file_carried_the_class():
    seed = {
        "pickle names the class": True,
        "source in the file": True,
        "full model after the move": "loaded",
        "state_dict after the move": "loaded",
    }
    assert not FNS["proof_c065"](seed)
    assert not FNS["proof_c065"]({**seed, "source in the file": False})  # a load that survives the move


# C066 and C067: the checkpoint recipe and the zip format --------------------------------------------


def test_c066_holds_for_a_real_round_trip_and_fails_when_part_is_lost():
    assert FNS["proof_c066"]({"epoch": True, "loss": True, "parameters": True, "Adam moments": True})
    assert not FNS["proof_c066"]({"epoch": True, "loss": True, "parameters": True, "Adam moments": False})
    assert not FNS["proof_c066"]({"epoch": True, "parameters": True})  # a checkpoint that dropped keys


def test_c067_holds_for_torch_save_and_fails_for_the_legacy_default():
    new, old = io.BytesIO(), io.BytesIO()
    torch.save({"w": torch.ones(2)}, new)
    torch.save({"w": torch.ones(2)}, old, _use_new_zipfile_serialization=False)
    zips = {"default": zipfile.is_zipfile(new), "_use_new_zipfile_serialization=False": zipfile.is_zipfile(old)}
    assert FNS["proof_c067"](True, zips)
    assert not FNS["proof_c067"](False, {"default": False, "_use_new_zipfile_serialization=False": False})
    assert not FNS["proof_c067"](True, {"default": True, "_use_new_zipfile_serialization=False": True})


# C111, C029, C110: ONNX files built by hand and run in onnxruntime -----------------------------------


def _gemm_model(w: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10  # what onnxruntime 1.31 reads (onnx 1.23 writes 14 by default)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_c111_holds_checker_plus_runtime_and_fails_if_the_checker_sufficed_or_missed():
    w = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    good, broken = _gemm_model(w), _gemm_model(w)
    broken.graph.node[0].input[0] = "nothing_makes_this"
    wrong = _gemm_model(w * 1.01)
    facts = {
        "checker passes the real file": FNS["checker_passes"](good),
        "checker passes the broken file": FNS["checker_passes"](broken),
        "checker passes the wrong-weights file": FNS["checker_passes"](wrong),
        "runtime max|diff|, real": float(np.abs(_run(good, x) - x @ w).max()),
        "runtime max|diff|, wrong weights": float(np.abs(_run(wrong, x) - x @ w).max()),
    }
    assert FNS["proof_c111"](facts), facts
    assert not FNS["proof_c111"]({**facts, "checker passes the broken file": True})  # a checker that sees nothing
    assert not FNS["proof_c111"](
        {**facts, "checker passes the wrong-weights file": False}
    )  # the checker alone would do
    assert not FNS["proof_c111"]({**facts, "runtime max|diff|, wrong weights": 0.0})  # a runtime check that misses


def _resize_parity(mode: bytes, opset: int) -> float:
    """Max |onnxruntime Resize - torch bicubic| for a Resize node of this mode, built by hand."""
    x = torch.randn(2, 3, 5, 5)
    want = F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False).numpy()
    node = helper.make_node(
        "Resize",
        ["x", "roi", "scales"],
        ["y"],
        mode=mode.decode(),
        coordinate_transformation_mode="half_pixel",
        cubic_coeff_a=-0.75,
    )
    graph = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 10, 10])],
        [
            numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return float(np.abs(_run(model, x.numpy()) - want).max())


def test_c029_holds_for_cubic_resize_and_fails_for_the_seeds_nearest_rewrite():
    assert FNS["proof_c029"]({"exported": True, "parity": _resize_parity(b"cubic", 18)})
    assert not FNS["proof_c029"]({"exported": False, "parity": _resize_parity(b"nearest", 18)})
    assert not FNS["proof_c029"](
        {"exported": True, "parity": _resize_parity(b"nearest", 18)}
    )  # right op, wrong numbers


def test_c110_holds_at_opset_11_and_fails_without_cubic():
    schema = onnx.defs.get_schema("Resize", 11)
    real = {
        "opset": 11,
        "modes": [b"cubic"],
        "schema says cubic": "cubic" in schema.attributes["mode"].description,
        "parity": _resize_parity(b"cubic", 11),
    }
    assert FNS["proof_c110"](real), real
    assert not FNS["proof_c110"]({**real, "modes": [b"nearest"], "parity": _resize_parity(b"nearest", 11)})
    assert not FNS["proof_c110"]({**real, "schema says cubic": False})


# TorchScript: C072, C028, C069, C070, C071, C108, C109 -----------------------------------------------


def test_c072_accepts_a_deprecation_or_future_warning_and_fails_without_one():
    _, trace_w = FNS["jit_warnings"](lambda: torch.jit.trace(nn.Linear(2, 2), torch.randn(1, 2)))
    found = {"trace": trace_w}
    assert FNS["proof_c072"](found)

    class Fake:  # a warnings.WarningMessage as torch 2.14.1 raises it
        category, message = (
            FutureWarning,
            "`torch.jit.trace` is deprecated. Please switch to `torch.compile` or `torch.export`.",
        )

    assert FNS["proof_c072"]({"trace": [Fake()]})
    assert not FNS["proof_c072"]({"trace": []})  # TorchScript still current: no warning

    class Other(Fake):
        category = UserWarning

    assert not FNS["proof_c072"]({"trace": [Other()]})


class _Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def _branch_facts(compiled) -> dict:
    pos, neg = torch.full((3,), 5.0), -3 * torch.ones(3)
    return {
        "traced == eager on the traced branch": torch.equal(compiled(pos), _Branchy()(pos)),
        "traced == eager on the other branch": torch.equal(compiled(neg), _Branchy()(neg)),
    }


def test_c028_holds_for_trace_and_fails_for_a_tool_that_captures_the_branch():
    traced, _ = FNS["jit_warnings"](lambda: torch.jit.trace(_Branchy(), torch.ones(3)))
    assert FNS["proof_c028"](_branch_facts(traced))
    scripted, _ = FNS["jit_warnings"](lambda: torch.jit.script(_Branchy()))  # compiles the source: both branches
    assert not FNS["proof_c028"](_branch_facts(scripted))


def test_c069_partly_fails_if_trace_handled_every_loop_or_none():
    import pandas as pd

    real = pd.DataFrame({"traced == eager on another input": {"FixedLoop": True, "RowLoop": False, "ValueLoop": False}})
    assert FNS["proof_c069"](real)
    every = pd.DataFrame({"traced == eager on another input": {"FixedLoop": True, "RowLoop": True, "ValueLoop": True}})
    assert not FNS["proof_c069"](every)
    none = pd.DataFrame(
        {"traced == eager on another input": {"FixedLoop": False, "RowLoop": False, "ValueLoop": False}}
    )
    assert not FNS["proof_c069"](none)


C070_TODAY = {"error": "", "both branches kept": True, "the old way still compiles": True, "the old way warns": []}


def test_c070_outdated_holds_when_a_plain_module_scripts_and_the_old_way_exists():
    assert FNS["proof_c070"](C070_TODAY)

    def old_way():
        class OldStyle(torch.jit.ScriptModule):  # the torch 1.0-1.1 way, as the lesson's old_style()
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

            @torch.jit.script_method
            def forward(self, x):
                return self.fc(x)

        return OldStyle()

    old, _ = FNS["jit_warnings"](old_way)
    assert isinstance(old, torch.jit.ScriptModule) and old(torch.randn(2, 3)).shape == (2, 3)


@pytest.mark.parametrize(
    "change",
    [
        {"error": "RuntimeError: needs @torch.jit.script_method", "both branches kept": False},  # the claim true today
        {"both branches kept": False},  # scripted, but lost a branch
        {"the old way still compiles": False},  # the seed would name no API at all
    ],
)
def test_c070_fails_if_todays_torch_still_required_script_method(change):
    assert not FNS["proof_c070"]({**C070_TODAY, **change})


class WithNumpy(nn.Module):
    def forward(self, x):
        return torch.from_numpy(np.tanh(x.numpy()))


class CallsTensorNumpy(nn.Module):
    def forward(self, x):
        return torch.tensor(x.numpy().sum())


@functools.cache
def _numpy_errors() -> dict:
    """Scripted once per process: a second script of the same class fails for another reason ("Can't redefine")."""
    return {
        "np.tanh(x.numpy())": FNS["try_script"](WithNumpy())[1],
        "x.numpy()": FNS["try_script"](CallsTensorNumpy())[1],
    }


def test_c071_holds_on_real_scripting():
    errors = _numpy_errors()
    assert errors["x.numpy()"].startswith("RuntimeError:"), errors
    assert FNS["proof_c071"](errors), errors


@pytest.mark.parametrize(
    "change",
    [
        {"x.numpy()": ""},  # Tensor.numpy() compiled
        {"np.tanh(x.numpy())": ""},  # the NumPy function compiled
        # failed, but for a reason that says nothing about NumPy: no source to compile (as from stdin)
        {"np.tanh(x.numpy())": "OSError: Can't get source for <bound method WithNumpy.forward of WithNumpy()>."},
        {"x.numpy()": "OSError: Can't get source for <bound method CallsTensorNumpy.forward>."},
        {"np.tanh(x.numpy())": "TypeError: unsupported operand type(s) for +: 'int' and 'str'"},  # another TypeError
        {"x.numpy()": "RuntimeError: undefined value np:"},  # another diagnostic
    ],
)
def test_c071_fails_on_a_different_exception_or_none(change):
    assert not FNS["proof_c071"]({**_numpy_errors(), **change})


def test_c071_accepts_a_not_supported_diagnostic_for_the_ufunc():
    """A torch whose frontend reports the ufunc instead of crashing on it still rejects NumPy."""
    ufunc = "RuntimeError: Python builtin <ufunc 'tanh'> is currently not supported in Torchscript:"
    errors = {**_numpy_errors(), "np.tanh(x.numpy())": ufunc}
    assert FNS["proof_c071"](errors)


def test_c108_on_real_scripting():
    class WithLen(nn.Module):
        def forward(self, x):
            return x[: len(x) // 2] * len(x)

    scripted, err = FNS["try_script"](WithLen())
    assert err == "" and FNS["proof_c108"](scripted, WithLen())
    assert not FNS["proof_c108"](None, WithLen())  # script could not compile len(x)
    frozen, _ = FNS["jit_warnings"](lambda: torch.jit.trace(WithLen(), torch.arange(6.0)))
    assert not FNS["proof_c108"](frozen, WithLen())  # len frozen to a constant: wrong at 10


def test_c109_partly_fails_if_sequential_indexing_compiled():
    real = {
        "IndexLoop(ModuleList)": "RuntimeError: Expected integer literal for index but got a variable or non-integer.",
        "IndexLoop(Sequential)": "RuntimeError: Expected integer literal for index but got a variable or non-integer.",
        "Iterate(ModuleList)": "compiles",
        "LiteralIndex(ModuleList)": "compiles",
    }
    assert FNS["proof_c109"](real)
    assert not FNS["proof_c109"]({**real, "IndexLoop(Sequential)": "compiles"})  # the seed's fix would work
    assert not FNS["proof_c109"]({**real, "Iterate(ModuleList)": "RuntimeError"})  # then indexing would be all there is
    redefined = "RuntimeError: Can't redefine method: forward on class: __torch__.IndexLoop"
    assert not FNS["proof_c109"]({**real, "IndexLoop(Sequential)": redefined})  # an error unrelated to indexing


# Quantization: C144, C032 ---------------------------------------------------------------------------


def test_c144_and_c032_fail_without_the_deprecation_or_the_replacement():
    assert FNS["proof_c144"]({"old API runs": True, "warns": True, "torchao has each": True})
    assert not FNS["proof_c144"]({"old API runs": True, "warns": False, "torchao has each": True})
    assert not FNS["proof_c144"]({"old API runs": False, "warns": True, "torchao has each": True})
    facts = {
        "prepare_qat warns": True,
        "torchao QAT": True,
        "torchao pt2e QAT": True,
        "BN stats update under fake quantization": True,
        "freeze_bn_stats stops them": True,
    }
    assert FNS["proof_c032"](facts)
    assert not FNS["proof_c032"]({**facts, "prepare_qat warns": False})
    assert not FNS["proof_c032"]({**facts, "BN stats update under fake quantization": False})  # nothing to settle
    assert not FNS["proof_c032"]({**facts, "freeze_bn_stats stops them": False})


class _ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.dequant(self.bn(self.conv(self.quant(x))))


def test_c032_bn_statistics_are_run_not_looked_up():
    moves = FNS["bn_under_qat"](_ConvBN())
    assert (
        moves["fused module"] == "ConvBn2d" and moves["training under QAT"] > 0 and moves["after freeze_bn_stats"] == 0
    )


# Serving: C112, C132, C030 --------------------------------------------------------------------------


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.plain = torch.randn(4, 4)
        self.register_buffer("registered", torch.randn(4, 4))


def test_c112_holds_for_module_to_and_fails_when_buffers_stay_behind():
    moved = FNS["where_things_are"](_Holder().to("meta"))
    assert FNS["proof_c112"](moved, "meta") and moved["plain attribute"] == "cpu"

    class ParamsOnly(_Holder):  # the seed's picture: a move that converts parameters only
        def _apply(self, fn, recurse=True):
            for m in self.modules():
                for k, p in list(m._parameters.items()):
                    if p is not None:
                        m._parameters[k] = nn.Parameter(fn(p.detach()), requires_grad=p.requires_grad)
            return self

    stuck = FNS["where_things_are"](ParamsOnly().to("meta"))
    assert stuck["buffers (BN running_mean/var, registered)"] == ["cpu"]
    assert not FNS["proof_c112"](stuck, "meta")


def test_c132_partly_fails_if_computing_in_forward_were_a_fix_or_plain_attributes_moved():
    real = {
        "plain attribute moved": False,
        "registered buffer moved": True,
        "buffer in state_dict": True,
        "computing in forward repeats": False,
    }
    assert FNS["proof_c132"](real)
    assert not FNS["proof_c132"]({**real, "computing in forward repeats": True})
    assert not FNS["proof_c132"]({**real, "plain attribute moved": True})  # then the seed's problem would not exist


def test_c030_citation_check_holds_on_the_record_and_fails_for_a_maintained_torchserve():
    """C030 is a citation (basis "citation"): its predicate reads the course's record of TorchServe's README and
    repository, not a run. It must still fail on a record of a maintained TorchServe."""
    assert FNS["proof_c030"](deploy.TORCHSERVE)
    maintained = {**deploy.TORCHSERVE, "notice": "TorchServe is actively maintained.", "archived": ""}
    assert not FNS["proof_c030"](maintained)
    assert not FNS["proof_c030"]({**deploy.TORCHSERVE, "notice": "TorchServe is actively maintained."})
    assert not FNS["proof_c030"]({k: v for k, v in deploy.TORCHSERVE.items() if k != "archived"})  # not archived
    assert not FNS["proof_c030"]({**deploy.TORCHSERVE, "handler_api": "def predict(self, request)"})


@pytest.mark.parametrize("name", ["proof_c065", "proof_c111", "proof_c072", "proof_c112"])
def test_every_predicate_says_when_it_is_false(name):
    doc = FNS[name].__doc__ or ""
    assert "False" in doc, f"{name} needs a docstring that says when it is False"


def test_jit_warnings_records_only_torchscript_deprecations():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escaped jit_warnings would raise here
        _, ws = FNS["jit_warnings"](lambda: torch.jit.script(nn.Linear(2, 2)))
    assert ws and all("torch.jit" in str(w.message) for w in ws)
