"""A bare Jupyter kernel for grading: launched with memory limits in a scratch folder, timed, killable.

The grader does not use nbclient here: it needs a kernel it launches itself (resource limits,
its own working folder, stderr kept out of the user's terminal), per-cell and total deadlines,
and outputs it never stores beyond a small cap.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from .forkserver import zygote

__all__ = ["CellRun", "GradingKernel", "describe_exit"]

_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE", re.IGNORECASE)  # never handed to learner code
OUTPUT_CAP = 4000  # characters of a cell's stdout/stderr kept for feedback; the rest is dropped

# Runs before ipykernel: apply resource limits and keep the scratch folder off the import path.
_LAUNCH = """\
import resource, sys
mem = int(sys.argv.pop(1))
if mem > 0:
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
fsize = int(sys.argv.pop(1))
if fsize > 0:
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
sys.path[:] = [p for p in sys.path if p not in ('', '.')]
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""


@dataclasses.dataclass
class CellRun:
    """What happened to one cell: ``ok``, ``error``, ``timeout`` or ``died`` (kernel gone)."""

    status: str
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    output: str = ""
    truncated: bool = False

    def one_line(self) -> str:
        if self.status == "error":
            return f"raised {self.ename}: {self.evalue}"[:200] if self.evalue else f"raised {self.ename}"
        return self.status


def describe_exit(code: int | None) -> str:
    """A one-line reason for a kernel's exit code (negative codes are signals)."""
    if code is None:
        return "the kernel stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = {"SIGSEGV": "segmentation fault", "SIGKILL": "killed", "SIGABRT": "aborted",
                "SIGBUS": "bus error"}.get(name, "killed by a signal")
        return f"the kernel died ({what}, {name})"
    return f"the kernel exited with code {code}"


class GradingKernel:
    """One ipykernel process for one submission; every call returns, whatever the code does."""

    def __init__(self, workdir: Path, *, mem_mb: int = 4096, fsize_mb: int = 1024,
                 threads: int = 1, startup_timeout: float = 60.0, fork: bool = True):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.conn_file = str(workdir.parent / f"{workdir.name}-kernel.json")
        write_connection_file(self.conn_file, ip="127.0.0.1")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "PYTEST_")) and not _SECRET.search(k)}
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   JPY_PARENT_PID=str(os.getpid()), PYDEVD_DISABLE_FILE_VALIDATION="1",
                   MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
        argv = ["-f", self.conn_file, "--IPKernelApp.log_level=CRITICAL", "--HistoryManager.enabled=False",
                "--IPKernelApp.ignore_cwd=True"]  # files the learner writes can never shadow an import
        self.log_path = workdir.parent / f"{workdir.name}-kernel.log"
        self._log: Any = None
        server = zygote() if fork and sys.platform == "linux" else None  # fork after torch: Linux only
        self.proc: Any
        if server is not None:  # fork a kernel that has torch imported already
            env["JPY_PARENT_PID"] = str(server.proc.pid)
            self.proc = server.spawn(argv, str(workdir), env, str(self.log_path), mem_mb * 2**20, fsize_mb * 2**20)
        else:
            cmd = [sys.executable, "-c", _LAUNCH, str(mem_mb * 2**20), str(fsize_mb * 2**20), *argv]
            self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in shutdown()
            self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=self._log, start_new_session=True)
        self.client = BlockingKernelClient(connection_file=self.conn_file)
        self.client.load_connection_file()
        self.client.start_channels()
        self.dead_reason = ""
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                self.client.wait_for_ready(timeout=1.0)
                break
            except RuntimeError:
                if self.proc.poll() is not None:
                    self.dead_reason = describe_exit(self.proc.returncode) + " while starting"
                    break
                if time.monotonic() > deadline:
                    self.kill()
                    self.dead_reason = f"the kernel did not start within {startup_timeout:g} s"
                    break

    @property
    def alive(self) -> bool:
        return not self.dead_reason and self.proc.poll() is None

    def run(self, code: str, timeout: float) -> CellRun:
        """Execute ``code``; on timeout interrupt the kernel, and kill it if it stays busy."""
        if not self.alive:
            return CellRun("died", evalue=self.dead_reason or describe_exit(self.proc.returncode))
        start = time.monotonic()
        msg_id = self.client.execute(code, store_history=False, allow_stdin=False)
        run = self._wait(msg_id, start + timeout, start)
        if run.status == "timeout":
            self._interrupt_or_kill(msg_id)
        run.seconds = time.monotonic() - start
        return run

    def _wait(self, msg_id: str, deadline: float, start: float) -> CellRun:
        out: list[str] = []
        kept = 0
        truncated = False
        ename = evalue = ""
        while True:
            now = time.monotonic()
            if now > deadline:
                return CellRun("timeout", seconds=now - start, output="".join(out), truncated=truncated)
            try:
                msg = self.client.get_iopub_msg(timeout=min(0.2, max(0.01, deadline - now)))
            except queue.Empty:
                if self.proc.poll() is not None:
                    self.dead_reason = describe_exit(self.proc.returncode)
                    return CellRun("died", evalue=self.dead_reason, output="".join(out), truncated=truncated)
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text = str(content.get("text", ""))
                if kept < OUTPUT_CAP:
                    out.append(text[: OUTPUT_CAP - kept])
                    kept += min(len(text), OUTPUT_CAP - kept)
                truncated = truncated or kept >= OUTPUT_CAP
            elif kind == "error":
                ename, evalue = str(content.get("ename", ""))[:80], str(content.get("evalue", ""))[:300]
            elif kind == "status" and content.get("execution_state") == "idle":
                status = "error" if ename else "ok"
                return CellRun(status, ename, evalue.splitlines()[0] if evalue else "",
                               output="".join(out), truncated=truncated)

    def _interrupt_or_kill(self, msg_id: str) -> None:
        try:
            os.kill(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        if self._wait(msg_id, time.monotonic() + 3.0, time.monotonic()).status == "timeout":
            if self.proc.poll() is None:  # still busy after the interrupt: stop it for good
                self.kill()
                self.dead_reason = "the kernel ignored an interrupt after a timeout and was stopped"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait(timeout=10)

    def shutdown(self) -> None:
        """Stop the kernel and every process it started; never raises."""
        try:
            self.client.stop_channels()
        except Exception:  # noqa: BLE001 - best effort on a dying kernel
            pass
        self.kill()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # children left in its session
        except (ProcessLookupError, PermissionError):
            pass
        if self._log is not None:
            self._log.close()
        for path in (self.conn_file,):
            try:
                os.unlink(path)
            except OSError:
                pass

    def __enter__(self) -> "GradingKernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
