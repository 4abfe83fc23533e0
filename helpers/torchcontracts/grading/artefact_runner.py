"""Runs inside the artefact sandbox: load one learner artefact and run it on the grader's inputs.

A lab that grades exported files (lab 06: a ``.pt2``, an ``.onnx``, a torchao ``state_dict``) cannot judge
them by loading them in the grader: ``torch.export.load`` unpickles payloads a ``.pt2`` marks
``use_pickle`` (``weights_only=False``), and an ONNX file can name external data anywhere on disk. So
``artefacts.evaluate`` runs each artefact here, in a process of its own (inside bubblewrap where it
exists: no network, its own pid namespace, none of the course's or the grader's files, only the job's
folder writable). A job caps its own memory and file sizes, drops to its own uid (when given one)
before it opens anything the learner made, and writes ``DIR/result.json`` and one
``DIR/out-<input>-<output>.npy`` per output. The grader reads those with caps and compares them with
its own reference; nothing here decides a score.

Two ways in:
* ``python -I -m torchcontracts.grading.artefact_runner run DIR UID MEM``: one job, then exit;
* ``python -I -m torchcontracts.grading.artefact_runner serve``: a fork server that imports torch,
  onnxruntime and torchao once, then forks a fresh job process per request line
  (``{"dir", "uid", "mem", "timeout"}``), kills it at its deadline, kills whatever else runs under the
  job's uid, and answers one line (``{"code", "timeout"}``). Only used with a uid per job (root in
  bubblewrap), so a job cannot touch another job's folder or outlive its turn.
  Its loop is ``forkloop``'s, shared with the kernel fork server (``boot``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from torchcontracts.grading import forkloop
from torchcontracts.grading.forkloop import Loop
from torchcontracts.grading.procs import limit, owner, pids

__all__ = ["main", "run_job", "serve"]

MAX_MESSAGE = 200


def _line(err: BaseException | str) -> str:
    """One line of an error, at most MAX_MESSAGE characters (the grader scrubs it again)."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    first = text.strip().splitlines()[0] if text.strip() else (type(err).__name__ if not isinstance(err, str) else "")
    return first[:MAX_MESSAGE]


def _limit(mem_bytes: int, uid: int) -> None:
    limit(mem=mem_bytes, fsize=256 * 2**20, nproc=256, uid=uid if uid >= 0 else None)


def _save_outputs(out_dir: Path, n: int, outputs: list[Any]) -> int:
    """Write one input's outputs as .npy (plain arrays only); returns how many."""
    import numpy as np

    for k, arr in enumerate(outputs):
        np.save(out_dir / f"out-{n}-{k}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    return len(outputs)


def _inputs(out_dir: Path, names: list[str]) -> list[Any]:
    import numpy as np

    return [np.load(out_dir / name, allow_pickle=False) for name in names]


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _flat(item)]
    return [value]


def _training_flags(graph: Any) -> list[str]:
    """Ops of an exported graph that still run in training mode (dropout or batch norm with train=True)."""
    found = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        flag = None
        if name.startswith("aten.dropout") and len(node.args) > 2:
            flag = node.args[2]
        elif name.startswith("aten.batch_norm") and len(node.args) > 5:
            flag = node.args[5]
        elif "native_batch_norm_legit_functional" in name or name.startswith("aten._native_batch_norm_legit."):
            flag = True
        if flag is True:
            found.append(name)
    return found


class PickledObject(Exception):
    """A ``.pt2`` asked for a Python object to be unpickled: refused, never run."""


@contextlib.contextmanager
def _weights_only(refused: list[str]) -> Iterator[None]:
    """``torch.export.load`` with no way to run the file's code: it unpickles what a ``.pt2`` marks
    ``use_pickle`` with ``torch.load(weights_only=False)``, opaque constants with ``pickle.loads`` and
    script objects with ``torch._C._pickle_load_obj``. Inside this block ``torch.load`` is always
    weights-only (plain and registered tensor types load; a ``__reduce__`` payload does not), and the other
    two raise. A payload that ran here could compute the outputs itself, or patch this runner to report
    any it liked, so the file would be judged on code that is not its exported program."""
    import pickle

    import torch

    real_load, real_loads = torch.load, pickle.loads
    real_obj = getattr(torch._C, "_pickle_load_obj", None)  # absent from some builds: nothing to close there

    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("weights_only") is False:
            refused.append("a weight or constant marked use_pickle")
        kwargs["weights_only"] = True
        return real_load(f, *args, **kwargs)

    def refuse(what: str) -> Any:
        def raiser(*args: Any, **kwargs: Any) -> Any:
            refused.append(what)
            raise PickledObject(what)

        return raiser

    torch.load = load  # type: ignore[assignment]
    pickle.loads = refuse("an opaque Python object")  # type: ignore[assignment]
    if real_obj is not None:
        torch._C._pickle_load_obj = refuse("a script object")
    try:
        yield
    finally:
        torch.load, pickle.loads = real_load, real_loads  # type: ignore[assignment]
        if real_obj is not None:
            torch._C._pickle_load_obj = real_obj


def _run_pt2(d: Path, job: dict[str, Any], result: dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(1)
    refused: list[str] = []
    try:
        with _weights_only(refused):
            ep = torch.export.load(str(d / job["artefact"]))
    except Exception as err:  # noqa: BLE001 - whatever the file is, say so in one line
        result["error"] = (
            f"it holds pickled Python objects ({refused[0]}), which are code, so it was not loaded: save "
            "a plain exported program (torch.export.save of a module with plain tensor weights)"
            if refused
            else f"it does not load with torch.export.load: {_line(err)}"
        )
        return
    sig = ep.graph_signature
    result["info"] = {
        "buffers": list(sig.buffers),
        "parameters": list(sig.parameters),
        "non_persistent_buffers": list(getattr(sig, "non_persistent_buffers", [])),
        "constants": list(getattr(sig, "lifted_tensor_constants", [])),
        "user_inputs": len(sig.user_inputs),
        "training_ops": _training_flags(ep.graph),
        "ops": sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"}),
    }
    module = ep.module()
    for n, x in enumerate(_inputs(d, job["inputs"])):
        try:
            with torch.no_grad():
                outs = _flat(module(torch.from_numpy(x)))
            arrays = [o.detach().cpu().numpy() for o in outs if isinstance(o, torch.Tensor)]
            if len(arrays) != len(outs):
                raise TypeError("an output is not a tensor")
            result["outputs"].append(_save_outputs(d, n, arrays))
            result["errors"].append("")
        except Exception as err:  # noqa: BLE001
            result["outputs"].append(0)
            result["errors"].append(_line(err))


def _external(model: Any) -> list[str]:
    """Names of every tensor that points at external data: initializers, constants, subgraphs."""
    import onnx

    names: list[str] = []

    def tensors(graph: Any) -> None:
        for t in list(graph.initializer) + [s.values for s in graph.sparse_initializer]:
            if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
                names.append(t.name or "?")
        for node in graph.node:
            for attr in node.attribute:
                for t in [attr.t, *attr.tensors]:
                    if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
                        names.append(t.name or node.name or "?")
                for g in [attr.g, *attr.graphs]:
                    tensors(g)

    tensors(model.graph)
    for fn in model.functions:
        for node in fn.node:
            for attr in node.attribute:
                if attr.t.data_location == onnx.TensorProto.EXTERNAL:
                    names.append(attr.t.name or "?")
    return names


def _run_onnx(d: Path, job: dict[str, Any], result: dict[str, Any]) -> None:
    import onnx

    blob = (d / job["artefact"]).read_bytes()
    try:
        model = onnx.load_model_from_string(blob)
    except Exception as err:  # noqa: BLE001
        result["error"] = f"it is not an ONNX model: {_line(err)}"
        return
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    result["info"] = {
        "opset": opset,
        "ops": sorted({n.op_type for n in model.graph.node}),
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
    }
    external = _external(model)
    if external:
        result["error"] = (
            f"it refers to external data ({len(external)} tensors, e.g. {external[0][:40]!r}): "
            "keep the weights inside the file (a small model needs no external data)"
        )
        return
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as err:  # noqa: BLE001
        result["error"] = f"onnx.checker rejects it: {_line(err)}"
        return
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    try:
        sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001
        result["error"] = f"onnxruntime cannot open it: {_line(err)}"
        return
    names = [i.name for i in sess.get_inputs()]
    if len(names) != 1:
        result["error"] = f"it takes {len(names)} inputs; the model takes one tensor"
        return
    for n, x in enumerate(_inputs(d, job["inputs"])):
        try:
            outs = sess.run(None, {names[0]: x})
            result["outputs"].append(_save_outputs(d, n, list(outs)))
            result["errors"].append("")
        except Exception as err:  # noqa: BLE001
            result["outputs"].append(0)
            result["errors"].append(_line(err))


def _skeleton(arch: dict[str, Any]) -> Any:
    """The grader's architecture for a state_dict: an MLP of Linear + ReLU with the given widths."""
    from torch import nn

    widths = [int(w) for w in arch["mlp"]]
    layers: list[Any] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _run_state_dict(d: Path, job: dict[str, Any], result: dict[str, Any]) -> None:
    import logging

    logging.getLogger("torchao").setLevel(logging.ERROR)  # its CUDA-only kernels say they cannot load
    import torch
    import torchao  # noqa: F401 - registers its tensor types as safe for weights_only loading

    torch.set_num_threads(1)
    try:
        sd = torch.load(str(d / job["artefact"]), weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001
        result["error"] = f"it does not load with torch.load(weights_only=True): {_line(err)}"
        return
    if not isinstance(sd, dict):
        result["error"] = f"it holds a {type(sd).__name__}, not a state_dict"
        return
    model = _skeleton(job["arch"])
    try:
        model.load_state_dict(sd, strict=True, assign=True)
    except Exception as err:  # noqa: BLE001
        keys = ", ".join(sorted(map(str, sd))[:3])
        result["error"] = f"its keys ({keys}, ...) do not fit the model's own state_dict: {_line(err)[:80]}"
        return
    weights = []
    for key, value in sd.items():
        if not key.endswith("weight") or not isinstance(value, torch.Tensor):
            continue
        inner = []
        if hasattr(value, "__tensor_flatten__"):
            names, _ = value.__tensor_flatten__()
            inner = [str(getattr(value, a).dtype).replace("torch.", "") for a in names]
        weights.append(
            {
                "key": key,
                "type": f"{type(value).__module__}.{type(value).__qualname__}",
                "dtype": str(value.dtype).replace("torch.", ""),
                "inner": inner,
            }
        )
    result["info"] = {"weights": weights}
    model.eval()
    for n, x in enumerate(_inputs(d, job["inputs"])):
        try:
            with torch.inference_mode():
                out = model(torch.from_numpy(x))
            result["outputs"].append(_save_outputs(d, n, [out.float().numpy()]))
            result["errors"].append("")
        except Exception as err:  # noqa: BLE001
            result["outputs"].append(0)
            result["errors"].append(_line(err))


RUNNERS = {"pt2": _run_pt2, "onnx": _run_onnx, "state_dict": _run_state_dict}


def run_job(d: Path, uid: int, mem: int) -> None:
    """Limits and uid first, then the job; always leaves a result.json (unless the artefact ends the process)."""
    _limit(mem, uid)
    os.chdir(d)  # relative paths inside an artefact resolve to its own folder, the only one it can see
    result: dict[str, Any] = {"error": "", "info": {}, "outputs": [], "errors": []}
    try:
        job = json.loads((d / "job.json").read_text(encoding="utf-8"))
        RUNNERS[job["kind"]](d, job, result)
    except MemoryError:
        result["error"] = "it ran out of memory while loading or running"
    except BaseException as err:  # noqa: BLE001 - a payload may raise anything, even SystemExit
        result["error"] = result["error"] or f"loading or running it failed: {_line(err)}"
    (d / "result.json").write_text(json.dumps(result), encoding="utf-8")


def _preload() -> None:
    import logging

    logging.getLogger("torchao").setLevel(logging.ERROR)
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.export  # noqa: F401

    for name in ("onnx", "onnxruntime", "torchao"):
        try:
            __import__(name)
        except ImportError:
            pass


def _kill_uid(uid: int) -> None:
    """Kill every process of a job's uid (a job that double-forked); this sandbox's /proc shows only its own."""
    import signal

    for pid in pids():
        if owner(pid) == uid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _job(req: dict[str, Any]) -> None:
    """The forked job process: a session of its own, no pipe of the server's, then the job."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the server's pipes stay out of the job's reach
        os.dup2(null, fd)
    run_job(Path(req["dir"]), int(req["uid"]), int(req["mem"]))


def _handle(loop: Loop, req: dict[str, Any]) -> None:
    """One job: fork it, kill it at its deadline, kill whatever else runs under its uid, then answer."""
    pid = loop.fork(req)
    status, timed_out = loop.wait(pid, float(req["timeout"]))
    _kill_uid(int(req["uid"]))
    loop.reap()  # what the kill left (this process is the sandbox's init or a subreaper)
    loop.answer({"code": None if timed_out else os.waitstatus_to_exitcode(status), "timeout": timed_out})


def serve() -> None:
    """The fork server: one job at a time, each answered when it ends or its deadline passes."""
    forkloop.serve(preload=_preload, handle=_handle, child=_job, failed=1)


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve()
        return 0
    if argv[:1] == ["run"] and len(argv) == 4:
        run_job(Path(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    sys.stderr.write("usage: python -m torchcontracts.grading.artefact_runner run DIR UID MEM | serve\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
