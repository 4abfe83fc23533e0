"""No new user namespaces for a learner's process: a small seccomp filter, installed by ``procs.limit``.

Inside bubblewrap a kernel runs as a uid of its own with every capability dropped, yet Linux still lets it
create a user namespace of its own, where it is uid 0 and may mount tmpfs folders: RAM that no rlimit counts,
outside the sandbox's capped ``/tmp`` and ``/dev/shm``. bwrap 0.8's ``--disable-userns`` would stop that, but
it needs ``--unshare-user``, which maps one uid only and so cannot host the fork server's uid per kernel.
So each learner process (a kernel, a rank it forks, an artefact job) installs this filter itself, after its
limits and uid and before any learner code, and every process it starts inherits it:

* ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` fail with ``EPERM``;
* ``clone3`` fails with ``ENOSYS`` (its flags sit in memory a filter cannot read; glibc then falls back to
  ``clone``, so threads and subprocesses work as before);
* a system call of another ABI (x32 numbers, 32-bit ``int 0x80``) fails with ``EPERM``: the same calls under
  other numbers.

Only x86-64 and AArch64 Linux get a filter; elsewhere ``install`` does nothing and says so.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

__all__ = ["CLONE_NEWUSER", "install", "program"]

CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_X32_BIT = 0x40000000
# machine -> (AUDIT_ARCH_*, unshare, clone, clone3, whether x32 numbers exist)
_ARCHES = {"x86_64": (0xC000003E, 272, 56, 435, True), "aarch64": (0xC00000B7, 97, 220, 435, False)}


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The filter as (code, jt, jf, k) instructions for this machine, or None where there is none."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, unshare, clone, clone3, x32 = arch
    deny, enosys, allow = (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ERRNO | _ENOSYS), (_RET, 0, 0, _ALLOW)
    # offsets into struct seccomp_data: nr at 0, arch at 4, args[0]'s low 32 bits at 16 (little-endian)
    return [
        (_LD_ABS, 0, 0, 4),
        (_JEQ, 1, 0, audit),  # 1: another ABI
        deny,
        (_LD_ABS, 0, 0, 0),
        (_JGE, 7, 0, _X32_BIT) if x32 else (_JEQ, 0, 0, 0),  # 4: x32 numbers -> deny at 12
        (_JEQ, 3, 0, unshare),  # 5 -> 9
        (_JEQ, 2, 0, clone),  # 6 -> 9
        (_JEQ, 5, 0, clone3),  # 7 -> 13
        allow,  # 8
        (_LD_ABS, 0, 0, 16),  # 9: the flags
        (_JSET, 1, 0, CLONE_NEWUSER),  # 10 -> 12
        allow,  # 11
        deny,  # 12
        enosys,  # 13
    ]


def install() -> bool:
    """Install the filter on this process (and so on everything it starts); False where there is none."""
    prog = program() if sys.platform == "linux" else None
    if prog is None:
        return False
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(prog), ctypes.addressof(filt))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True
