"""Lab 06 (deployment): the tasks, their call drivers and public checks; hidden checks live in the solution only.

Every answer is an artefact, and the grader judges the artefact, not the learner's objects:

* t1 ``make_exportable(model)``: a module without the data-dependent branch and with a real buffer.
  The driver exports it (``torch.export.export``) in the learner's kernel and returns the ``.pt2`` bytes;
* t2 ``export_dynamic(model, example)``: an ``ExportedProgram`` with a dynamic batch (``.pt2`` bytes);
* t3 ``export_onnx(model, example)``: an ``ONNXProgram`` from the dynamo exporter (``.onnx`` bytes);
* t4 ``quantize_int8(model)``: a torchao-quantized model (``torch.save`` bytes of its ``state_dict``).

A driver (``call=``) turns the returned object into bytes the moment the function returns, so the
sealed answer is the file itself. The judge (``lab06_judges``) hands those bytes to ``grading.api.evaluate``, which
loads and runs them in a separate sandboxed process on inputs the grader made, and compares what came
back with the grader's own reference model built from the case's weights. A file exported from any
other model (other weights, training mode, a fixed branch) fails, whatever else it claims.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import torch
import torch._dynamo  # noqa: F401  imported before any learner code: its import rebinds torch.manual_seed
import torch.export  # noqa: F401
from torch import nn

from torchcontracts.checks import Case, Check, LabSpec, Task
from torchcontracts.lessons.l08_deploy.deploy import quiet
from torchcontracts.lessons.l08_deploy.lab06_judges import (
    artefact_rows,
    judge_dynamic,
    judge_exportable,
    judge_onnx,
    judge_quantized,
)
from torchcontracts.lessons.l08_deploy.lab06_models import (
    ATOL,
    MAX_REL_ERROR,
    MIN_AGREEMENT,
    MIN_SHRINK,
    MLP_WIDTHS,
    THRESHOLD,
    FragileNet,
    SmallClassifier,
    Upsampler,
    branch_inputs,
    classifier_case,
    fragile_case,
    make_classifier,
    make_fragile,
    make_mlp,
    make_upsampler,
    mlp_case,
    state_of,
    upsampler_case,
)

quiet()  # torchao's CUDA-only kernels say, on a CPU, that they cannot load; the exporter's registry notes
try:  # the exporter and torchao rebind nothing the grader watches once they are imported here, up front
    import onnx  # noqa: F401
    import torch.onnx._internal.exporter._core  # noqa: F401
    import torchao.quantization  # noqa: F401
except ImportError:  # pragma: no cover - a platform without them: the tasks say so when run
    pass

__all__ = [
    "FragileNet",
    "MLP_WIDTHS",
    "SmallClassifier",
    "Upsampler",
    "ATOL",
    "MAX_REL_ERROR",
    "MIN_AGREEMENT",
    "MIN_SHRINK",
    "THRESHOLD",
    "artefact_rows",
    "branch_inputs",
    "classifier_case",
    "export_fixed",
    "fragile_case",
    "judge_dynamic",
    "judge_exportable",
    "judge_onnx",
    "judge_quantized",
    "lab",
    "make_classifier",
    "make_fragile",
    "make_mlp",
    "make_upsampler",
    "mlp_case",
    "onnx_bytes",
    "pt2_bytes",
    "quantized_bytes",
    "save_program",
    "state_of",
    "upsampler_case",
]

# --- call drivers: run in the learner's kernel, turn the answer into file bytes at once (module-level here:
# the grader imports them by name from this module, ``Check.call``) --------------------------------------


def pt2_bytes(program: Any) -> bytes:
    """The ``.pt2`` bytes of an ``ExportedProgram`` (``torch.export.save`` to memory)."""
    if not isinstance(program, torch.export.ExportedProgram):
        raise TypeError(f"return the torch.export.ExportedProgram itself, got {type(program).__name__}")
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return buf.getvalue()


def export_fixed(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t1 driver: ``fn(model)`` must return a module; export it as the grader would, and return the .pt2."""
    state, example, _batch = case.args
    out = fn(make_fragile(state))
    if not isinstance(out, nn.Module):
        raise TypeError(f"return an nn.Module (the exportable model), got {type(out).__name__}")
    try:
        program = torch.export.export(out.eval(), (example,))
    except Exception as err:  # noqa: BLE001 - the learner's model, reported in one line
        first = (str(err).strip().splitlines() or [""])[0][:120]
        hint = (
            " (a Python branch on a tensor's value: use torch.cond or torch.where)"
            if "DataDependent" in type(err).__name__ or "data-dependent" in first
            else ""
        )
        raise RuntimeError(f"torch.export.export(model, (x,)) failed{hint}: {type(err).__name__}: {first}") from None
    with torch.no_grad():
        example_out = program.module()(example)
    return {"pt2": pt2_bytes(program), "example_out": example_out.detach()}


def save_program(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t2 driver: ``fn(model, example)`` returns an ExportedProgram; return its .pt2 bytes."""
    state, example, _batches = case.args
    program = fn(make_classifier(state), example.clone())
    blob = pt2_bytes(program)
    with torch.no_grad():
        example_out = program.module()(example)
    return {"pt2": blob, "example_out": example_out.detach() if isinstance(example_out, torch.Tensor) else None}


def onnx_bytes(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t3 driver: ``fn(model, example)`` returns an ONNXProgram (or a ModelProto, or bytes); return the bytes."""
    state, example, _batches = case.args
    out = fn(make_upsampler(state), example.clone())
    if isinstance(out, (bytes, bytearray)):
        return {"onnx": bytes(out)}
    proto = getattr(out, "model_proto", out)
    if not hasattr(proto, "SerializeToString") or out is None:
        raise TypeError(
            f"return the torch.onnx.ONNXProgram that torch.onnx.export(..., dynamo=True) gives, "
            f"got {type(out).__name__}"
        )
    return {"onnx": proto.SerializeToString()}


def quantized_bytes(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t4 driver: ``fn(model)`` returns the quantized model; return ``torch.save(model.state_dict())`` bytes."""
    state, _n = case.args
    out = fn(make_mlp(state))
    if not isinstance(out, nn.Module):
        raise TypeError(f"return the quantized nn.Module, got {type(out).__name__}")
    buf = io.BytesIO()
    torch.save(out.state_dict(), buf)
    return {"state_dict": buf.getvalue()}


lab = LabSpec(
    "lab06_deployment",
    "Deployment: make a model exportable, export with a dynamic batch, reach ONNX parity, quantize",
    tasks=[
        Task("t1", "make_exportable(model): no data-dependent branch, a real buffer", 4, "make_exportable"),
        Task("t2", "export_dynamic(model, example): a .pt2 that runs at any batch size", 3, "export_dynamic"),
        Task("t3", "export_onnx(model, example): onnxruntime parity <= 1e-5 at two batch sizes", 4, "export_onnx"),
        Task("t4", "quantize_int8(model): >= 2x smaller within an accuracy budget", 3, "quantize_int8"),
    ],
    checks=[
        Check(
            "t1",
            "t1 exports, keeps a buffer, follows the branch",
            lambda seed: [fragile_case("FragileNet, batch 8", seed)],
            judge_exportable,
            call=export_fixed,
        ),
        Check(
            "t2",
            "t2 runs at batch 1 and 17 like the model in eval mode",
            lambda seed: [classifier_case("classifier at batch 1 and 17", seed, (1, 17))],
            judge_dynamic,
            call=save_program,
        ),
        Check(
            "t3",
            "t3 onnxruntime matches eager at batch 2 and 17",
            lambda seed: [upsampler_case("upsampler at batch 2 and 17", seed, (2, 17))],
            judge_onnx,
            call=onnx_bytes,
        ),
        Check(
            "t4",
            "t4 smaller, quantized, within the accuracy budget",
            lambda seed: [mlp_case("MLP, 512 inputs", seed)],
            judge_quantized,
            call=quantized_bytes,
        ),
    ],
)
