"""Judge exported artefacts (``.pt2``, ``.onnx``, torchao ``state_dict`` bytes) without loading them here.

A lab 06 answer is a file's bytes: the learner's kernel turned its exported program, ONNX program or
quantized model into bytes the moment the function returned, and the driver sealed them like any
answer. Loading those bytes is where the danger is: ``torch.export.load`` unpickles payloads a
``.pt2`` marks ``use_pickle`` (with ``weights_only=False``), and an ONNX initializer can point its
external data at any path. So ``evaluate`` never loads an artefact in the grader's process. It writes
the bytes and the grader's own inputs into a fresh folder and runs ``artefact_runner`` there, in a
separate process with a timeout:

* with bubblewrap (wherever ``sandbox.bwrap_path()`` works, whatever ``--sandbox`` the kernels use): no
  network, its own pid namespace, a read-only system and Python, none of the course's ``solutions/`` or
  ``.git``, no grader file, and only its folder writable. As root, every job gets a uid of its own
  (from ``ARTEFACT_UID``), and jobs are forked from one sandboxed fork server that imported torch,
  onnxruntime and torchao once (about 0.1-1 s a job instead of a fresh interpreter's 2-5 s); the server
  kills whatever a job leaves running under its uid before the next one starts;
* without it (macOS, Windows, a container without user namespaces): a plain subprocess with the same
  limits, in an empty folder, with a clean environment. That is what a learner's notebook uses for its
  public checks on its own files; a grader there is in ``none`` mode anyway (README, "The sandbox").

The runner reports outputs as ``.npy`` (read here with ``allow_pickle=False``) and a small JSON, both
capped. The caller (a lab's judge) compares the outputs with its own reference model: an artefact is
right only if it computes the grader's function on inputs it had never seen.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import dataclasses
import hashlib
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from torchcontracts.grading.forkserver import clean_env
from torchcontracts.grading.sandbox import bwrap_argv, bwrap_path

__all__ = ["ARTEFACT_UID", "Evaluation", "evaluate", "isolation", "judging_deadline"]

ARTEFACT_UID = 180_000  # job uids start here, outside the kernels' range (sandbox.kernel_uid)
MAX_ARTEFACT_BYTES = 64 * 2**20
MAX_RESULT_BYTES = 1 * 2**20
MAX_OUTPUT_BYTES = 64 * 2**20  # all outputs of one evaluation together
MAX_OUTPUTS = 64  # per input
KINDS = ("pt2", "onnx", "state_dict")
RUNNER = "torchcontracts.grading.artefact_runner"
STARTUP_S = 120.0  # the fork server imports torch, onnxruntime and torchao once
_CACHE: dict[str, "Evaluation"] = {}
_LOCK = threading.Lock()
_SCRATCH: list[Path] = []
_SERVERS: list["_Server"] = []
_JOBS = itertools.count()
_COURSE = Path(__file__).resolve().parents[3]  # helpers/torchcontracts/grading -> the course root
MIN_JOB_S = 2.0  # less time than this left under the submission's deadline: the artefact is not run
# The submission's deadline (time.monotonic()), set by the grader around judging: every artefact job of that
# submission gets at most what is left of its --timeout, so a slow artefact cannot stretch a submission past it.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("artefact_deadline", default=None)


@contextlib.contextmanager
def judging_deadline(deadline: float | None) -> Iterator[None]:
    """Cap every ``evaluate`` inside the block at ``deadline`` (``time.monotonic()``; per thread)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What one artefact did on the grader's inputs: outputs per input, a one-line error per input,
    what the runner found in the file, and ``problem`` when it could not be run at all."""

    outputs: tuple[tuple[torch.Tensor, ...], ...]
    errors: tuple[str, ...]
    info: dict[str, Any]
    problem: str
    isolation: str  # "bwrap" or "subprocess"


def isolation() -> str:
    """How artefacts are isolated on this machine: "bwrap" where bubblewrap works, else "subprocess"."""
    return "bwrap" if bwrap_path() is not None else "subprocess"


def _key(kind: str, blob: bytes, inputs: Sequence[torch.Tensor], arch: Any) -> str:
    h = hashlib.sha256(kind.encode() + json.dumps(arch, sort_keys=True).encode() + blob)
    for x in inputs:
        h.update(str((x.dtype, tuple(x.shape))).encode() + x.contiguous().numpy().tobytes())
    return h.hexdigest()


def _failed(problem: str, how: str) -> Evaluation:
    return Evaluation((), (), {}, problem, how)


def evaluate(
    kind: str,
    blob: Any,
    inputs: Sequence[torch.Tensor],
    *,
    arch: dict[str, Any] | None = None,
    timeout: float = 90.0,
    mem_mb: int = 4096,
) -> Evaluation:
    """Run an artefact on ``inputs`` in a separate, isolated process; never raises on a bad artefact."""
    how = isolation()
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    if not isinstance(blob, (bytes, bytearray)) or not blob:
        return _failed("no file bytes to judge", how)
    if len(blob) > MAX_ARTEFACT_BYTES:
        return _failed(f"the file is too large to judge (over {MAX_ARTEFACT_BYTES // 2**20} MB)", how)
    blob = bytes(blob)
    key = _key(kind, blob, inputs, arch)
    if key in _CACHE:
        return _CACHE[key]
    deadline = _DEADLINE.get()
    left = timeout if deadline is None else deadline - time.monotonic()
    if deadline is not None and left < MIN_JOB_S:
        return _failed("not run: the submission's time limit (--timeout) ran out before this file was judged", how)
    found = _run(kind, blob, inputs, arch, min(timeout, left), mem_mb, how)
    if left < timeout and found.problem.startswith("loading and running it did not finish"):
        return found  # cut short by the deadline: not what this file does with its full time, so not cached
    if len(_CACHE) > 32:
        _CACHE.clear()
    _CACHE[key] = found
    return found


def _run(
    kind: str, blob: bytes, inputs: Sequence[torch.Tensor], arch: Any, timeout: float, mem_mb: int, how: str
) -> Evaluation:
    served = how == "bwrap" and os.geteuid() == 0 and sys.platform == "linux"  # a uid per job: see the runner
    root = _server_scratch() if served else Path(tempfile.gettempdir())
    work = Path(tempfile.mkdtemp(prefix="tc-artefact-", dir=root))
    try:
        names = []
        for n, x in enumerate(inputs):
            np.save(work / f"in-{n}.npy", x.detach().contiguous().numpy(), allow_pickle=False)
            names.append(f"in-{n}.npy")
        (work / "artefact.bin").write_bytes(blob)
        (work / "job.json").write_text(
            json.dumps({"kind": kind, "artefact": "artefact.bin", "inputs": names, "arch": arch}), encoding="utf-8"
        )
        for path in work.iterdir():
            path.chmod(0o644)
        uid = (
            (ARTEFACT_UID + next(_JOBS) % 10_000)
            if served
            else (ARTEFACT_UID if how == "bwrap" and os.geteuid() == 0 else -1)
        )
        if uid >= 0:
            os.chown(work, uid, uid)
        work.chmod(0o700)
        timed_out, code, err = _served(work, uid, mem_mb, timeout) if served else (None, None, b"")
        if timed_out is None:  # no server here (or it failed): one process for this job
            timed_out, code, err = _one_shot(work, uid, mem_mb, timeout, how)
        if timed_out:
            return _failed(f"loading and running it did not finish within {timeout:.3g} s", how)
        result_path = work / "result.json"
        if not result_path.is_file() or result_path.is_symlink() or result_path.stat().st_size > MAX_RESULT_BYTES:
            return _failed(_died(code, err), how)
        try:
            result = json.loads(result_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return _failed("its loader wrote no readable result (did the file take it over?)", how)
        return _collect(result, work, len(inputs), how)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _one_shot(work: Path, uid: int, mem_mb: int, timeout: float, how: str) -> tuple[bool, int | None, bytes]:
    """Run one job in a process of its own (in bubblewrap when ``how`` says so): (timed out, exit code, stderr)."""
    cmd = [sys.executable, "-I", "-m", RUNNER, "run", str(work), str(uid), str(mem_mb * 2**20)]
    if how == "bwrap":
        cmd = [*bwrap_argv(work, _COURSE, drop_uid=uid >= 0), *cmd]
    proc = subprocess.Popen(
        cmd,
        cwd=str(work),
        env=_env(work),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return True, None, b""
    return False, proc.returncode, err or b""


def _env(work: Path) -> dict[str, str]:
    return clean_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HOME=str(work), TMPDIR=str(work))


class _Server:
    """The runner's fork server in one bubblewrap sandbox: torch, onnxruntime and torchao imported once."""

    def __init__(self, scratch: Path) -> None:
        cmd = [*bwrap_argv(scratch, _COURSE, drop_uid=True), sys.executable, "-I", "-m", RUNNER, "serve"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=str(scratch),
            env=_env(scratch),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.ready = self._line(STARTUP_S) == "ready"

    def _line(self, timeout: float) -> str | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline().decode("utf-8", "replace").strip() or None

    def job(self, work: Path, uid: int, mem_mb: int, timeout: float) -> tuple[bool, int | None, bytes] | None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(
                (json.dumps({"dir": str(work), "uid": uid, "mem": mem_mb * 2**20, "timeout": timeout}) + "\n").encode()
            )
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._line(timeout + 30)
        try:
            answer = json.loads(line) if line else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            return None
        return bool(answer.get("timeout")), answer.get("code"), b""

    def close(self) -> None:
        _kill(self.proc)


def _server_scratch() -> Path:
    with _LOCK:
        if not _SCRATCH:
            path = Path(tempfile.mkdtemp(prefix=f"tc-artefacts-{os.getpid()}-"))
            path.chmod(0o711)  # each job's uid may pass through to its own folder (0700) only
            _SCRATCH.append(path)
            atexit.register(_shutdown)
        return _SCRATCH[0]


def _shutdown() -> None:
    for server in _SERVERS:
        server.close()
    for path in _SCRATCH:
        shutil.rmtree(path, ignore_errors=True)


def _served(work: Path, uid: int, mem_mb: int, timeout: float) -> tuple[bool | None, int | None, bytes]:
    """The job through the fork server, started on first use; (None, None, b"") when there is none."""
    with _LOCK:
        for attempt in range(2):
            if not _SERVERS or _SERVERS[0].proc.poll() is not None:
                _SERVERS[:] = [_Server(_SCRATCH[0])]
            server = _SERVERS[0]
            answer = server.job(work, uid, mem_mb, timeout) if server.ready else None
            if answer is not None:
                return answer
            server.close()  # a server that died or stopped answering is not reused
            _SERVERS.clear()
    return None, None, b""


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _died(code: int | None, err: bytes) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its loader process died ({name}) while loading or running it"
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err else []
    if last and "bwrap" in last[0]:
        return f"the artefact sandbox could not start: {last[0][:160]}"
    return "its loader process stopped without a result (the file may have ended it)"


def _text(value: Any, limit: int = 240) -> str:
    return " ".join(str(value).split())[:limit]


def _collect(result: Any, work: Path, n_inputs: int, how: str) -> Evaluation:
    """Read the runner's report and outputs with caps; anything out of format is a problem, not a crash."""
    if not isinstance(result, dict):
        return _failed("its loader wrote a result in the wrong format", how)
    info = result.get("info") if isinstance(result.get("info"), dict) else {}
    if result.get("error"):
        return Evaluation((), (), info, _text(result["error"]), how)
    counts, errors = result.get("outputs"), result.get("errors")
    if (
        not isinstance(counts, list)
        or not isinstance(errors, list)
        or len(counts) != n_inputs
        or len(errors) != n_inputs
        or not all(isinstance(c, int) and 0 <= c <= MAX_OUTPUTS for c in counts)
    ):
        return _failed("its loader wrote a result in the wrong format", how)
    outputs, total = [], 0
    for n, count in enumerate(counts):
        these = []
        for k in range(count):
            path = work / f"out-{n}-{k}.npy"
            if not path.is_file() or path.is_symlink():
                return _failed("an output file is missing", how)
            total += path.stat().st_size
            if total > MAX_OUTPUT_BYTES:
                return _failed(f"its outputs are too large (over {MAX_OUTPUT_BYTES // 2**20} MB)", how)
            try:
                arr = np.load(path, allow_pickle=False)
            except (ValueError, OSError):
                return _failed("an output file is not a plain array", how)
            if arr.dtype.kind not in "biuf":
                return _failed(f"an output has dtype {arr.dtype}, not a number type", how)
            these.append(torch.from_numpy(np.array(arr)))
        outputs.append(tuple(these))
    return Evaluation(tuple(outputs), tuple(_text(e) for e in errors), info, "", how)
