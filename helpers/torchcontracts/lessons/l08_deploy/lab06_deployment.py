"""Lab 06 (deployment): the tasks, their call drivers and public checks; hidden checks live in the solution only.

Every answer is an artefact, and the grader judges the artefact, not the learner's objects:

* t1 ``make_exportable(model)``: a module without the data-dependent branch and with a real buffer.
  The driver exports it (``torch.export.export``) in the learner's kernel and returns the ``.pt2`` bytes;
* t2 ``export_dynamic(model, example)``: an ``ExportedProgram`` with a dynamic batch (``.pt2`` bytes);
* t3 ``export_onnx(model, example)``: an ``ONNXProgram`` from the dynamo exporter (``.onnx`` bytes);
* t4 ``quantize_int8(model)``: a torchao-quantized model (``torch.save`` bytes of its ``state_dict``).

A driver (``call=``) turns the returned object into bytes the moment the function returns, so the
sealed answer is the file itself. The judge hands those bytes to ``grading.artefacts.evaluate``, which
loads and runs them in a separate sandboxed process on inputs the grader made, and compares what came
back with the grader's own reference model built from the case's weights. A file exported from any
other model (other weights, training mode, a fixed branch) fails, whatever else it claims.
"""

from __future__ import annotations

import io
import math
from typing import Any, Callable

import torch
import torch._dynamo  # noqa: F401  imported before any learner code: its import rebinds torch.manual_seed
import torch.export  # noqa: F401
import torch.nn.functional as F
from torch import nn

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task, compare, short
from torchcontracts.lessons.l08_deploy.deploy import quiet
from torchcontracts.grading.artefacts import evaluate
from torchcontracts.grading.judge import scrub

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

THRESHOLD = 0.5
ATOL = 1e-5  # the parity the tasks ask for (eager vs the artefact, on the grader's inputs)
MLP_WIDTHS = (64, 256, 256, 10)
MIN_SHRINK, MIN_AGREEMENT, MAX_REL_ERROR = 2.0, 0.97, 0.03


class FragileNet(nn.Module):
    """t1's model as handed out: a data-dependent Python branch, and a plain tensor attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)
        self.offset = torch.linspace(-1.0, 1.0, 8)  # a plain attribute: not in state_dict(), not moved by .to()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if h.mean() > 0.5:  # a branch on a tensor's value
            h = h * 0.5
        return self.fc2(h) + self.offset


class SmallClassifier(nn.Module):
    """t2's model: conv, batch norm, dropout; it comes in training mode, as a freshly built module does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 3, 12, 12) -> (B, 4)
        h = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(self.drop(h))


class Upsampler(nn.Module):
    """t3's model: a bicubic upsampling between two convolutions, and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, 3, 8, 8) -> (B, 2, 16, 16), (B, 2)
        h = F.interpolate(torch.relu(self.conv1(x)), scale_factor=2, mode="bicubic", align_corners=False)
        heat = self.conv2(h)
        return heat, heat.amax(dim=(2, 3))


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A model's state as a plain dict of tensors (what a case carries)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _built(cls: type[nn.Module], state: dict[str, torch.Tensor] | None, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = cls()
    if state is not None:
        extra = {k: v for k, v in state.items() if k not in model.state_dict()}
        model.load_state_dict({k: v for k, v in state.items() if k not in extra})
        for name, value in extra.items():  # FragileNet.offset lives outside the state_dict
            setattr(model, name, value.clone())
    return model


def make_fragile(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> FragileNet:
    """t1's FragileNet, with ``state`` (weights and ``offset``) if given."""
    return _built(FragileNet, state, seed)  # type: ignore[return-value]


def make_classifier(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> SmallClassifier:
    """t2's SmallClassifier in training mode, with trained-looking batch-norm statistics."""
    model = _built(SmallClassifier, state, seed)
    if state is None:
        g = torch.Generator().manual_seed(seed + 1)
        model.bn.running_mean.copy_(torch.randn(8, generator=g) * 0.2)
        model.bn.running_var.copy_(torch.rand(8, generator=g) * 1.5 + 0.5)
    return model.train()  # type: ignore[return-value]


def make_upsampler(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> Upsampler:
    """t3's Upsampler, in eval mode."""
    return _built(Upsampler, state, seed).eval()  # type: ignore[return-value]


def make_mlp(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """t4's MLP: Linear + ReLU with widths ``MLP_WIDTHS``, in eval mode."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


def branch_inputs(model: FragileNet, g: torch.Generator, batch: int = 8) -> list[torch.Tensor]:
    """Two batches, one on each side of ``h.mean() > 0.5``: found by scaling one random batch."""
    x = torch.randn(batch, 16, generator=g)
    with torch.no_grad():
        means = {s: float(torch.relu(model.fc1(x * s)).mean()) for s in (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16)}
    calm = max((s for s, m in means.items() if m < THRESHOLD - 0.05), default=0.05)
    hot = min((s for s, m in means.items() if m > THRESHOLD + 0.05), default=16)
    return [x * calm, x * hot]


def fragile_case(label: str, seed: int, batch: int = 8) -> Case:
    model = make_fragile(seed=seed)
    g = torch.Generator().manual_seed(seed + 11)
    return Case(
        label,
        (
            {**state_of(model), "offset": model.offset.clone()},
            torch.randn(batch, 16, generator=g),
            branch_inputs(model, g, batch),
        ),
    )


def classifier_case(label: str, seed: int, batches: tuple[int, ...]) -> Case:
    g = torch.Generator().manual_seed(seed + 21)
    return Case(
        label,
        (
            state_of(make_classifier(seed=seed)),
            torch.randn(4, 3, 12, 12, generator=g),
            [torch.randn(b, 3, 12, 12, generator=g) for b in batches],
        ),
    )


def upsampler_case(label: str, seed: int, batches: tuple[int, ...]) -> Case:
    g = torch.Generator().manual_seed(seed + 31)
    return Case(
        label,
        (
            state_of(make_upsampler(seed=seed)),
            torch.randn(4, 3, 8, 8, generator=g),
            [torch.randn(b, 3, 8, 8, generator=g) for b in batches],
        ),
    )


def mlp_case(label: str, seed: int, n: int = 512) -> Case:
    g = torch.Generator().manual_seed(seed + 41)
    return Case(label, (state_of(make_mlp(seed=seed)), torch.randn(n, MLP_WIDTHS[0], generator=g)))


# --- call drivers: run in the learner's kernel, turn the answer into file bytes at once -------------


def pt2_bytes(program: Any) -> bytes:
    """The ``.pt2`` bytes of an ``ExportedProgram`` (``torch.export.save`` to memory)."""
    if not isinstance(program, torch.export.ExportedProgram):
        raise TypeError(f"return the torch.export.ExportedProgram itself, got {type(program).__name__}")
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return buf.getvalue()


def export_fixed(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t1 driver: ``fn(model)`` must return a module; export it as the grader would, and return the .pt2."""
    state, example, _inputs = case.args
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
    state, example, _inputs = case.args
    program = fn(make_classifier(state), example.clone())
    blob = pt2_bytes(program)
    with torch.no_grad():
        example_out = program.module()(example)
    return {"pt2": blob, "example_out": example_out.detach() if isinstance(example_out, torch.Tensor) else None}


def onnx_bytes(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """t3 driver: ``fn(model, example)`` returns an ONNXProgram (or a ModelProto, or bytes); return the bytes."""
    state, example, _inputs = case.args
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
    state, _inputs = case.args
    out = fn(make_mlp(state))
    if not isinstance(out, nn.Module):
        raise TypeError(f"return the quantized nn.Module, got {type(out).__name__}")
    buf = io.BytesIO()
    torch.save(out.state_dict(), buf)
    return {"state_dict": buf.getvalue()}


# --- judges: run in the grader's process; the artefact runs in the artefact sandbox ------------------


def _blob(out: Any, key: str) -> bytes | None:
    value = out.get(key) if isinstance(out, dict) else None
    return bytes(value) if isinstance(value, (bytes, bytearray)) and value else None


def _no_blob(key: str, out: Any) -> list[Comparison]:
    got = f"a dict with keys {sorted(map(str, out))}" if isinstance(out, dict) else type(out).__name__
    return [
        Comparison.plain(
            "artefact",
            False,
            "the check's driver did not return the file's bytes: rerun the cell",
            expected=f"a dict with {key!r}: bytes",
            got=got,
        )
    ]


def artefact_rows(
    kind: str,
    blob: bytes,
    inputs: list[torch.Tensor],
    reference: Callable[[torch.Tensor], Any],
    names: tuple[str, ...],
    atol: float = ATOL,
    labels: list[str] | None = None,
) -> tuple[list[Comparison], Any]:
    """Run the artefact in the sandbox on ``inputs``; one row per input and output against ``reference``."""
    ev = evaluate(kind, blob, inputs)
    if ev.problem:
        return [Comparison.plain("artefact", False, scrub(f"the file was loaded in a sandbox: {ev.problem}"))], ev
    rows = []
    for n, (x, outs, err) in enumerate(zip(inputs, ev.outputs, ev.errors)):
        label = labels[n] if labels else f"batch {x.shape[0]}"
        if err:
            rows.append(Comparison.plain(label, False, scrub(f"running it failed: {err}")))
            continue
        with torch.no_grad():
            want = reference(x)
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        if len(outs) != len(want):
            rows.append(
                Comparison.plain(
                    label,
                    False,
                    f"it returns {len(outs)} outputs, the model {len(want)}",
                    expected=len(want),
                    got=len(outs),
                )
            )
            continue
        for name, got, exp in zip(names, outs, want):
            rows.append(compare(f"{label}, {name}", got, exp.detach(), atol=atol, rtol=0.0))
    return rows, ev


def _example_row(out: dict[str, Any], expected: torch.Tensor) -> Comparison:
    return compare(
        "your program on the example (in your kernel)", out.get("example_out"), expected, atol=ATOL, rtol=ATOL
    )


def judge_exportable(case: Case, out: Any) -> list[Comparison]:
    """t1: the .pt2 keeps ``offset`` as a persistent buffer and matches FragileNet on both sides of the branch."""
    blob = _blob(out, "pt2")
    if blob is None:
        return _no_blob("pt2", out)
    state, example, inputs = case.args
    ref = make_fragile(state).eval()
    rows = [_example_row(out, ref(example).detach())]
    got, ev = artefact_rows(
        "pt2", blob, inputs, ref, ("output",), labels=["h.mean() < 0.5 batch", "h.mean() > 0.5 batch"]
    )
    info = ev.info if isinstance(ev.info, dict) else {}
    names = {
        k: [str(n) for n in info.get(k, []) if str(n).split(".")[-1] == "offset"]
        for k in ("buffers", "parameters", "constants", "non_persistent_buffers")
    }
    if ev.problem:
        return rows + got
    if names["buffers"] and names["non_persistent_buffers"]:
        rows.append(
            Comparison.plain(
                "offset",
                False,
                "a buffer registered with persistent=False: it is not in "
                "state_dict(), so a checkpoint would not keep it",
                expected="a persistent buffer",
                got="persistent=False",
            )
        )
    elif names["buffers"]:
        rows.append(Comparison.plain("offset", True, "a buffer of the exported program"))
    else:
        why = (
            "an nn.Parameter: an optimizer would train it; use register_buffer"
            if names["parameters"]
            else "a plain tensor attribute (a constant baked into the graph): register it with register_buffer"
        )
        rows.append(
            Comparison.plain(
                "offset",
                False,
                why,
                expected="a buffer named offset",
                got="a parameter" if names["parameters"] else "no such buffer",
            )
        )
    rows += got
    if len(got) == 2 and got[0].ok != got[1].ok:
        bad = got[1] if got[0].ok else got[0]
        rows.append(
            Comparison.plain(
                bad.name,
                False,
                "right on one side of the branch only: the branch must depend "
                "on the data (torch.cond or torch.where), not be fixed at export",
            )
        )
    return rows


def _guard_hint(err: str) -> str:
    if "Guard failed" in err or "to be equal to" in err or "shape" in err or "invalid dimensions" in err:
        return "the batch size is fixed (export with dynamic_shapes and a Dim for dimension 0, no max below 17)"
    return ""


def _with_hints(rows: list[Comparison]) -> list[Comparison]:
    """Rows whose run failed on a fixed batch size say so first."""
    out = []
    for r in rows:
        hint = "" if r.ok or "running it failed" not in r.status else _guard_hint(r.status)
        out.append(Comparison.plain(r.name, False, f"{hint}; {r.status}"[:240]) if hint else r)
    return out


def judge_dynamic(case: Case, out: Any) -> list[Comparison]:
    """t2: the .pt2 runs at every batch size of the case and matches the classifier in eval mode."""
    blob = _blob(out, "pt2")
    if blob is None:
        return _no_blob("pt2", out)
    state, example, inputs = case.args
    ref = make_classifier(state).eval()
    got, ev = artefact_rows("pt2", blob, inputs, ref, ("logits",))
    info = ev.info if isinstance(ev.info, dict) else {}
    rows = []
    if info.get("training_ops"):  # first: it explains the value rows below
        rows.append(
            Comparison.plain(
                "mode",
                False,
                "exported in training mode (dropout / batch norm with "
                "train=True): call model.eval() before torch.export.export",
                expected="eval mode",
                got=", ".join(map(str, info["training_ops"]))[:60],
            )
        )
    return rows + [_example_row(out, ref(example).detach())] + _with_hints(got)


def judge_onnx(case: Case, out: Any) -> list[Comparison]:
    """t3: opset 18 or later, dynamic batch, and onnxruntime within ATOL of eager on every output."""
    blob = _blob(out, "onnx")
    if blob is None:
        return _no_blob("onnx", out)
    state, _example, inputs = case.args
    got, ev = artefact_rows("onnx", blob, inputs, make_upsampler(state), ("heat", "score"))
    opset = ev.info.get("opset") if isinstance(ev.info, dict) else None
    rows = []
    if isinstance(opset, int):
        rows.append(
            Comparison.plain(
                "opset",
                opset >= 18,
                "18 or later"
                if opset >= 18
                else "below 18: export with the dynamo exporter at opset_version=18 or later",
                expected=">= 18",
                got=opset,
            )
        )
    return rows + _with_hints(got)


def judge_quantized(case: Case, out: Any) -> list[Comparison]:
    """t4: at least 2x smaller than fp32, weights quantized by torchao, and within the accuracy budget."""
    blob = _blob(out, "state_dict")
    if blob is None:
        return _no_blob("state_dict", out)
    state, inputs = case.args
    ref = make_mlp(state)
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    ratio = len(buf.getvalue()) / len(blob)
    rows = [
        Comparison.plain(
            "file size",
            ratio >= MIN_SHRINK,
            f"{ratio:.2f}x smaller than fp32"
            if ratio >= MIN_SHRINK
            else f"only {ratio:.2f}x smaller than the fp32 file: quantize every Linear to int8",
            expected=f">= {MIN_SHRINK:g}x",
            got=f"{ratio:.2f}x",
        )
    ]
    ev = evaluate("state_dict", blob, [inputs], arch={"mlp": list(MLP_WIDTHS)})
    if ev.problem:
        hint = (
            " (torch.ao.quantization replaces the Linear modules; torchao's quantize_ keeps them and swaps "
            "their weights)"
            if "do not fit" in ev.problem
            else ""
        )
        return rows + [
            Comparison.plain("artefact", False, scrub(f"the file was loaded in a sandbox: {ev.problem}")[:220] + hint)
        ]
    weights = ev.info.get("weights", []) if isinstance(ev.info, dict) else []
    weights = [w for w in weights if isinstance(w, dict)]
    plain = [
        w
        for w in weights
        if not (str(w.get("type", "")).startswith("torchao.") and any("int" in str(d) for d in w.get("inner", [])))
    ]
    rows.append(
        Comparison.plain(
            "weights",
            bool(weights) and not plain,
            "quantized by torchao"
            if weights and not plain
            else f"{short(plain[0].get('key'))} is a plain {short(plain[0].get('dtype'))} tensor, "
            "not quantized: use torchao's quantize_ with an int8 config"
            if plain
            else "the file holds no Linear weights",
        )
    )
    if ev.errors and ev.errors[0]:
        return rows + [Comparison.plain("accuracy", False, scrub(f"running it failed: {ev.errors[0]}"))]
    got = ev.outputs[0][0] if ev.outputs and ev.outputs[0] else None
    with torch.no_grad():
        want = ref(inputs)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return rows + [compare("logits", got, want)]
    agree = float((got.argmax(1) == want.argmax(1)).float().mean())
    rel = float((got.float() - want).norm() / want.norm())
    rel = rel if math.isfinite(rel) else math.inf
    rows.append(
        Comparison.plain(
            "top-1 agreement with fp32",
            agree >= MIN_AGREEMENT,
            "within budget" if agree >= MIN_AGREEMENT else "too many inputs change class",
            expected=f">= {MIN_AGREEMENT:.0%}",
            got=f"{agree:.1%}",
            diff=1 - agree,
        )
    )
    rows.append(
        Comparison.plain(
            "relative logit error",
            rel <= MAX_REL_ERROR,
            "within budget" if rel <= MAX_REL_ERROR else "the logits drift too far from fp32",
            expected=f"<= {MAX_REL_ERROR:g}",
            got=f"{rel:.3g}",
            diff=rel,
        )
    )
    return rows


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
            lambda seed: [mlp_case("MLP, 512 fixed inputs", seed)],
            judge_quantized,
            call=quantized_bytes,
        ),
    ],
)
