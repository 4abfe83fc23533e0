"""Plumbing for lesson 08 (deployment): quiet logs, a fresh Python process, what a pickle names, recorded sources.

The experiments stay in the notebook's cells; this module only holds what they repeat or what is
not the lesson: silencing log lines a CPU-only machine prints on every import, running a snippet
in a fresh interpreter (a load "after the class moved" must not see this kernel's modules), listing
the globals a ``torch.save`` pickle refers to, and two records the notebook cannot measure here
(TorchServe's status, an AOTInductor run on this course's CPU), each with where and when.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import pickletools
import subprocess
import sys
import warnings
import zipfile
from typing import Any, Iterator

__all__ = [
    "AOTI_ON_CPU",
    "TORCHSERVE",
    "first_line",
    "pickle_globals",
    "quiet",
    "quiet_stderr",
    "run_python",
    "saved_bytes",
]

# Loggers that print on every import or export on a CPU-only machine, and say nothing about the lesson:
# torchao's CUDA-only kernels "failed to load", torch.onnx's registry lacks torchvision's ops, torchao
# registers an Enum with pytree, and the symbolic-shapes logger dumps a graph when an export fails on purpose.
_NOISY = (
    "torchao",
    "torch.utils._pytree",
    "torch.onnx._internal.exporter._registration",
    "torch.fx.experimental.symbolic_shapes",
    "torch._dynamo",
    "onnxscript",
)


def quiet() -> None:
    """Silence the import-time and export-time log lines listed in ``_NOISY`` (errors still show)."""
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.ERROR)
    # onnxscript's exporter reaches a pytree spelling that torch 2.13 deprecates; it is theirs to change, not yours
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[io.StringIO]:
    """Capture stderr (log handlers that write to it) while an export is made to fail on purpose."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        yield buf


def first_line(err: BaseException, limit: int = 110) -> str:
    """``Type: first line of the message``, cut to ``limit`` characters: an error in one readable line."""
    text = (str(err).strip().splitlines() or [""])[0]
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}"


def saved_bytes(obj: Any) -> int:
    """Bytes that ``torch.save(obj)`` writes: the size of the file on disk."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getbuffer().nbytes


def pickle_globals(blob: bytes) -> list[tuple[str, str]]:
    """The (module, name) pairs the pickle inside a ``torch.save`` file refers to, in order, once each.

    These are references: the unpickler imports ``module`` and looks ``name`` up when it loads.
    """
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        data = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    found: list[tuple[str, str]] = []
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            module, name = str(arg).split(" ", 1)
            found.append((module, name))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(str(arg))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.append((strings[-2], strings[-1]))
    return list(dict.fromkeys(found))


def run_python(code: str, timeout: float = 120.0) -> Any:
    """Run ``code`` in a fresh interpreter (this Python, none of this kernel's state); return its last
    stdout line parsed as JSON. Raises RuntimeError with the child's last error line if it fails."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh process failed: {last}")
    return json.loads(lines[-1])


# TorchServe cannot be measured here (it is a Java server, not installed with torch). What its repository says:
TORCHSERVE = {
    "source": "github.com/pytorch/serve README.md, newest commit in the course's snapshot: 62c4d6a (2025-03-17)",
    "notice_added_in": "pytorch/serve#3395 (2025-02-28), 'Add limited maintenance notice'",
    "notice": (
        "This project is no longer actively maintained. While existing releases remain available, there are "
        "no planned updates, bug fixes, new features, or security patches. Users should be aware that "
        "vulnerabilities may not be addressed."
    ),
    # github.com's banner on the repository's pages (seen on pytorch/serve#3396; not re-checked by the course since)
    "archived": "the repository was archived by its owner on 2025-08-07 and is read-only (github.com's banner)",
    "handler_api": (
        "ts/torch_handler/base_handler.py: BaseHandler.initialize(self, context) reads "
        "context.system_properties.get('gpu_id'); BaseHandler.handle(self, data, context)"
    ),
}

# AOTInductor on this course's 2-core CPU box (torch 2.13.0+cpu, gcc), recorded by lesson 08's author:
# a Linear(16, 32) -> ReLU -> Linear(32, 4) model exported with a dynamic batch, as in section 18.
AOTI_ON_CPU = {
    "when": "2026-12-01, torch 2.13.0+cpu with gcc, on a shared 2-core CPU box",
    "compile seconds, cold inductor cache (load average 6.5)": 43.9,
    "compile seconds, warm inductor cache (load average 2.7)": 11.5,
    "compile seconds, warm inductor cache (load average 7.2)": 34.1,
    "package bytes": 1_531_399,
    "load seconds": 0.03,
    "max |diff| vs eager at batch 1, 4 and 17": 0.0,
}
