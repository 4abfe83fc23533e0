"""A kernel fork server: one process imports ipykernel and torch once, then forks a fresh kernel per submission.

Starting a kernel and importing torch costs ~2 s; a fork costs milliseconds. Each forked kernel
gets its own session, working folder, log file, environment and resource limits, exactly like a
kernel launched from scratch, and the server reports how each one exited (for "died" reasons).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["ForkedKernel", "Zygote", "zygote"]

_SERVER = r"""
import json, os, resource, select, signal, sys
import ipykernel.kernelapp, IPython, torch, torchcontracts.grading.driver, torchcontracts.check  # paid once
torchcontracts.grading.driver.preload()
rd, wr = os.pipe()
os.set_blocking(wr, False)
signal.set_wakeup_fd(wr)
signal.signal(signal.SIGCHLD, lambda *a: None)
out = os.fdopen(sys.stdout.fileno(), "w", buffering=1, closefd=False)
print("ready", file=out)
buf = b""
while True:
    try:
        ready, _, _ = select.select([0, rd], [], [])
    except InterruptedError:
        continue
    if rd in ready:
        os.read(rd, 4096)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            print(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}), file=out)
    if 0 in ready:
        chunk = os.read(0, 65536)
        if not chunk:
            os._exit(0)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid:
                print(json.dumps({"pid": pid, "id": req["id"]}), file=out)
                continue
            try:  # the child: become a fresh kernel
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setsid()
                os.chdir(req["cwd"])
                log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
                os.close(rd); os.close(wr); os.close(null); os.close(log)
                os.environ.clear(); os.environ.update(req["env"])
                if req["mem"] > 0:
                    resource.setrlimit(resource.RLIMIT_AS, (req["mem"], req["mem"]))
                if req["fsize"] > 0:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
                sys.path[:] = [p for p in sys.path if p not in ("", ".")]
                sys.argv = ["ipykernel"] + req["argv"]
                sys.stdin = open(os.devnull); sys.stdout = os.fdopen(1, "w"); sys.stderr = os.fdopen(2, "w")
                ipykernel.kernelapp.launch_new_instance()
            finally:
                os._exit(0)
"""


class Zygote:
    """The fork server of this grader process; ``spawn`` returns a ``ForkedKernel``."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.exits: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        self._next = 0
        self._ready = False
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                if line.strip() == b"ready":
                    self._ready = True
                else:
                    msg = json.loads(line)
                    if "pid" in msg:
                        self._pids[msg["id"]] = msg["pid"]
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

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], log: str, mem: int, fsize: int) -> "ForkedKernel":
        assert self.proc.stdin is not None
        if not self.wait_ready():
            raise RuntimeError("the kernel fork server did not start")
        with self._cond:
            self._next += 1
            rid = self._next
            req = {"id": rid, "argv": argv, "cwd": cwd, "env": env, "log": log, "mem": mem, "fsize": fsize}
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            if not self._cond.wait_for(lambda: rid in self._pids, timeout=30):
                raise RuntimeError("the kernel fork server did not answer")
            return ForkedKernel(self._pids.pop(rid), self)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ForkedKernel:
    """A ``Popen``-like handle on a kernel that is the fork server's child, not ours."""

    def __init__(self, pid: int, server: Zygote):
        self.pid = pid
        self._server = server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self._server.exits.get(self.pid)
            if code is None and not self._server.alive:
                code = -9  # the server is gone, and with it the kernel's parent
            self.returncode = code
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        end = time.monotonic() + (timeout or 30)
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        return self.returncode


_ZYGOTE: list[Any] = []
_LOCK = threading.Lock()


def zygote(wait: bool = True) -> Zygote | None:
    """This process's fork server, started on first use (``wait=False`` only starts it);
    None if it cannot start, and then kernels are launched plainly."""
    with _LOCK:
        if not (_ZYGOTE and _ZYGOTE[0] is not None and _ZYGOTE[0].alive):
            _ZYGOTE.clear()
            try:
                server: Zygote | None = Zygote()
                atexit.register(server.close)  # type: ignore[union-attr]
            except OSError:
                server = None
            _ZYGOTE.append(server)
        server = _ZYGOTE[0]
    if wait and server is not None and not server.wait_ready():
        return None
    return server
