"""Stop every process of a submission while its answers are sealed (run by the sealer, in the learner's kernel).

The driver's sealer calls ``freeze`` before it takes the tamper fingerprints: in bwrap mode every process of
the kernel's own uid, else the kernel's process tree and process group (``procs``). Everything it
relies on is bound here at import, in the fork server, before any learner code runs.
"""

from __future__ import annotations

import os
import signal
import time

from torchcontracts.grading.procs import owner, pids, proc_table, subtree

__all__ = ["freeze", "process_tree"]

# bound at import, before any learner code
_kill, _getpid, _getppid, _getuid, _setpgid, _listdir = (
    os.kill,
    os.getpid,
    os.getppid,
    os.getuid,
    os.setpgid,
    os.listdir,
)
_SIGSTOP = signal.SIGSTOP
_monotonic, _sleep = time.monotonic, time.sleep


def process_tree(root: int) -> list[int]:
    """The kernel's process tree and process group (none mode), without this sealer."""
    return [p for p in subtree(proc_table(), root) if p != _getpid()]


def _stopped(pid: int) -> bool:
    """True when every thread of ``pid`` is stopped (or the process is gone): SIGSTOP lands asynchronously."""
    try:
        tids = _listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] not in (b"T", b"t", b"Z", b"X"):
                    return False
        except (OSError, IndexError):
            continue
    return True


def freeze(uid_isolated: bool) -> None:
    """Stop every process of the submission except this sealer, and wait until all their threads have stopped."""
    me = _getpid()
    if uid_isolated:
        _kill(-1, _SIGSTOP)  # every process of this kernel's own uid in the sandbox
        uid = _getuid()
        targets = [p for p in pids() if p != me and owner(p) == uid]
    else:
        _setpgid(0, 0)  # leave the kernel's group, then stop it and every process it started
        targets = process_tree(_getppid())
        for pid in targets:
            try:
                _kill(pid, _SIGSTOP)
            except OSError:
                pass
    deadline = _monotonic() + 2.0
    while _monotonic() < deadline and not all(_stopped(pid) for pid in targets):
        _sleep(0.0005)
