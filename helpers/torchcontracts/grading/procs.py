"""The processes of a submission: the one ``/proc`` reader, process-tree walker and resource-limits block.

Used by the kernel fork server (``boot``: a kernel's limits, a submission's processes), by the fork servers'
one loop (``forkloop``: orphans), by the sealer in the learner's kernel (``freeze``: what to stop) and by the
artefact sandbox (``artefact_runner``: a job's limits, what a job left running). The kernel side imports it in
the fork server, before any learner code, so everything it calls is bound here at import.
"""

from __future__ import annotations

import os
import resource

from torchcontracts.grading.seccomp import install as _no_user_namespaces

__all__ = ["ProcInfo", "limit", "owner", "pids", "proc_table", "subtree"]

# bound at import, before any learner code
_listdir, _stat, _open = os.listdir, os.stat, open
_setrlimit, _setgroups, _setgid, _setuid, _umask = (resource.setrlimit, os.setgroups, os.setgid, os.setuid, os.umask)
_CORE, _DATA, _FSIZE, _NPROC = resource.RLIMIT_CORE, resource.RLIMIT_DATA, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC

ProcInfo = tuple[str, int, int, int]  # (state, ppid, pgid, uid)


def pids() -> list[int]:
    """Every process this pid namespace shows."""
    return [int(p) for p in _listdir("/proc") if p.isdigit()]


def owner(pid: int) -> int:
    """The uid of a process, or -1 if it is gone."""
    try:
        return _stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def _info(pid: int) -> ProcInfo | None:
    try:
        with _open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        uid = _stat(f"/proc/{pid}").st_uid
        return fields[0].decode(), int(fields[1]), int(fields[2]), uid
    except (OSError, IndexError, ValueError):
        return None


def proc_table() -> dict[int, ProcInfo]:
    """(state, ppid, pgid, uid) of every process still there."""
    return {pid: info for pid in pids() if (info := _info(pid)) is not None}


def subtree(table: dict[int, ProcInfo], root: int) -> set[int]:
    """``root``, every process below it, and every process of its process group."""
    found, todo = {root}, [root]
    while todo:
        here = todo.pop()
        for pid, info in table.items():
            if info[1] == here and pid not in found:
                found.add(pid)
                todo.append(pid)
    return found | {pid for pid, info in table.items() if info[2] == root}


def limit(*, mem: int, fsize: int, nproc: int, uid: int | None) -> None:
    """The limits of a learner's process (a kernel or an artefact job), then its own uid when it has one, then
    no new user namespaces (``seccomp``: a namespace of its own would make it root there, free to mount RAM).

    ``RLIMIT_DATA`` caps memory (a CUDA build of torch survives it, unlike ``RLIMIT_AS``); ``nproc`` counts
    per uid, so it applies only with a uid of its own. ``mem`` or ``fsize`` of 0 leaves that limit alone.
    """
    _setrlimit(_CORE, (0, 0))
    if mem > 0:
        _setrlimit(_DATA, (mem, mem))
    if fsize > 0:
        _setrlimit(_FSIZE, (fsize, fsize))
    if uid is not None:
        _setrlimit(_NPROC, (nproc, nproc))
        _setgroups([])
        _setgid(uid)
        _setuid(uid)
    _umask(0o077)
    _no_user_namespaces()
