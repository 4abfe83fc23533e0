"""The one start-up script of a grading kernel, for the fork server and for a plain launch alike.

``python -m torchcontracts.grading.boot serve``: the fork server. It imports ipykernel, torch and
the driver once, then forks a fresh kernel per request (milliseconds instead of ~2 s), reports
each kernel's exit, signals kernels for the grader, and checks, resumes or kills all the
processes of one submission. It is a child subreaper: a process a learner double-forks to
escape the kernel lands here, and is killed. Its loop is ``forkloop``'s, shared with ``artefact_runner``.

``python -m torchcontracts.grading.boot kernel REQUEST_JSON``: become one kernel directly (no fork
server: off Linux, or ``--no-fork-server``).

Either way ``become_kernel`` does the same: a new session, death with the parent, the working
folder, a clean environment, resource limits (``RLIMIT_DATA``, which a CUDA build of torch
survives, unlike ``RLIMIT_AS``), and in bwrap mode as root a uid of its own and a place of its own
(``places``: its own ``/tmp``, ``/dev/shm``, IPC and network).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from torchcontracts.grading import forkloop
from torchcontracts.grading.forkloop import PR_SET_PDEATHSIG, Loop, prctl
from torchcontracts.grading.places import own_place
from torchcontracts.grading.procs import limit, proc_table, subtree

__all__ = ["become_kernel", "group_pids", "serve"]


def become_kernel(req: dict[str, Any]) -> None:
    """Turn this (freshly forked or launched) process into a limited ipykernel; never returns."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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
    if req.get("own_place"):  # before the uid: it needs the fork server's capabilities, which the uid drops
        own_place(int(req["own_place"]), req["cwd"])
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


def _preload() -> None:
    import IPython  # noqa: F401 - paid once, in the server
    import ipykernel.kernelapp  # noqa: F401
    import torch  # noqa: F401

    import torchcontracts.checks  # noqa: F401
    from torchcontracts.grading import driver, watch  # noqa: F401

    watch.preload()


def _handle(loop: Loop, req: dict[str, Any]) -> None:
    if req["op"] == "signal":
        try:
            os.kill(req["pid"], req["sig"])
        except OSError:
            pass
        return
    if req["op"] == "group":
        loop.answer({"id": req["id"], **_group(req)})
        return
    pid = loop.fork(req)  # the child becomes a fresh kernel
    loop.answer({"pid": pid, "id": req["id"]})


def serve() -> None:
    """The fork server: answers a spawn with the kernel's pid at once, reports its exit later, kills orphans."""
    forkloop.serve(
        preload=_preload,
        handle=_handle,
        child=become_kernel,
        failed=70,  # the traceback is in the kernel's log
        report_exits=True,
        kill_orphans=True,
        pdeathsig=True,
    )
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["kernel"]:
        become_kernel(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m torchcontracts.grading.boot serve | kernel REQUEST_JSON")
