"""A place of its own for each kernel of a shared sandbox: its own ``/tmp``, ``/dev/shm``, IPC and network.

One fork server serves every kernel of a grader (``-j 2`` runs two at once, and kernels follow one another),
so without this they would share the sandbox's ``/tmp`` and ``/dev/shm`` (a file one submission leaves, made
world-readable, reaches the next), its System V IPC, its abstract Unix sockets and its loopback network (a
port one kernel listens on, another can reach): channels between two students' submissions. The uid of each
kernel keeps their folders apart, not these.

So ``boot.become_kernel`` calls ``own_place`` in the freshly forked kernel, while it is still root with the
capabilities the sandbox grants the fork server (``sandbox.bwrap_argv(..., own_places=True)``), before its
limits and uid (``procs.limit``), which drop every capability. It makes new mount, IPC and network namespaces,
mounts fresh size-capped tmpfs folders on ``/tmp`` and ``/dev/shm``, and brings up the new loopback (lab 07's
gloo ranks talk over it). The kernel's channels to the grader are Unix socket files in its own folder, which
no namespace here changes. Only as root in bwrap mode; elsewhere a grader gives each submission a sandbox of
its own instead (``steps``), or, in ``none`` mode, nothing (README).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct

__all__ = ["CAPS", "own_place"]

CAPS = "CAP_SYS_ADMIN,CAP_NET_ADMIN"  # what the fork server needs for this; a kernel loses them with its uid
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP, _IFF_RUNNING = 0x8913, 0x8914, 0x1, 0x40
_IFREQ = struct.Struct("16sH22x")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _loopback_up() -> None:
    """``ip link set lo up``: a new network namespace starts with its loopback down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _name, flags = _IFREQ.unpack(fcntl.ioctl(s, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0)))
        fcntl.ioctl(s, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP | _IFF_RUNNING))


def _mounts_under(folder: str) -> list[tuple[str, bool]]:
    """The top mount points below ``folder`` (mountinfo's mount point, and whether it is a directory), outermost
    first: what bwrap bound there (the course or its Python when they live under /tmp, the grader's scratch)."""
    points: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            raw = line.split()[4]
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), raw)  # mountinfo escapes spaces
            if point.startswith(folder.rstrip("/") + "/"):
                points.append(point)
    top = [p for p in sorted(set(points), key=len) if not any(p.startswith(q + "/") for q in points if q != p)]
    return [(p, os.path.isdir(p)) for p in top]


def own_place(tmpfs_bytes: int, keep: str) -> None:
    """New mount, IPC and network namespaces for this process, fresh ``/tmp`` and ``/dev/shm``, loopback up.

    What bwrap bound below ``/tmp`` comes back at the same path, with what is mounted inside it (read-only stays
    read-only): the course and its Python when they live there (a clone in /tmp), and of the grader's scratch
    folder only ``keep``, the kernel's own folder, never another kernel's."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWNET), "unshare")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")  # nothing propagates
    kept = [
        (p, is_dir)
        for p, is_dir in _mounts_under("/tmp")
        if not (keep == p or keep.startswith(p + "/"))  # the scratch folder: only keep comes back
    ] + [(keep, True)]
    held = [(p, is_dir, os.open(p, os.O_PATH)) for p, is_dir in kept]  # reachable once /tmp is covered
    try:
        for folder in (b"/tmp", b"/dev/shm"):
            opts = f"size={tmpfs_bytes},mode=1777".encode()
            _check(libc.mount(b"tmpfs", folder, b"tmpfs", _MS_NOSUID | _MS_NODEV, opts), f"mount {folder.decode()}")
        for point, is_dir, fd in held:
            if is_dir:
                os.makedirs(point, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(point), mode=0o755, exist_ok=True)
                open(point, "a").close()  # noqa: SIM115 - a file bind needs a file to cover
            source = f"/proc/self/fd/{fd}".encode()
            _check(libc.mount(source, point.encode(), None, _MS_BIND | _MS_REC, None), f"bind {point} back")
    finally:
        for _p, _d, fd in held:
            os.close(fd)
    os.chdir(keep)  # by its path again, on the bind
    _loopback_up()
