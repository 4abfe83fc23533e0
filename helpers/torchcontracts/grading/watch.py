"""Tamper detection inside the learner's kernel: fingerprints of the code the grader's checks rely on.

The watch list is built from what is loaded, not by hand: every ``torchcontracts`` module in
``sys.modules`` when grading starts (so a lab's helpers, such as ``torchcontracts.lessons.l03_memory.memory``, are
watched as soon as its checks import them), plus the torch modules the checks use and the builtins.
A fingerprint sees code, not just objects: a function whose ``__code__``, defaults or closure
cells were swapped keeps its ``id()`` but changes its fingerprint.

Nothing here decides a score upwards: the grader compares the fingerprints taken before any
learner code with those taken when each step is sealed, and a difference scores 0.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from torchcontracts.grading.protocol import MODULE_PREFIX

__all__ = ["TORCH_MODULES", "fingerprints", "preload", "watched_objects"]

TORCH_MODULES = (
    "torch",
    "torch.serialization",
    "torch.testing",
    "torch.nn",
    "torch.nn.functional",
    "torch.autograd",
    "torch.autograd.graph",
    "torch.utils.checkpoint",
    "torch.utils._pytree",
    "torch.export",  # lab 06's drivers export and save the learner's model with these
    "torch.export.exported_program",
)
# what torch.save, the driver and the sealer run on: replacing any of these could forge a sealed step
STDLIB_MODULES = (
    "pickle",
    "_pickle",
    "copyreg",
    "io",
    "_io",
    "zipfile",
    "json",
    "json.encoder",
    "struct",
    "base64",
    "os",
    "posix",
    "gc",
    "signal",
    "threading",
    "_thread",
    "inspect",
    "types",
)
_IPYTHON_BUILTINS = {
    "_",
    "__",
    "___",
    "exit",
    "quit",
    "get_ipython",
    "display",
    "help",
    "copyright",
    "credits",
    "license",
    "__IPYTHON__",
    "__builtins__",
    "input",
    "open",
}
_LAZY_REBINDS = {"torch.Storage"}  # torch.set_default_dtype rebinds it: not tampering
_SKIP_ATTRS = {"__dict__", "__weakref__", "__doc__", "__annotations__", "__abstractmethods__", "_abc_impl"}
_KEEP: list[Any] = []  # objects seen at the baseline, kept alive so that their ids are never reused
# bound at import (in the fork server, before any learner code): a replaced builtin cannot blind the watch
_isinstance, _id, _vars, _dir, _getattr_static = isinstance, id, vars, dir, inspect.getattr_static
_callable, _getattr, _len, _list, _str, _fromkeys = callable, getattr, len, list, str, dict.fromkeys
_FunctionType, _ModuleType, _BuiltinType = types.FunctionType, types.ModuleType, types.BuiltinFunctionType
_modules = sys.modules


def preload() -> None:
    """Do up front what torch does lazily to its own namespace, so that it never reads as tampering:
    importing torch._dynamo rebinds ``torch.manual_seed``, and the first ``torch.compile`` wraps
    ``nn.Module.__init__``/``__setstate__``."""
    import importlib

    for name in TORCH_MODULES:
        importlib.import_module(name)
    try:
        import torch._dynamo.mutation_guard as guard

        guard.install_generation_tagging_init()
    except Exception:  # noqa: BLE001 - an older or newer torch: nothing to do up front
        pass


def _watched_modules(labchecks: str) -> dict[str, types.ModuleType]:
    names = [n for n in _list(_modules) if n == "torchcontracts" or n.startswith("torchcontracts.")]
    names += [*TORCH_MODULES, *STDLIB_MODULES, "builtins", "sys", labchecks]
    return {n: _modules[n] for n in _fromkeys(names) if _isinstance(_modules.get(n), _ModuleType)}


def watched_objects(labchecks: str, module_names: list[str] | None = None) -> dict[str, Any]:
    """The functions, classes and modules whose replacement counts as tampering, by dotted name.

    ``module_names`` fixes the modules to those of the baseline (a module the learner imports
    later is not the grader's concern, but swapping one out of ``sys.modules`` is).
    """
    import torch

    mods = _watched_modules(labchecks)
    if module_names is not None:
        mods = {n: _modules.get(n) for n in module_names}  # type: ignore[misc]
    classes: dict[str, type] = {
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "torch.UntypedStorage": torch.UntypedStorage,
        "torch.export.ExportedProgram": torch.export.ExportedProgram,
        "pickle.Pickler": _modules["pickle"].Pickler,
        "io.BytesIO": _modules["io"].BytesIO,
    }
    objs: dict[str, Any] = {}
    for mname, mod in mods.items():
        objs[f"{MODULE_PREFIX}{mname}]"] = mod
        if not _isinstance(mod, _ModuleType):
            continue
        for key, val in _list(_vars(mod).items()):
            if mname == "builtins" and key in _IPYTHON_BUILTINS:
                continue
            if mname == "sys" and not _isinstance(val, _BuiltinType):
                continue  # sys holds streams and hooks that IPython sets; its functions are what matters
            if (
                _isinstance(val, type)
                and _getattr(val, "__module__", "") == mname
                and mname.startswith("torchcontracts")
            ):
                classes[f"{mname}.{key}"] = val
            if (_callable(val) or _isinstance(val, _ModuleType)) and f"{mname}.{key}" not in _LAZY_REBINDS:
                objs[f"{mname}.{key}"] = val
    for cname, cls in classes.items():
        for key in _dir(cls):
            if key not in _SKIP_ATTRS:
                objs[f"{cname}.{key}"] = _getattr_static(cls, key, None)
    return objs


def _fingerprint(obj: Any) -> str:
    """The identity of an object and, for a function, of its code, defaults and closure contents."""
    inner = obj.__func__ if _isinstance(obj, (staticmethod, classmethod)) else obj
    parts = [_id(obj)]
    if _isinstance(inner, _FunctionType):
        parts += [_id(inner.__code__), _id(inner.__defaults__), _id(inner.__kwdefaults__)]
        for cell in inner.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                parts.append(0)
                continue
            parts.append(_id(content))
    elif _isinstance(inner, property):
        parts += [
            _id(f.__code__) if _isinstance(f, _FunctionType) else _id(f) for f in (inner.fget, inner.fset, inner.fdel)
        ]
    return ".".join(_list(_str(p) for p in parts))


def fingerprints(objs: dict[str, Any], *, keep: bool = False) -> dict[str, str]:
    """Fingerprint every watched object; ``keep`` holds them alive (the baseline)."""
    if keep:
        _KEEP.extend(objs.values())
        for obj in objs.values():
            if _isinstance(obj, _FunctionType):
                _KEEP.extend([obj.__code__, obj.__defaults__, obj.__kwdefaults__])
    return {name: _fingerprint(obj) for name, obj in objs.items()}
