"""Run a function on every rank of a real gloo process group, forked from this process (lab 07, lesson 09).

``torchrun`` starts new interpreters; a notebook function cannot travel to them. The grader of
lab 07 calls the learner's per-rank function inside a sandboxed kernel (loopback network only,
seconds per submission), and lesson 09 wants a rank that crashes or hangs on demand. Both need a
group whose workers are *forks* of this process: they already hold torch and the function.

``run_ranks(fn, world_size, inputs)``:

* forks ``world_size`` workers; each joins one gloo group (a ``FileStore`` in a private folder,
  gloo over loopback, ``pg_timeout`` seconds per collective of ``fn``; joining the group may take the run's
  whole ``timeout``, as a busy machine can fork a sibling seconds late) and calls ``fn(rank, world_size, *args)``;
* sends each rank *its own* inputs only after every worker exists (``inputs`` may be a function,
  called then): no worker's memory holds another rank's share, so a rank cannot compute the
  global answer alone and must communicate;
* returns each rank's result as plain data (``torch.save`` bytes, loaded with ``weights_only=True``)
  and what it printed;
* ends a run in which a rank raises, dies or hangs with one builtin exception whose one-line
  message names the rank (``RuntimeError``, ``ChildProcessError``, ``TimeoutError``; a rank's
  ``NotImplementedError`` stays one, so a lab's TODO reads as a TODO), and kills and
  reaps every worker before it returns or raises. It changes no signal handler and leaves no thread.

``in_fork(fn, *args)`` runs one function in a single forked worker: where a lesson needs a ``backward()`` of its
own, so that the kernel never runs one (with a GPU and a CUDA build, a process's first backward stops every later
fork of it from running one: ``BAD_AUTOGRAD_FORK``).
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Sequence

__all__ = ["AUTOGRAD_FORK", "BAD_AUTOGRAD_FORK", "RankRun", "in_fork", "run_ranks"]

_HEADER = struct.Struct("!Q")
# torch's error in a fork of a process whose autograd engine started device threads. The engine decides at the
# process's first backward (engine.cpp: start_device_threads counts the devices of every registered non-CPU backend
# and, when there is one, calls track_bad_autograd_forks, a pthread_atfork handler that marks every later fork). With
# a GPU and a CUDA build any first backward does it; a CUDA build without a GPU does it when that first backward comes
# after any torch.compile (measured on 2.11.0+cu130 and 2.14.1+cu130); the CPU wheel never does.
AUTOGRAD_FORK = "Unable to handle autograd's threading in combination with fork-based multiprocessing"
BAD_AUTOGRAD_FORK = (
    "this kernel's first backward started autograd's device threads (with a GPU and a CUDA build any first "
    "backward does; on a CUDA build without a GPU, a first backward after any torch.compile does), and no fork of "
    "it can run backward any more: restart the kernel and run the cells from the top, with no backward() and no "
    "torch.compile in this kernel before this cell (run them in the ranks, or with in_fork) (pytorch wiki: "
    "Autograd and Fork)"
)
MAX_MESSAGE = 64 * 2**20  # bytes one rank may send back
GRACE = 1.0  # seconds to let the other ranks report once one has failed (the root cause may come second)


@dataclasses.dataclass
class RankRun:
    """What every rank returned and printed, in rank order, and the run's wall time."""

    results: list[Any]
    outputs: list[str]
    seconds: float


def _loopback() -> str:
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n in ("lo", "lo0")), names[0] if names else "lo")


def _send(sock: socket.socket, blob: bytes) -> None:
    sock.sendall(_HEADER.pack(len(blob)) + blob)


def _recv_all(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < _HEADER.size:
        chunk = sock.recv(_HEADER.size - len(head))
        if not chunk:
            raise EOFError("the parent closed the channel")
        head += chunk
    (n,) = _HEADER.unpack(head)
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(1 << 20, n - len(data)))
        if not chunk:
            raise EOFError("the parent closed the channel")
        data += chunk
    return bytes(data)


def _dumps(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(blob: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(blob), weights_only=True)


def _child(
    rank: int,
    world: int,
    mine: socket.socket,
    others: Sequence[socket.socket],
    fn: Callable[..., Any],
    folder: str,
    pg_timeout: float,
    join_timeout: float,
    backend: str,
) -> None:
    """A worker: join the group, run ``fn`` on this rank's inputs, send the result. Never returns."""
    code = 1
    printed = io.StringIO()
    log = os.path.join(folder, f"rank{rank}.log")
    try:
        for s in others:
            s.close()
        sys.stdout = sys.stderr = printed  # a forked kernel's streams belong to the parent's threads
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)  # C++ logs (gloo, c10d) too: into this rank's output, not the kernel's terminal
        os.dup2(fd, 2)
        os.close(fd)
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        args = _loads(_recv_all(mine))
        os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback())
        # Joining gets the run's whole budget, not pg_timeout: on a busy machine a sibling can be forked seconds
        # late, and that is no hang. The collectives of fn get pg_timeout (set once every pair is connected).
        set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
        dist.init_process_group(
            backend,
            store=dist.FileStore(os.path.join(folder, "store"), world),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=max(pg_timeout, join_timeout) if set_timeout else pg_timeout),
        )
        dist.barrier()  # every pair connected before fn runs (a fast rank must not leave mid-handshake)
        if set_timeout:
            set_timeout(datetime.timedelta(seconds=pg_timeout))
        result = fn(rank, world, *args)
        dist.barrier()  # and every rank done before any leaves (its peers may still be reading from it)
        blob = _dumps({"result": result, "stdout": _printed(printed, log)})
        if len(blob) > MAX_MESSAGE:
            raise ValueError(f"the result is {len(blob) // 2**20} MB: return less (at most {MAX_MESSAGE // 2**20} MB)")
        _send(mine, blob)
        code = 0
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the result is already sent
            pass
    except BaseException as err:  # noqa: BLE001 - reported to the parent in one line
        text = str(err).strip().splitlines()
        first = re.sub(r"^\[[^\]]*\]\s*", "", text[0]) if text else ""  # gloo's "[.../unbound_buffer.cc:78] "
        try:
            _send(mine, _dumps({"error": type(err).__name__, "msg": first[:300], "stdout": _printed(printed, log)}))
        except BaseException:  # noqa: BLE001 - the parent will see a dead rank instead
            pass
    finally:
        os._exit(code)


def _printed(printed: io.StringIO, log: str) -> str:
    """What this rank printed (Python's prints, then its C++ logs), the last 8000 characters."""
    try:
        with open(log, errors="replace") as fh:
            native = fh.read()
    except OSError:
        native = ""
    return (printed.getvalue() + native)[-8000:]


def _status(pid: int, wait: float = 0.5) -> str:
    """How a worker ended ('exit code 3', 'killed by SIGSEGV'), waiting briefly for it."""
    end = time.monotonic() + wait
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return "it is gone"
        if got:
            if os.WIFSIGNALED(status):
                return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
            return f"exit code {os.WEXITSTATUS(status)}"
        if time.monotonic() > end:
            return "it closed its channel"
        time.sleep(0.01)


_ECHOES = ("Timed out", "timed out", "Connection closed by peer", "Connection reset", "Broken pipe", "gloo")


def _echo(state: dict[str, Any]) -> bool:
    """True for an error a rank gets *because* another rank failed (a collective timed out or lost its peer)."""
    return state["error"].startswith("Dist") or any(word in state["msg"] for word in _ECHOES)


def _verdict(states: dict[int, dict[str, Any]], world: int, timeout: float, pg_timeout: float) -> BaseException:
    """The one exception that says best what went wrong (the root cause, not its echo in other ranks)."""
    died = [r for r, s in states.items() if s["kind"] == "died"]
    if died:
        r = died[0]
        return ChildProcessError(f"rank {r} died ({states[r]['how']}) before returning its result")
    errors = {r: s for r, s in states.items() if s["kind"] == "error"}
    own = [r for r, s in errors.items() if not _echo(s)]
    if own:
        r = own[0]
        if errors[r]["error"] == "NotImplementedError":  # a TODO: let callers tell it from a bug
            return NotImplementedError(f"rank {r}: {errors[r]['msg'] or 'not implemented yet'}")
        if AUTOGRAD_FORK in errors[r]["msg"]:
            return RuntimeError(f"rank {r} cannot run backward: {BAD_AUTOGRAD_FORK}")
        return RuntimeError(f"rank {r} raised {errors[r]['error']}: {errors[r]['msg']}")
    missing = [r for r in range(world) if r not in states]
    names = ", ".join(map(str, missing))
    if errors and missing:
        r = next(iter(errors))
        return TimeoutError(
            f"rank {names} never reached the collective that rank {r} waited in "
            f"(process group timeout {pg_timeout:g} s): {errors[r]['msg'][:160]}"
        )
    if errors:
        r = next(iter(errors))
        return RuntimeError(f"rank {r} raised {errors[r]['error']}: {errors[r]['msg']}")
    return TimeoutError(
        f"rank {names} did not finish within {timeout:g} s (a hang: a collective or a loop "
        "that never ends); the workers were killed"
    )


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    inputs: Sequence[Sequence[Any]] | Callable[[], Sequence[Sequence[Any]]] | None = None,
    *,
    timeout: float = 20.0,
    pg_timeout: float = 5.0,
    backend: str = "gloo",
) -> RankRun:
    """Call ``fn(rank, world_size, *inputs[rank])`` on every rank of a fresh forked gloo group.

    ``inputs``: one tuple of plain data per rank, or a function returning them (called after the
    workers are forked), or None for no extra arguments. ``timeout`` bounds the whole run and
    ``pg_timeout`` each collective. Raises one builtin exception, with a one-line reason, when a
    rank fails; no worker outlives the call either way.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("run_ranks forks its workers: it needs Linux or macOS (on Windows, use torchrun)")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    t0 = time.monotonic()
    folder = tempfile.mkdtemp(prefix="tc-ranks-")
    pairs = [socket.socketpair() for _ in range(world_size)]
    pids: list[int] = []
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        for rank in range(world_size):
            with warnings.catch_warnings():  # Python 3.12+ warns that forking a threaded process may deadlock
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                others = [s for i, p in enumerate(pairs) for j, s in enumerate(p) if (i, j) != (rank, 1)]
                _child(rank, world_size, pairs[rank][1], others, fn, folder, pg_timeout, timeout, backend)
            pids.append(pid)
        for _, child_end in pairs:
            child_end.close()
        per_rank = inputs() if callable(inputs) else inputs
        per_rank = [()] * world_size if per_rank is None else [tuple(a) for a in per_rank]
        if len(per_rank) != world_size:
            raise ValueError(f"inputs has {len(per_rank)} entries for {world_size} ranks")
        for rank, (parent_end, _) in enumerate(pairs):
            _send(parent_end, _dumps(per_rank[rank]))
        return _collect(pairs, pids, world_size, t0, timeout, pg_timeout)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        for a, b in pairs:
            a.close()
            b.close()
        shutil.rmtree(folder, ignore_errors=True)


def _collect(
    pairs: list[tuple[socket.socket, socket.socket]],
    pids: list[int],
    world: int,
    t0: float,
    timeout: float,
    pg_timeout: float,
) -> RankRun:
    """Read every rank's message until all are in, one has failed (plus a grace period), or time is up."""
    bufs = {r: bytearray() for r in range(world)}
    states: dict[int, dict[str, Any]] = {}
    deadline, failed_at = t0 + timeout, None
    open_socks = {pairs[r][0].fileno(): r for r in range(world)}
    while open_socks and len(states) < world:
        now = time.monotonic()
        end = deadline if failed_at is None else min(deadline, failed_at + GRACE)
        if now >= end:
            break
        ready, _, _ = select.select(list(open_socks), [], [], end - now)
        for fd in ready:
            r = open_socks[fd]
            chunk = pairs[r][0].recv(1 << 20)
            if chunk:
                bufs[r] += chunk
                if len(bufs[r]) > MAX_MESSAGE + _HEADER.size:
                    states[r] = {"kind": "error", "error": "ValueError", "msg": "its result is too large to send back"}
                    del open_socks[fd]
                continue
            del open_socks[fd]
            states[r] = _message(bytes(bufs[r]), pids[r])
            if states[r]["kind"] != "ok" and failed_at is None:
                failed_at = time.monotonic()
    if len(states) == world and all(s["kind"] == "ok" for s in states.values()):
        return RankRun(
            [states[r]["result"] for r in range(world)],
            [states[r]["stdout"] for r in range(world)],
            time.monotonic() - t0,
        )
    raise _verdict(states, world, timeout, pg_timeout)


def _message(blob: bytes, pid: int) -> dict[str, Any]:
    """A rank's framed message as a state: ok (with its result), error, or died."""
    if len(blob) < _HEADER.size or _HEADER.unpack(blob[: _HEADER.size])[0] != len(blob) - _HEADER.size:
        return {"kind": "died", "how": _status(pid)}
    try:
        msg = _loads(blob[_HEADER.size :])
    except Exception:  # noqa: BLE001 - not plain data
        return {
            "kind": "error",
            "error": "TypeError",
            "msg": "it returned something that is not plain data: return tensors, numbers, lists, dicts or strings",
        }
    if not isinstance(msg, dict):
        return {"kind": "error", "error": "TypeError", "msg": "its message is not in the runner's format"}
    if "error" in msg:
        return {
            "kind": "error",
            "error": str(msg["error"])[:80],
            "msg": str(msg.get("msg", ""))[:300],
            "stdout": str(msg.get("stdout", "")),
        }
    return {"kind": "ok", "result": msg.get("result"), "stdout": str(msg.get("stdout", ""))}


def in_fork(fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """``fn(*args)`` in one forked worker (a group of one), its result returned as plain data.

    For work this process must not do itself, above all a ``backward()``: with a GPU and a CUDA build, a process's
    first backward stops every later fork of it (``run_ranks``'s ranks) from running one (``BAD_AUTOGRAD_FORK``).
    """
    return run_ranks(lambda rank, world, *a: fn(*a), 1, [args], timeout=timeout, pg_timeout=timeout).results[0]
