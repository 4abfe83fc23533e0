"""Runs inside the learner's kernel in ``none`` mode: an audit hook that blocks (and reports) any opening of the
course's ``solutions/``. The driver installs it before any learner code runs; everything it calls is bound at import.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable

__all__ = ["install"]

_isinstance, _get_ident = isinstance, threading.get_ident


def install(forbidden: str, report: int) -> tuple[Callable[[str, tuple[Any, ...]], None], set[int]]:
    """Block (and report) opening anything under the course's solutions/ from this kernel.

    A tripwire for ``none`` mode, where solutions/ is on the kernel's disk; in bwrap mode it is not there.
    Returns the audit hook and the set of threads inside a hook call right now.
    """
    realpath, fsdecode, write, sep = os.path.realpath, os.fsdecode, os.write, os.sep  # bound before learner code
    root = realpath(forbidden)
    events = frozenset(
        {
            "open",
            "os.listdir",
            "os.scandir",
            "os.symlink",
            "os.link",
            "os.rename",
            "shutil.copyfile",
            "shutil.copytree",
            "os.chdir",
            "glob.glob",
            "subprocess.Popen",
            "os.exec",
            "os.posix_spawn",
        }
    )
    busy: set[int] = set()  # threads inside a hook call right now (an open() inside the hook must not recurse)
    ident = _get_ident

    def hook(event: str, args: tuple[Any, ...]) -> None:
        me = ident()
        if event not in events or me in busy or not args:
            return
        busy.add(me)
        try:
            for arg in args[:2] if event not in ("subprocess.Popen", "os.exec", "os.posix_spawn") else args[1:2]:
                texts = arg if _isinstance(arg, (list, tuple)) else [arg]
                for text in texts:
                    if not _isinstance(text, (str, bytes, os.PathLike)):
                        continue
                    text = fsdecode(text)
                    path = realpath(text) if event not in ("subprocess.Popen", "os.exec", "os.posix_spawn") else text
                    parts = path.replace("\\", "/").split("/")
                    if (
                        path == root
                        or path.startswith(root + sep)
                        or "solutions" in parts
                        or (event != "open" and "solutions" in path)
                    ):
                        try:
                            write(report, f"{event}\n".encode())
                        except OSError:
                            pass
                        raise PermissionError("grading: the course's solutions/ is not readable from a submission")
        finally:
            busy.discard(me)

    sys.addaudithook(hook)
    return hook, busy
