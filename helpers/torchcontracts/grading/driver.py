"""Runs inside the learner's kernel for the grader: identity snapshots, calls of learner functions, saved outputs.

Nothing this module writes decides a score by itself: the grader judges the saved outputs in its
own process, and only uses the snapshots to *lower* a score when torch or the course code was
replaced. A learner who fakes this module gains nothing the outputs do not already earn.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

from IPython import get_ipython as _get_ipython

from torchcontracts.check import Case as _Case

__all__ = ["drive", "preload", "snapshot", "start", "watched_objects"]

_KEEP: list[Any] = []  # the objects seen at start, kept alive so that their ids are never reused
_STATE: dict[str, Any] = {}
_IPYTHON_BUILTINS = {"_", "__", "___", "exit", "quit", "get_ipython", "display", "help", "copyright",
                     "credits", "license", "__IPYTHON__", "__builtins__", "input"}
_TORCH_REBINDS = {"torch.Storage"}  # torch.set_default_dtype rebinds it: not tampering
_PLAIN = (bool, int, float, complex, str, bytes, type(None))
# bound at import (before learner code), so a replaced builtin cannot blind the snapshot
_isinstance, _callable, _vars, _dir, _id, _getattr_static = isinstance, callable, vars, dir, id, inspect.getattr_static


def _modules(labchecks: str) -> dict[str, types.ModuleType]:
    """The watched modules, resolved once at start (a later swap in sys.modules is itself reported)."""
    if "modules" not in _STATE:
        import builtins

        import torch
        import torch.autograd
        import torch.nn.functional
        import torch.testing

        import torchcontracts.check

        _STATE["modules"] = {
            "torch": torch, "torch.testing": torch.testing, "torch.nn.functional": torch.nn.functional,
            "torch.autograd": torch.autograd, "builtins": builtins, "torchcontracts.check": torchcontracts.check,
            __name__: sys.modules[__name__], labchecks: importlib.import_module(labchecks)}
    return _STATE["modules"]


def watched_objects(labchecks: str) -> dict[str, Any]:
    """The functions, classes and modules whose replacement counts as tampering, by dotted name."""
    modules = _modules(labchecks)
    torch = modules["torch"]
    classes: dict[str, type] = {"torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module}
    objs: dict[str, Any] = {}
    for mname, mod in modules.items():
        objs[f"sys.modules[{mname}]"] = sys.modules.get(mname)
        for key, val in list(_vars(mod).items()):
            if mname == "builtins" and key in _IPYTHON_BUILTINS:
                continue
            if _isinstance(val, type) and getattr(val, "__module__", "") == mname and mname.startswith("torchcontracts"):
                classes[f"{mname}.{key}"] = val
            if (_callable(val) or _isinstance(val, types.ModuleType)) and f"{mname}.{key}" not in _TORCH_REBINDS:
                objs[f"{mname}.{key}"] = val
    for cname, cls in classes.items():
        for key in _dir(cls):
            if key in ("__dict__", "__weakref__", "__doc__", "__annotations__"):
                continue
            objs[f"{cname}.{key}"] = _getattr_static(cls, key, None)
    return objs


def snapshot(tag: str) -> None:
    """Write the ids of the watched objects now, for the grader to compare with the start."""
    objs = watched_objects(_STATE["labchecks"])
    if tag == "baseline":
        _KEEP.extend(objs.values())
    ids = {name: _id(obj) for name, obj in objs.items()}
    (Path(_STATE["io"]) / f"snap-{tag}.json").write_text(json.dumps(ids), encoding="utf-8")


def preload() -> None:
    """Do up front what torch does lazily to its own namespace, so that it never reads as tampering:
    importing torch._dynamo rebinds ``torch.manual_seed``, and the first ``torch.compile`` wraps
    ``nn.Module.__init__``/``__setstate__``."""
    try:
        import torch._dynamo.mutation_guard as guard

        guard.install_generation_tagging_init()
    except Exception:  # noqa: BLE001 - an older or newer torch: nothing to do up front
        pass


def _guard(forbidden: str, report: int) -> None:
    """Block (and report) opening anything under the course's solutions/ from this kernel.

    An audit hook cannot be removed; it stops the plain ways (open, listdir, copy, link) of reading
    the reference answers or the hidden checks. It is a tripwire, not a sandbox: see the README.
    """
    realpath, fsdecode, write, sep = os.path.realpath, os.fsdecode, os.write, os.sep  # bound before learner code
    root = realpath(forbidden)
    events = {"open", "os.listdir", "os.scandir", "os.symlink", "os.link", "os.rename", "shutil.copyfile",
              "shutil.copytree", "os.chdir", "glob.glob"}
    busy: list[bool] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in events or busy or not args:
            return
        busy.append(True)
        try:
            for arg in args[:2]:
                if _isinstance(arg, (str, bytes, os.PathLike)):
                    path = realpath(fsdecode(arg))
                    if path == root or path.startswith(root + sep):
                        try:
                            write(report, f"{event}\n".encode())
                        except OSError:
                            pass
                        raise PermissionError("grading: the course's solutions/ is not readable from a submission")
        finally:
            busy.clear()

    sys.addaudithook(hook)


def start(io: str, labchecks: str, threads: int, forbidden: str = "") -> None:
    """The first cell of a grading kernel: import what the checks bind, then take the baseline."""
    import torch

    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    torch.set_num_threads(max(1, threads))
    preload()
    _STATE.update(io=io, labchecks=labchecks)
    _modules(labchecks)  # imports the labchecks module: it binds its references before any learner code runs
    snapshot("baseline")
    if forbidden:
        _guard(forbidden, os.open(str(Path(io) / "guard.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))


def _unsupported(value: Any, depth: int = 0) -> str:
    """Name the first value the grader cannot load safely, or '' when all of it is plain data."""
    import torch

    if depth > 20:
        return "a structure nested too deeply"
    if isinstance(value, _PLAIN) or type(value) in (torch.dtype, torch.device, torch.Size):
        return ""
    if type(value) is torch.Tensor or type(value) is torch.nn.Parameter:
        return ""
    if type(value) in (tuple, list):
        return next((u for u in (_unsupported(v, depth + 1) for v in value) if u), "")
    if type(value) is dict:
        return next((u for u in (_unsupported(v, depth + 1) for v in [*value.keys(), *value.values()]) if u), "")
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def _error(err: BaseException) -> dict[str, str]:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return {"error": type(err).__name__, "msg": text[:200]}


def drive(spec_path: str) -> None:
    """Call the learner's functions on the grader's cases and save inputs and outputs together."""
    modules = _modules(_STATE["labchecks"])
    torch, Case, lc = modules["torch"], _Case, modules[_STATE["labchecks"]]
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    user_ns = _get_ipython().user_ns
    out_dir = Path(_STATE["io"]) / "out"
    out_dir.mkdir(exist_ok=True)
    for job in spec["jobs"]:
        fn = user_ns.get(job["target"])
        if not callable(fn):
            (out_dir / f"{job['check']}.missing").write_text(type(fn).__name__, encoding="utf-8")
            continue
        call = getattr(lc, job["call"]) if job["call"] else None
        cases = torch.load(job["cases"], weights_only=True)
        blobs: list[tuple[Path, bytes]] = []  # serialised at once, written after the last learner call
        stop = False
        for n, (label, args) in enumerate(cases):
            try:
                out = call(fn, Case(label, tuple(args))) if call else fn(*args)
                bad = _unsupported(out)
                record: dict[str, Any] = {"error": "unsupported", "msg": bad} if bad else {"args": args, "out": out}
            except KeyboardInterrupt as err:  # the grader's timeout (or the learner's raise): stop driving
                record, stop = _error(err), True
            except BaseException as err:  # noqa: BLE001 - the learner's error, one line per case
                record = _error(err)
            buf = io.BytesIO()
            try:
                torch.save(record, buf)
            except Exception as err:  # noqa: BLE001 - e.g. an object that cannot be pickled
                record = {"error": "unsaveable", "msg": f"{type(err).__name__}: {str(err)[:120]}"}
                buf = io.BytesIO()
                torch.save(record, buf)
            blobs.append((out_dir / f"{job['check']}-{n}.pt", buf.getvalue()))
            if "error" in record:
                break  # like the notebook's checks: the first error ends this check
        for path, blob in blobs:
            path.write_bytes(blob)
        if stop:
            break
    snapshot(spec["tag"])
