"""The operating-system sandbox of the learner's kernels: bubblewrap when it exists, and what `none` leaves open.

In ``bwrap`` mode the fork server (and every kernel it forks) runs in a bubblewrap sandbox:
its own pid namespace that dies with the grader, no network, no IPC or UTS sharing, a fresh
``/tmp``, and a read-only view of only what Python needs (the system, the interpreter, its
site-packages and the ``torchcontracts`` package). The course's ``solutions/`` and ``.git``, the
submissions folder, the gradebook and the results file are simply not there, and the package's
grader-only modules (its judges and references, ``hidden.GRADER_ONLY``) are stand-ins whose names
raise when called. The one writable place is the grader's scratch folder, where each kernel gets a folder of its own (mode 0700).
When the grader runs as root, each kernel also drops to a uid of its own, so kernels cannot
signal, trace or read each other, the fork server or the grader.
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from torchcontracts.grading.places import CAPS as PLACE_CAPS
from torchcontracts.grading.hidden import bwrap_hide_args

__all__ = ["MODES", "NONE_LEAVES_OPEN", "bwrap_argv", "bwrap_path", "choose_mode", "kernel_uid"]

MODES = ("auto", "bwrap", "none")

# What `none` mode cannot stop: each needs the operating system (README, "The sandbox").
NONE_LEAVES_OPEN = (
    "learner code runs as the grading user: it can read what that user can (other submissions, the grader's /proc; "
    "a root grader's environment, where feedback scrubs secrets only as written, not reversed or encoded)",
    "as root, learner code can ptrace or signal the fork server and the grader",
    "a process that leaves the kernel's process group can outlive the kernel",
    "the network is reachable",
    "solutions/ is guarded by an audit-hook tripwire, which subprocesses and native code do not trigger",
    "the grader-only modules (judges and references, hidden.GRADER_ONLY) are importable: a solution can call them",
)

_UID_BASE = 120_000  # kernels' uids in bwrap mode, one per kernel, when the grader runs as root


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str | None:
    """The bwrap binary, if it exists and can make the namespaces we need here (tried once)."""
    path = shutil.which("bwrap")
    if path is None or sys.platform != "linux":
        return None
    try:
        probe = subprocess.run(
            [path, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent", "/bin/true"],
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if probe.returncode == 0 else None


def choose_mode(mode: str) -> str:
    """Resolve ``auto``: bwrap when it works here, else none. ``bwrap`` without bwrap is an error."""
    if mode not in MODES:
        raise ValueError(f"--sandbox must be one of {', '.join(MODES)}")
    if mode == "none":
        return "none"
    if bwrap_path() is None:
        if mode == "bwrap":
            raise RuntimeError(
                "--sandbox bwrap: bubblewrap is not installed or cannot make namespaces here "
                "(Debian/Ubuntu: apt-get install bubblewrap)"
            )
        return "none"
    return "bwrap"


def kernel_uid(n: int) -> int | None:
    """The uid of the n-th kernel in bwrap mode; None when the grader is not root (no uid to drop to)."""
    return _UID_BASE + n % 50_000 if os.geteuid() == 0 else None


def _python_paths() -> list[Path]:
    """Folders the kernel's Python needs: the interpreter's prefixes, the import path, the package itself."""
    import torchcontracts

    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).resolve().parent.parent,
        Path(torchcontracts.__file__).resolve().parent,
    }
    paths.update(Path(p) for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir())
    # never a script's folder, the working folder or /tmp from sys.path: only what the installation put there
    paths.update(
        Path(p)
        for p in sys.path
        if p and Path(p).is_dir() and any(Path(p).resolve().is_relative_to(q.resolve()) for q in list(paths))
    )
    kept = sorted({p.resolve() for p in paths if p.exists()}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in kept:  # drop folders already inside a kept one
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


def _hide_course(paths: list[Path], course: Path) -> list[str]:
    """A bound folder that holds the course (say a venv's parent) must not show solutions/ or .git."""
    args: list[str] = []
    for secret in (course / "solutions", course / ".git"):
        if secret.exists() and any(p == secret or p in secret.parents for p in paths):
            args += ["--tmpfs", str(secret)]
    return args


TMPFS_BYTES = 1024 * 2**20  # the sandbox's /tmp and /dev/shm, each (RAM that RLIMIT_DATA does not count)


def bwrap_argv(scratch: Path, course: Path, *, drop_uid: bool, own_places: bool = False) -> list[str]:
    """The bwrap command line that wraps the fork server (or one plainly launched kernel). ``drop_uid``: it may
    give each child a uid of its own; ``own_places``: and namespaces of its own (``places``, root only)."""
    path = bwrap_path()
    assert path is not None, "bwrap_argv needs bwrap (check choose_mode first)"
    argv = [
        path,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        # RAM-backed folders outside RLIMIT_DATA: each gets a size of its own (bwrap's default is half the host's RAM)
        "--perms",
        "1777",
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/dev/shm",
    ]
    for top in ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    python = [p for p in _python_paths() if not str(p).startswith(("/usr/", "/etc/", "/opt/"))]
    for p in python:  # parents bwrap creates must be traversable by the kernel's uid
        for parent in reversed(p.parents[:-1]):
            if str(parent) not in ("/usr", "/etc", "/opt"):
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", str(p), str(p)]
    argv += _hide_course(python, course.resolve())
    argv += bwrap_hide_args(python, course.resolve())  # judges and references: the grader's only (hidden.py)
    for parent in reversed(scratch.parents[:-1]):
        if str(parent) != "/tmp":
            argv += ["--perms", "0755", "--dir", str(parent)]
    argv += ["--bind", str(scratch), str(scratch), "--chdir", "/tmp"]
    if drop_uid:
        argv += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_KILL" + (f",{PLACE_CAPS}" if own_places else "")]
    return argv
