"""The one loop of the grader's two fork servers: ``boot`` (learner kernels) and ``artefact_runner`` (artefact jobs).

Both preload what their children need once, become a child subreaper (a process a child double-forks to
escape lands here), print ``ready``, then read one JSON request per line on stdin and write one JSON
answer per line on stdout. Each server passes its own preload, request handler and child body; the
mechanics live here once: the SIGCHLD wakeup, reaping, exit reports, killing orphans, forking a child
with the server's pipes and signal state out of its reach, and waiting for one child with a deadline.

It runs inside the artefact sandbox, which mounts little: it imports only the standard library and
``procs``, never torch or anything heavy.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time
from typing import Any, Callable

from torchcontracts.grading.procs import proc_table

__all__ = ["Loop", "prctl", "serve"]

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36

Request = dict[str, Any]


def prctl(option: int, value: int) -> None:
    """``prctl(2)`` where there is one (Linux); elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


class Loop:
    """What a request handler may do: answer, fork a child, wait for one, reap what is left."""

    def __init__(self, child: Callable[[Request], None], *, failed: int, report_exits: bool, kill_orphans: bool):
        self.child = child
        self.failed = failed  # a child's exit code when its body raised
        self.report_exits = report_exits  # answer {"exit": pid, "code": code} when a child ends
        self.kill_orphans = kill_orphans  # kill every other process that lands here
        self.children: set[int] = set()
        self.out = os.fdopen(sys.stdout.fileno(), "w", buffering=1, closefd=False)
        self._rd, self._wr = os.pipe()
        os.set_blocking(self._wr, False)
        signal.set_wakeup_fd(self._wr)
        signal.signal(signal.SIGCHLD, lambda *a: None)

    def answer(self, msg: dict[str, Any]) -> None:
        print(json.dumps(msg), file=self.out)

    def fork(self, req: Request) -> int:
        """Fork a child that runs the child body on ``req`` and exits: 0 if it returns, ``failed`` if it raises."""
        pid = os.fork()
        if pid:
            self.children.add(pid)
            return pid
        code = 0
        try:  # the child: none of the server's signal handling or pipes
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(self._rd)
            os.close(self._wr)
            self.child(req)
        except BaseException:  # noqa: BLE001 - say why on its stderr, and exit with a code that says so
            import traceback

            traceback.print_exc()
            code = self.failed
        finally:
            os._exit(code)

    def wait(self, pid: int, timeout: float) -> tuple[int, bool]:
        """Wait for one child until ``timeout`` seconds pass, then kill its process group: (wait status, killed)."""
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                return status, False
            if time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                self.children.discard(pid)
                return status, True
            time.sleep(0.005)

    def reap(self) -> None:
        """Reap every child that ended (this process is a subreaper); report the exits of forked children."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                if self.report_exits:
                    self.answer({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def _kill_orphans(self) -> None:
        me = os.getpid()
        for pid, s in proc_table().items():
            if s[1] == me and pid not in self.children and s[0] not in "ZX":
                try:  # an orphan a child left behind (double fork): it gets no further
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def run(self, handle: Callable[[Loop, Request], None]) -> None:
        """Say ``ready``, then serve requests until stdin ends."""
        print("ready", file=self.out)
        buf = b""
        while True:
            try:
                ready, _, _ = select.select([0, self._rd], [], [], 0.5)
            except InterruptedError:
                continue
            if self._rd in ready:
                os.read(self._rd, 4096)
            self.reap()
            if self.kill_orphans:
                self._kill_orphans()
            if 0 not in ready:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                handle(self, json.loads(line))


def serve(
    *,
    preload: Callable[[], None],
    handle: Callable[[Loop, Request], None],
    child: Callable[[Request], None],
    failed: int,
    report_exits: bool = False,
    kill_orphans: bool = False,
    pdeathsig: bool = False,
) -> None:
    """A fork server: ``preload`` once, become a child subreaper, then ``handle`` each request until stdin ends.

    ``handle(loop, req)`` answers with ``loop.answer`` and forks with ``loop.fork(req)``, which runs
    ``child(req)`` in the new process. ``pdeathsig``: the server dies with its parent.
    """
    preload()
    if pdeathsig:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    Loop(child, failed=failed, report_exits=report_exits, kill_orphans=kill_orphans).run(handle)
