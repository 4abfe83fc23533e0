"""The stand-in a graded kernel sees for each grader-only module (``hidden.GRADER_ONLY``).

In ``bwrap`` mode the sandbox binds this file over each grader-only module's source, so inside the
kernel (and the fork server) that module's name imports this code instead. Every name it is asked for
is a placeholder (PEP 562 ``__getattr__``): a top-level ``from ...labNN_judges import judge_x`` in a
module the kernel imports still works, and passing the placeholder around (``Check(..., judge_x)``) is
fine, but calling it raises. Nothing here computes anything, so nothing here answers a task.

Placeholders are made anew on each look-up and never stored in the module, so the module's namespace
is the same at every tamper fingerprint.
"""

from __future__ import annotations

import typing as _typing  # under a private name: this module's public names are its placeholders only

__all__: list[str] = []

GRADER_ONLY = True  # the mark of this stand-in, as the module it replaces sees it


def __getattr__(name: str) -> _typing.Any:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = f"{__name__}.{name}"

    def placeholder(*args: _typing.Any, **kwargs: _typing.Any) -> _typing.NoReturn:
        raise RuntimeError(f"grader-only: {where} is not available in a graded kernel")

    placeholder.__name__ = placeholder.__qualname__ = name
    placeholder.__module__ = __name__
    placeholder.__doc__ = f"grader-only: {where} is not available in a graded kernel"
    placeholder.__grader_only__ = True  # type: ignore[attr-defined]
    return placeholder
