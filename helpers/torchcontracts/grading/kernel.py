"""The kernel and its fork server, from the grader's side: start a limited kernel, run cells with deadlines, take sealed steps.

The grader does not use nbclient here: it needs a kernel it launches itself (resource limits,
its own working folder, stderr kept out of the user's terminal), per-cell and total deadlines,
and outputs it never stores beyond a small cap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from torchcontracts.grading.boot import group_pids
from torchcontracts.grading.forkserver import Zygote, clean_env, zygote
from torchcontracts.grading.protocol import MAX_SEALED_BYTES, sealed_name
from torchcontracts.grading.sandbox import TMPFS_BYTES

__all__ = ["CellRun", "GradingKernel", "describe_exit"]

OUTPUT_CAP = 4000  # characters of a cell's stdout/stderr kept for feedback; the rest is dropped
SEAL_WAIT = 3.0  # seconds to see every process of a submission stopped once its sealed step is written


@dataclasses.dataclass
class CellRun:
    """What happened to one cell: ``ok``, ``error``, ``timeout`` or ``died`` (kernel gone)."""

    status: str
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0
    output: str = ""
    truncated: bool = False
    sealed: bytes | None = None  # the step's sealed answers, read while the submission was stopped
    seal_problem: str = ""  # why a sealed step was refused (tampering)

    def one_line(self) -> str:
        if self.status == "error":
            return f"raised {self.ename}: {self.evalue}"[:200] if self.evalue else f"raised {self.ename}"
        return self.status


def _last_line(log: str) -> str:
    """The last line a kernel that died while starting wrote to its log (no learner code ran yet: ours), as
    ": <line>", or "" when there is none."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:200]}" if lines else ""


def describe_exit(code: int | None) -> str:
    """A one-line reason for a kernel's exit code (negative codes are signals)."""
    if code is None:
        return "the kernel stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = {"SIGSEGV": "segmentation fault", "SIGKILL": "killed", "SIGABRT": "aborted", "SIGBUS": "bus error"}.get(
            name, "killed by a signal"
        )
        return f"the kernel died ({what}, {name})"
    return f"the kernel exited with code {code}"


class _PlainKernel:
    """A kernel launched directly with the same start-up script (no fork server: off Linux)."""

    def __init__(self, req: dict[str, Any]):
        self.uid = None
        self._log = open(req["log"], "ab")  # noqa: SIM115 - closed when the kernel is shut down
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchcontracts.grading.boot", "kernel", json.dumps(req)],
            cwd=req["cwd"],
            env=req["env"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def send_signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def group(self, action: str) -> dict[str, Any]:
        if not os.path.isdir("/proc"):
            return {"stopped": True}  # no /proc to look in: none mode off Linux trusts the sealer's stop
        pids = group_pids(self.pid, None)
        if action == "check":
            return {"stopped": bool(pids) and all(s in "TtZX" for s in pids.values())}
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT if action == "cont" else signal.SIGKILL)
            except OSError:
                pass
        return {}

    def kill(self) -> None:
        self.group("kill")
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self._log.close()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class GradingKernel:
    """One ipykernel process for one submission; every call returns, whatever the code does."""

    def __init__(
        self,
        workdir: Path,
        *,
        course: Path,
        sandbox: str = "none",
        uid: int | None = None,
        mem_mb: int = 4096,
        fsize_mb: int = 1024,
        threads: int = 1,
        startup_timeout: float = 60.0,
        fork: bool = True,
        fresh_sandbox: bool = False,
    ):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        self.uid = uid
        self._seal: str | None = None
        self._taken: dict[str, Any] = {}
        self.conn_file = str(workdir / "kernel.json")
        if sandbox == "bwrap":  # no network in the sandbox: the channels are Unix sockets in the kernel's folder
            write_connection_file(self.conn_file, transport="ipc", ip=str(workdir / "zmq"))
        else:
            write_connection_file(self.conn_file, ip="127.0.0.1")
        if uid is not None:
            os.chown(self.conn_file, uid, uid)
        env = clean_env(
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
            HOME=str(workdir),
            IPYTHONDIR=str(workdir / ".ipython"),
            MPLCONFIGDIR=str(workdir / ".mpl"),
            TMPDIR=str(workdir),
            JPY_PARENT_PID=str(os.getpid()),
        )
        argv = [
            "-f",
            self.conn_file,
            "--IPKernelApp.log_level=CRITICAL",
            "--HistoryManager.enabled=False",
            "--IPKernelApp.ignore_cwd=True",
        ]  # files the learner writes can never shadow an import
        req = {
            "argv": argv,
            "cwd": str(workdir),
            "env": env,
            "log": str(workdir.parent / f"{workdir.name}.log"),
            "mem": mem_mb * 2**20,
            "fsize": fsize_mb * 2**20,
            "uid": uid,
            # a kernel of a shared bwrap sandbox, as root: its own /tmp, /dev/shm, IPC and network (``places``)
            "own_place": TMPFS_BYTES if sandbox == "bwrap" and uid is not None and os.geteuid() == 0 else 0,
        }
        self.server: Zygote | None = None
        self.private = False
        self.proc: Any
        if sys.platform == "linux" and (fork or sandbox == "bwrap" or fresh_sandbox):
            # fresh_sandbox: a fork server of its own, whose sandbox binds only this kernel's parent folder
            # (a new /tmp, /dev, IPC namespace and scratch view: nothing an earlier kernel left reaches it)
            private = not fork or fresh_sandbox
            self.server = zygote(sandbox, course, private=private, scratch=workdir.parent if fresh_sandbox else None)
            self.private = private
            if self.server is None:
                raise RuntimeError("the kernel fork server could not start")
            self.proc = self.server.spawn(req)
        else:
            self.proc = _PlainKernel(req)
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
                    self.dead_reason = describe_exit(self.proc.returncode) + " while starting" + _last_line(req["log"])
                    break
                if time.monotonic() > deadline:
                    self.kill()
                    self.dead_reason = f"the kernel did not start within {startup_timeout:g} s"
                    break

    @property
    def alive(self) -> bool:
        return not self.dead_reason and self.proc.poll() is None

    def _group(self, action: str) -> dict[str, Any]:
        if self.server is not None:
            return self.server.group(self.proc.pid, self.uid, action)
        return self.proc.group(action)

    def run(self, code: str, timeout: float, seal: str | None = None) -> CellRun:
        """Execute ``code``; on timeout interrupt the kernel, and kill it if it stays busy.

        ``seal`` is the token of a driver step: its sealed answers are taken while the submission is stopped.
        """
        if not self.alive:
            return CellRun("died", evalue=self.dead_reason or describe_exit(self.proc.returncode))
        start = time.monotonic()
        msg_id = self.client.execute(code, store_history=False, allow_stdin=False)
        self._seal, self._taken = seal, {}
        try:
            run = self._wait(msg_id, start + timeout, start)
            if run.status == "timeout":
                self._interrupt_or_kill(msg_id)
        finally:
            self._seal, taken = None, self._taken
        run.seconds = time.monotonic() - start
        run.sealed, run.seal_problem = taken.get("data"), taken.get("problem", "")
        return run

    def _take_seal(self) -> None:
        """If the sealer has written the step: check the submission is stopped, read it, resume it."""
        if self._seal is None:
            return
        taken = self._taken
        path = self.workdir / sealed_name(self._seal)
        if not path.exists():
            return
        if "data" in taken or "problem" in taken:  # one token, two sealed files: one of them was planted
            taken["problem"] = "a second sealed file under the step's token"
            taken.pop("data", None)
        deadline = time.monotonic() + SEAL_WAIT
        while not self._group("check").get("stopped"):
            if time.monotonic() > deadline:
                taken["problem"] = "a process of the submission kept running while its answers were sealed"
                break
            time.sleep(0.005)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                if os.fstat(fh.fileno()).st_size > MAX_SEALED_BYTES:
                    taken.setdefault("problem", "its sealed answers are over the size limit")
                elif "problem" not in taken:
                    taken["data"] = fh.read(MAX_SEALED_BYTES + 1)
            path.unlink()
        except OSError:
            taken.setdefault("problem", "its sealed answers could not be read")
        self._group("cont")

    def _wait(self, msg_id: str, deadline: float, start: float) -> CellRun:
        out: list[str] = []
        kept = 0
        truncated = False
        ename = evalue = ""
        while True:
            now = time.monotonic()
            self._take_seal()
            if now > deadline:
                return CellRun("timeout", seconds=now - start, output="".join(out), truncated=truncated)
            try:
                msg = self.client.get_iopub_msg(timeout=min(0.02 if self._seal else 0.2, max(0.01, deadline - now)))
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
                self._take_seal()
                status = "error" if ename else "ok"
                return CellRun(
                    status, ename, evalue.splitlines()[0] if evalue else "", output="".join(out), truncated=truncated
                )

    def _interrupt_or_kill(self, msg_id: str) -> None:
        self._group("cont")  # a stopped submission cannot take an interrupt
        self.proc.send_signal(signal.SIGINT)
        if self._wait(msg_id, time.monotonic() + 3.0, time.monotonic()).status == "timeout":
            if self.proc.poll() is None:  # still busy after the interrupt: stop it for good
                self.kill()
                self.dead_reason = "the kernel ignored an interrupt after a timeout and was stopped"

    def kill(self) -> None:
        if self.proc.poll() is None or self.uid is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def shutdown(self) -> None:
        """Stop the kernel and every process it started; never raises."""
        try:
            self.client.stop_channels()
        except Exception:  # noqa: BLE001 - best effort on a dying kernel
            pass
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            pass
        if self.private and self.server is not None:
            self.server.close()

    def __enter__(self) -> "GradingKernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
