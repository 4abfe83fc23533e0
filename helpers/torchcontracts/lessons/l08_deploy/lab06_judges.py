"""Lab 06's judges: they run in the grader's process and hand each artefact to the grading sandbox.

A judge never loads a learner's file here: ``grading.api.evaluate`` runs it in a separate sandboxed process
on inputs the judge draws from the artefact's own bytes (``lab06_models.judging_inputs``: the kernel that made
the file never saw them), and the judge compares what came back with its own reference model (``lab06_models``).
Lab checks reach the grader only through ``torchcontracts.grading.api``, its public face.
"""

from __future__ import annotations

import io
import math
from typing import Any, Callable

import torch

from torchcontracts.checks import Case, Comparison, compare, short
from torchcontracts.grading.api import evaluate, scrub
from torchcontracts.lessons.l08_deploy.lab06_models import (
    ATOL,
    MAX_REL_ERROR,
    MIN_AGREEMENT,
    MIN_SHRINK,
    MLP_WIDTHS,
    make_classifier,
    make_fragile,
    make_mlp,
    make_upsampler,
    judging_inputs,
)


__all__ = ["artefact_rows", "judge_dynamic", "judge_exportable", "judge_onnx", "judge_quantized"]


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
    state, example, _batch = case.args
    ref = make_fragile(state).eval()
    inputs = judging_inputs("t1", case, blob)
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
    state, example, _batches = case.args
    ref = make_classifier(state).eval()
    inputs = judging_inputs("t2", case, blob)
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
    state, _example, _batches = case.args
    inputs = judging_inputs("t3", case, blob)
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
    state, _n = case.args
    ref = make_mlp(state)
    (inputs,) = judging_inputs("t4", case, blob)
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
