"""Which processes a launch left, read from ``/proc`` (Linux): the checks lesson 09 and its tests make after a run.

A launch marks its processes with ``TORCHCONTRACTS_DIST_RUN=<token>`` (``dist_tools.MARK``); tokens start with the
launching pid, so another notebook's or test worker's launches never count.
"""

from __future__ import annotations

import os

__all__ = ["MARK", "leftover_processes", "live_children"]

MARK = "TORCHCONTRACTS_DIST_RUN"  # set in the environment of every process we launch, to find stragglers


def leftover_processes(token: str | None = None) -> list[int]:
    """Pids of live processes started by ``launch`` in this process (or by the launch ``token``); Linux only.

    A process is ours when its environment carries ``TORCHCONTRACTS_DIST_RUN`` with a token this process made
    (tokens start with the launching pid), so launches by another notebook or test worker never count;
    zombies do not count either.
    """
    if not os.path.isdir("/proc"):
        return []
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except (OSError, IndexError):
            continue
        mine = [e for e in env if e.startswith(MARK.encode() + b"=")]
        wanted = f"{MARK}={token}".encode() if token else f"{MARK}={os.getpid()}-".encode()
        if state not in (b"Z", b"X") and mine and (mine[0] == wanted if token else mine[0].startswith(wanted)):
            found.append(int(pid))
    return sorted(found)


_HELPERS = (b"multiprocessing.resource_tracker",)  # Python's own helper of the spawn start method: it ends with us


def live_children(pid: int | None = None) -> list[int]:
    """Pids of the live (not zombie) child processes of ``pid`` (this process by default); Linux only.

    Python's multiprocessing resource tracker, which the spawn start method starts once and which
    exits with its parent, does not count.
    """
    me = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] not in (b"Z", b"X") and not any(h in cmdline for h in _HELPERS):
            found.append(int(entry))
    return sorted(found)
