"""Runs inside the learner's kernel for the grader: call the learner's functions, then seal the answers.

The fork server imports this module before any learner code runs, and everything it relies on
(os, sys and torch functions) is bound here at import, so replacing a name later changes nothing.

A driver step (one per task, plus one for all hidden checks) gets its job spec, its cases and a
fresh token inside the cell's own code: no file the learner could rewrite first. It calls the
learner's function on each case and serialises the answer at once. Then it *seals*: it forks a
sealer, which holds a copy of the answers as they were at that instant, has no other thread, and
clears any trace or profile function. The sealer first stops every process of the submission
(``SIGSTOP``; in bwrap mode every process of the kernel's own uid, else the kernel's process tree),
then takes the tamper fingerprints, writes the sealed step under the fresh token (``O_EXCL``:
nothing planted counts) and exits. The grader reads the sealed step while everything of the
submission is still stopped, checks that it is, and only then lets the kernel go on.
"""

from __future__ import annotations

import base64
import builtins
import gc
import hashlib
import io
import json
import os
import pickle
import signal
import sys
import threading
import types
from pathlib import Path
from typing import Any

from IPython import get_ipython as _get_ipython

from torchcontracts.checks import Case as _Case

from torchcontracts.grading import tripwire, watch
from torchcontracts.grading.freeze import freeze
from torchcontracts.grading.protocol import (
    BASELINE,
    ERR_TOO_LARGE,
    ERR_UNSAVEABLE,
    ERR_UNSUPPORTED,
    GUARD_LOG,
    MAX_RECORD_BYTES,
    NOTE_HOOK,
    NOTE_RECORDS,
    NOTE_SIGNAL,
    NOTE_THREADS,
    TOO_LARGE_BLOB,
    TRIPWIRE,
    case_file,
    missing_file,
    pack_sealed,
    sealed_name,
)

try:  # bound at import, in the fork server
    import torch.serialization as _serialization

    _REGISTRY_AT_IMPORT = list(_serialization._package_registry)
except (ImportError, AttributeError):  # pragma: no cover - a torch without the registry
    _REGISTRY_AT_IMPORT = []

__all__ = ["drive", "seal", "start"]

_STATE: dict[str, Any] = {}
_PLAIN = (bool, int, float, complex, str, bytes, type(None))
# bound at import, before any learner code
_fork, _exit, _waitpid = os.fork, os._exit, os.waitpid
_open, _write, _close, _rename = os.open, os.write, os.close, os.rename
_gettrace, _getprofile, _settrace, _setprofile, _frames = (
    sys.gettrace,
    sys.getprofile,
    sys.settrace,
    sys.setprofile,
    sys._current_frames,
)
_gc_disable, _gc_callbacks = gc.disable, gc.callbacks
_isinstance, _type, _str, _len, _BytesIO, _b64decode = isinstance, type, str, len, io.BytesIO, base64.b64decode
_issubclass, _sha256 = issubclass, hashlib.sha256
_getsignal, _getitimer = signal.getsignal, signal.getitimer
_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP) and s < 65)
_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
_get_ident = threading.get_ident


def start(io_dir: str, labchecks: str, threads: int, forbidden: str, uid_isolated: bool) -> None:
    """The first cell of a grading kernel: import what the checks bind, then take the baseline."""
    import importlib

    import torch
    import torch.serialization

    torch.set_num_threads(max(1, threads))
    watch.preload()
    importlib.import_module(labchecks)  # it binds its references before any learner code runs
    modules = [n for n in watch._watched_modules(labchecks)]
    import threading

    known = {type(t) for t in threading.enumerate()}
    # library threads that start lazily and only ever run their library's code: tqdm's monitor (first bar),
    # pyzmq's garbage collector (first large output)
    for module, name in (("tqdm._monitor", "TMonitor"), ("zmq.utils.garbage", "GarbageCollectorThread")):
        try:
            known.add(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    _STATE.update(
        io=io_dir,
        labchecks=labchecks,
        modules=modules,
        uid_isolated=uid_isolated,
        thread_classes=known - {threading.Thread},
        signals=_signal_state(),
        threads=set(_frames()),
        torch=torch,
        lc=sys.modules[labchecks],
    )
    if forbidden:  # the sealer checks that the hook's busy set holds no thread that is not inside a hook call
        _STATE["tripwire"], _STATE["busy"] = tripwire.install(
            forbidden, os.open(str(Path(io_dir) / GUARD_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        )
    base = watch.fingerprints(_watched(), keep=True)
    (Path(io_dir) / BASELINE).write_text(json.dumps(base), encoding="utf-8")


def _watched() -> dict[str, Any]:
    """The watch list, plus the tripwire itself: emptying its closure is tampering too."""
    objs = watch.watched_objects(_STATE["labchecks"], _STATE["modules"])
    if "tripwire" in _STATE:
        objs[TRIPWIRE] = _STATE["tripwire"]
    return objs


def _unsupported(value: Any, depth: int = 0) -> str:
    """Name the first value the grader cannot load safely, or '' when all of it is plain data."""
    torch = _STATE["torch"]
    if depth > 20:
        return "a structure nested too deeply"
    if _isinstance(value, _PLAIN) and _type(value) in _PLAIN or _type(value) in (torch.dtype, torch.device, torch.Size):
        return ""
    if _type(value) is torch.Tensor or _type(value) is torch.nn.Parameter:
        return ""
    if _type(value) in (tuple, list):
        return next((u for u in (_unsupported(v, depth + 1) for v in value) if u), "")
    if _type(value) is dict:
        return next((u for u in (_unsupported(v, depth + 1) for v in [*value.keys(), *value.values()]) if u), "")
    return f"a {_type(value).__module__}.{_type(value).__qualname__}"


_BUILTIN_ERRORS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)


def _storage_bytes(value: Any, depth: int = 0) -> int:
    """Bytes of the storages an answer holds (plain data only: ``_unsupported`` ran first)."""
    torch = _STATE["torch"]
    if _type(value) in (torch.Tensor, torch.nn.Parameter):
        return value.untyped_storage().nbytes()
    if _type(value) in (tuple, list) and depth < 20:
        return sum(_storage_bytes(v, depth + 1) for v in value)
    if _type(value) is dict and depth < 20:
        return sum(_storage_bytes(v, depth + 1) for v in value.values())
    return 0


def _error(err: BaseException) -> dict[str, str]:
    text = _str(err).strip().splitlines()[0] if _str(err).strip() else ""
    name = _type(err).__name__
    known = name in _BUILTIN_ERRORS and _type(err).__module__ == "builtins"
    return {
        "error": name[:80] if name.isidentifier() else "an exception",
        "msg": text[:200],
        "builtin": "1" if known else "",
    }


class _Pickler(pickle.Pickler):
    """torch.save's pickler, without ``copyreg.dispatch_table`` (a learner could register a reducer there)."""

    dispatch_table: dict[Any, Any] = {}


_PICKLE = types.SimpleNamespace(
    Pickler=_Pickler,
    Unpickler=pickle.Unpickler,
    HIGHEST_PROTOCOL=pickle.HIGHEST_PROTOCOL,
    load=pickle.load,
    dump=pickle.dump,
    loads=pickle.loads,
    dumps=pickle.dumps,
    __name__="pickle",
)
_REGISTRY: list[Any] = list(_REGISTRY_AT_IMPORT)  # torch's storage taggers as the fork server found them
_gc_enable, _gc_isenabled = gc.enable, gc.isenabled


def _save(record: dict[str, Any]) -> bytes:
    """``torch.save`` to bytes with the private pickler, torch's own taggers, and no garbage collection
    (so no gc callback of the learner's runs while the answer is being written)."""
    import torch.serialization as serialization

    buf, was, registry = _BytesIO(), _gc_isenabled(), serialization._package_registry
    _gc_disable()
    serialization._package_registry = _REGISTRY
    try:
        _STATE["torch"].save(record, buf, pickle_module=_PICKLE)
    finally:
        serialization._package_registry = registry
        if was:
            _gc_enable()
    return buf.getvalue()


def _hooked() -> bool:
    return _gettrace() is not None or _getprofile() is not None


def drive(spec: dict[str, Any]) -> None:
    """Call the learner's functions on the grader's cases, serialise each answer at once, then seal."""
    torch, lc = _STATE["torch"], _STATE["lc"]
    notes: list[str] = [NOTE_HOOK] if _hooked() else []
    user_ns = _get_ipython().user_ns
    blobs: list[tuple[str, bytes]] = []
    # From a return to the next call or the seal no learner code runs: gc is off (no gc callback) and every object
    # the learner could have touched stays alive until sealed (no finalizer): no record changes after its return.
    gc_was_on, keep, chain = _gc_isenabled(), [], b""  # chain: a digest of the records so far, in a local
    for job in spec["jobs"]:
        fn = user_ns.get(job["target"])
        if not callable(fn):
            blobs.append((missing_file(job["check"]), b""))
            chain = _link(chain, blobs[-1])
            continue
        call = getattr(lc, job["call"]) if job["call"] else None
        cases = torch.load(_BytesIO(_b64decode(job["cases"])), weights_only=True)
        keep.append(cases)
        stop = False
        for n, (label, args) in enumerate(cases):
            if gc_was_on:
                _gc_enable()  # the learner's call runs with gc as the learner left it
            try:
                out = call(fn, _Case(label, tuple(args))) if call else fn(*args)
                _gc_disable()
                keep.append(out)
                if _hooked():
                    notes.append(NOTE_HOOK)
                bad = _unsupported(out)
                record: dict[str, Any] = {"error": ERR_UNSUPPORTED, "msg": bad} if bad else {"args": args, "out": out}
                if not bad and _storage_bytes(out) > MAX_RECORD_BYTES:
                    record = {"error": ERR_TOO_LARGE, "msg": ""}  # not even serialised: it could only be refused
            except BaseException as err:  # noqa: BLE001 - the learner's error, one line per case
                _gc_disable()
                keep.append(err)  # a KeyboardInterrupt (the grader's timeout, or the learner's raise) stops driving
                record, stop = _error(err), _issubclass(_type(err), KeyboardInterrupt)
            try:
                blob = _save(record)
            except Exception as err:  # noqa: BLE001 - e.g. an object that cannot be pickled
                record = {"error": ERR_UNSAVEABLE, "msg": f"{type(err).__name__}: {str(err)[:120]}"}
                blob = _save(record)
            if _len(blob) > MAX_RECORD_BYTES:
                blob = TOO_LARGE_BLOB
            blobs.append((case_file(job["check"], n), blob))
            chain = _link(chain, blobs[-1])
            if "error" in record:
                break  # like the notebook's checks: the first error ends this check
        if stop:
            break
    _gc_disable()
    seal(spec["token"], blobs, notes, chain)
    if gc_was_on:
        _gc_enable()
    del keep[:]  # sealed: the learner's finalizers may run now


def _learner_threads() -> int:
    """Python threads started since the baseline and still alive, except instances of library thread classes
    (by class identity, so a subclass or a thread under a library's file name still counts)."""
    import threading

    exempt = _STATE["thread_classes"]
    kinds = {t.ident: type(t) for t in threading.enumerate()}
    return _len([i for i in _frames() if i not in _STATE["threads"] and kinds.get(i) not in exempt])


def _signal_state() -> tuple[Any, ...]:
    """Python-level signal handlers and interval timers: a handler can run between the driver's own bytecodes."""
    handlers = []
    for sig in _SIGNALS:
        try:
            handlers.append(_getsignal(sig))
        except (ValueError, OSError):
            handlers.append(None)
    timers = []
    for which in _TIMERS:
        timers.append(_getitimer(which) != (0.0, 0.0))
    return (*handlers, *timers)


def _link(chain: bytes, record: tuple[str, bytes]) -> bytes:
    return _sha256(chain + record[0].encode() + b"\0" + record[1]).digest()


def seal(token: str, blobs: list[tuple[str, bytes]], notes: list[str], chain: bytes | None = None) -> None:
    """Fork the sealer, which freezes the submission and writes the step; wait for it. ``chain`` (the digest the
    driver kept as it took each record) must match the records: an added, changed or dropped one is tampering."""
    if _hooked():
        notes.append(NOTE_HOOK)
    extra = _learner_threads()
    if extra:
        notes.append(f"{NOTE_THREADS}{extra}")
    if _signal_state() != _STATE["signals"]:
        notes.append(NOTE_SIGNAL)
    live, sealing = set(_frames()), _get_ident()
    pid = _fork()
    if pid == 0:
        code = 1
        try:
            _settrace(None)
            _setprofile(None)
            _gc_disable()
            del _gc_callbacks[:]
            freeze(_STATE["uid_isolated"])
            snap = watch.fingerprints(_watched())
            if chain is not None:
                found = b""
                for record in blobs:
                    found = _link(found, record)
                if found != chain:
                    notes.append(NOTE_RECORDS)
            if _STATE.get("busy") and (_STATE["busy"] - live or sealing in _STATE["busy"]):
                snap[TRIPWIRE] = "disabled"  # a thread marked as inside a hook that is not
            data = pack_sealed({"notes": notes, "snapshot": snap}, blobs)
            final = os.path.join(_STATE["io"], sealed_name(token))
            part = final + ".part"
            fd = _open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            view = memoryview(data)
            while view:
                view = view[_write(fd, view) :]
            _close(fd)
            _rename(part, final)
            code = 0
        finally:
            _exit(code)
    while True:  # this kernel is stopped meanwhile; the grader resumes it after reading the sealed step
        try:
            _waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue
