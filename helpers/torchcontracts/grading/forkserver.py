"""The grader's side of the kernel fork server (its other side is ``boot.serve``), and its scratch folder.

One fork server per grader process and sandbox mode: it imports torch once, and in bwrap mode it
runs inside the sandbox, so every kernel it forks is inside too. The scratch folder is made
before the server starts (bwrap binds it), holds one folder per kernel, and is removed when the
grader exits, however it exits short of SIGKILL (then the sandbox still dies with it).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from torchcontracts.grading.sandbox import bwrap_argv

__all__ = ["SAFE_ENV", "ForkedKernel", "Zygote", "clean_env", "scratch_root", "zygote"]

# The only variables of the grader's environment that reach a kernel (or the fork server).
SANDBOX_USER = "learner"  # the login name sandboxed processes see (their uids have no passwd entry)
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def clean_env(**extra: str) -> dict[str, str]:
    """A whitelisted environment: nothing secret of the grader's can leak into learner code."""
    env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
    # A sandboxed kernel or artefact job runs as a uid with no passwd entry. `getpass.getuser()` (which torch calls
    # for its cache folders, e.g. in torch.export.load on 2.11) reads these before it asks pwd, which would raise
    # KeyError('getpwuid(): uid not found') and fail a correct answer.
    env.update(USER=SANDBOX_USER, LOGNAME=SANDBOX_USER)
    env.update(extra)
    return env


_SCRATCH: list[Path] = []
_LOCK = threading.Lock()  # the fork servers
_SCRATCH_LOCK = threading.Lock()


def _remove_scratch() -> None:
    if os.environ.get("TORCHCONTRACTS_KEEP_SCRATCH"):  # set it to read the kernels' logs
        return
    for path in _SCRATCH:
        shutil.rmtree(path, ignore_errors=True)


def scratch_root() -> Path:
    """This grader process's scratch folder (made once, removed at exit)."""
    with _SCRATCH_LOCK:
        if not _SCRATCH:
            path = Path(tempfile.mkdtemp(prefix=f"tc-grade-{os.getpid()}-"))
            path.chmod(0o711)  # kernels of their own uid may pass through to their own folder
            _SCRATCH.append(path)
            atexit.register(_remove_scratch)
        return _SCRATCH[0]


class Zygote:
    """A fork server: ``spawn`` a kernel, ``signal`` one, and check/resume/kill all of one submission's processes."""

    def __init__(self, sandbox: str, course: Path, scratch: Path | None = None) -> None:
        """``scratch``: the one writable folder its sandbox binds (default: this process's scratch folder)."""
        self.sandbox = sandbox
        self.uid_isolated = sandbox == "bwrap" and os.geteuid() == 0
        scratch = scratch or scratch_root()
        cmd = [sys.executable, "-m", "torchcontracts.grading.boot", "serve"]
        if sandbox == "bwrap":
            cmd = [*bwrap_argv(scratch, course, drop_uid=self.uid_isolated, own_places=self.uid_isolated), *cmd]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=clean_env(),
            cwd=str(scratch),
        )
        self.exits: dict[int, int] = {}
        self._answers: dict[int, dict[str, Any]] = {}
        self._next = 0
        self._ready = False
        self._cond = threading.Condition()
        self._write = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                if line.strip() == b"ready":
                    self._ready = True
                else:
                    msg = json.loads(line)
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.exits[msg["exit"]] = msg["code"]
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Wait until the server has imported everything (it starts in the background)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._ready or self.proc.poll() is not None, timeout) and self._ready

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _send(self, req: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._write:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()

    def _ask(self, req: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        with self._cond:
            self._next += 1
            rid = self._next
        self._send({**req, "id": rid})
        with self._cond:
            if (
                not self._cond.wait_for(lambda: rid in self._answers or not self.alive, timeout)
                or rid not in self._answers
            ):
                raise RuntimeError("the kernel fork server did not answer")
            return self._answers.pop(rid)

    def spawn(self, req: dict[str, Any]) -> "ForkedKernel":
        if not self.wait_ready():
            raise RuntimeError("the kernel fork server did not start")
        return ForkedKernel(self._ask({"op": "spawn", **req})["pid"], self, req.get("uid"))

    def signal(self, pid: int, sig: int) -> None:
        if self.alive:
            self._send({"op": "signal", "pid": pid, "sig": sig})

    def group(self, kernel: int, uid: int | None, action: str) -> dict[str, Any]:
        """``check`` (are they all stopped?), ``cont`` or ``kill`` every process of one submission."""
        return self._ask({"op": "group", "kernel": kernel, "uid": uid, "action": action})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ForkedKernel:
    """A ``Popen``-like handle on a kernel that is the fork server's child, not ours."""

    def __init__(self, pid: int, server: Zygote, uid: int | None):
        self.pid = pid  # in the server's pid namespace: every signal goes through the server
        self.uid = uid
        self.server = server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.server.exits.get(self.pid)
            if code is None and not self.server.alive:
                code = -9  # the server is gone, and with it the kernel
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.server.signal(self.pid, sig)

    def kill(self) -> None:
        """Kill the kernel and every process of its submission."""
        try:
            self.server.group(self.pid, self.uid, "kill")
        except RuntimeError:
            pass
        self.server.signal(self.pid, 9)

    def wait(self, timeout: float | None = None) -> int | None:
        end = time.monotonic() + (timeout or 30)
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        return self.returncode


_ZYGOTES: dict[tuple[str, Path], Zygote] = {}


def zygote(
    sandbox: str, course: Path, *, wait: bool = True, private: bool = False, scratch: Path | None = None
) -> Zygote | None:
    """This process's fork server for a sandbox mode, started on first use (``wait=False`` only starts it);
    ``private=True`` starts one that serves a single kernel (``--no-fork-server``, or a fresh sandbox whose
    writable folder is ``scratch``). None if it cannot start."""
    key = (sandbox, course.resolve())
    with _LOCK:
        server = None if private else _ZYGOTES.get(key)
        if server is None or not server.alive:
            try:
                server = Zygote(sandbox, course, scratch if private else None)
            except OSError:
                return None
            atexit.register(server.close)
            if not private:
                _ZYGOTES[key] = server
    if wait and not server.wait_ready():
        return None
    return server
