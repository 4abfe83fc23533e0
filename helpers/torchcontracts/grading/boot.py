"""The one start-up script of a grading kernel, for the fork server and for a plain launch alike.

``python -m torchcontracts.grading.boot serve``: the fork server. It imports ipykernel, torch and
the driver once, then forks a fresh kernel per request (milliseconds instead of ~2 s), reports
each kernel's exit, signals kernels for the grader, and checks, resumes or kills all the
processes of one submission. It is a child subreaper: a process a learner double-forks to
escape the kernel lands here, and is killed.

``python -m torchcontracts.grading.boot kernel REQUEST_JSON``: become one kernel directly (no fork
server: off Linux, or ``--no-fork-server``).

Either way ``become_kernel`` does the same: a new session, death with the parent, the working
folder, a clean environment, resource limits (``RLIMIT_DATA``, which a CUDA build of torch
survives, unlike ``RLIMIT_AS``), and in bwrap mode as root a uid of its own.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
from typing import Any

from torchcontracts.grading.procs import limit, proc_table, subtree

__all__ = ["become_kernel", "group_pids", "serve"]

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def become_kernel(req: dict[str, Any]) -> None:
    """Turn this (freshly forked or launched) process into a limited ipykernel; never returns."""
    os.setsid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(req["cwd"])
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.environ.clear()
    os.environ.update(req["env"])
    limit(mem=req["mem"], fsize=req["fsize"], nproc=512, uid=req.get("uid"))  # nproc: one kernel's processes
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    sys.argv = ["ipykernel", *req["argv"]]
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the kernel's own stdin for its lifetime
    sys.stdout, sys.stderr = os.fdopen(1, "w"), os.fdopen(2, "w")
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def group_pids(kernel: int, uid: int | None) -> dict[int, str]:
    """Every process of one submission, with its state: by uid in bwrap mode, else the kernel's tree."""
    table = proc_table()
    if uid is not None:
        return {pid: s[0] for pid, s in table.items() if s[3] == uid}
    return {pid: table[pid][0] for pid in subtree(table, kernel) if pid in table}


def _group(req: dict[str, Any]) -> dict[str, Any]:
    pids = group_pids(req["kernel"], req.get("uid"))
    action = req["action"]
    if action == "check":
        return {"stopped": all(state in "TtZX" for state in pids.values()) and bool(pids)}
    sig = {"cont": signal.SIGCONT, "kill": signal.SIGKILL}[action]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return {}


def serve() -> None:
    """The fork server's loop: one JSON request per line on stdin, one JSON answer per line on stdout."""
    import IPython  # noqa: F401 - paid once, in the server
    import ipykernel.kernelapp  # noqa: F401
    import torch  # noqa: F401

    import torchcontracts.checks  # noqa: F401
    from torchcontracts.grading import driver, watch  # noqa: F401

    watch.preload()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    signal.set_wakeup_fd(wr)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    out = os.fdopen(sys.stdout.fileno(), "w", buffering=1, closefd=False)
    kernels: set[int] = set()
    print("ready", file=out)
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([0, rd], [], [], 0.5)
        except InterruptedError:
            continue
        if rd in ready:
            os.read(rd, 4096)
        while True:  # reap, and report the exits of kernels
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in kernels:
                kernels.discard(pid)
                print(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}), file=out)
        for pid, s in proc_table().items():
            if s[1] == os.getpid() and pid not in kernels and s[0] not in "ZX":
                try:  # an orphan a submission left behind (double fork): it gets no further
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            os._exit(0)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            if req["op"] == "signal":
                try:
                    os.kill(req["pid"], req["sig"])
                except OSError:
                    pass
                continue
            if req["op"] == "group":
                print(json.dumps({"id": req["id"], **_group(req)}), file=out)
                continue
            pid = os.fork()
            if pid:
                kernels.add(pid)
                print(json.dumps({"pid": pid, "id": req["id"]}), file=out)
                continue
            code = 0
            try:  # the child: become a fresh kernel
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(rd)
                os.close(wr)
                become_kernel(req)
            except BaseException:  # noqa: BLE001 - say why in the kernel's log, and exit with a code that says so
                import traceback

                traceback.print_exc()
                code = 70
            finally:
                os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["kernel"]:
        become_kernel(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m torchcontracts.grading.boot serve | kernel REQUEST_JSON")
