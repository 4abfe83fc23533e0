"""Measure CPU memory the way lesson 03 and lab 03 need it: saved activations, held graphs, live tensors.

* ``SavedTensorMeter``: bytes autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``; each storage counts once, and parameters
  and the tensors you pass as ``exclude`` (inputs, targets) are not counted.
* ``held_bytes``: tensor bytes an object keeps alive, including the saved tensors of the
  autograd graphs hanging off it (a logged loss that still carries its graph).
* ``live_tensor_bytes``: all tensor bytes reachable from Python objects that ``gc`` sees,
  to catch leaks that hide in closures, hooks and globals.
"""

from __future__ import annotations

import gc
from typing import Any, Iterable

import torch
from torch import nn

__all__ = ["SavedTensorMeter", "graph_saved_tensors", "held_bytes", "live_tensor_bytes", "storage_key", "tensor_bytes"]


def storage_key(t: torch.Tensor) -> int:
    """An id of the storage behind ``t`` (views share it)."""
    return t.untyped_storage().data_ptr()


def _has_memory(t: torch.Tensor) -> bool:
    """Whether ``t`` owns real bytes: not meta, sparse, or a tracing stand-in (FakeTensor, FunctionalTensor).

    torch.compile and torch.export leave fake tensors alive in a process for a while; they have no data
    pointer, and asking for one raises.
    """
    if t.is_meta or t.layout != torch.strided:
        return False
    if type(t) not in (torch.Tensor, nn.Parameter) and _is_fake(t):
        return False
    try:
        t.untyped_storage().data_ptr()
    except RuntimeError:  # a FunctionalTensor, or a FakeTensor from another torch's fake mode
        return False
    return True


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor  # private; imported only when a subclass shows up

    return isinstance(t, FakeTensor)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the whole storage behind ``t``: a small view of a big tensor costs the big tensor."""
    if t.is_meta or t.layout != torch.strided:
        return 0
    return t.untyped_storage().nbytes()


def _exclusions(exclude: Iterable[Any]) -> set[int]:
    keys: set[int] = set()
    for item in exclude:
        if isinstance(item, nn.Module):
            keys |= {storage_key(p) for p in item.parameters()} | {storage_key(b) for b in item.buffers()}
        elif isinstance(item, torch.Tensor):
            keys.add(storage_key(item))
        else:
            raise TypeError(f"exclude takes modules and tensors, got {type(item).__name__}: pass model or x")
    return keys


class SavedTensorMeter:
    """Count the bytes autograd saves for backward inside a ``with`` block.

    >>> with SavedTensorMeter(exclude=[model, x, y]) as meter:
    ...     loss = loss_fn(model(x), y)
    >>> meter.bytes, meter.count
    """

    def __init__(self, exclude: Iterable[Any] = ()):
        self._skip = _exclusions(exclude)
        self.saved: dict[int, int] = {}  # storage key -> bytes
        self.shapes: list[tuple[int, ...]] = []  # every counted tensor's shape, in pack order
        self.skipped = 0  # parameters and excluded tensors seen
        self._hooks: Any = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if isinstance(t, nn.Parameter) or key in self._skip:
            self.skipped += 1
        elif key not in self.saved:
            self.saved[key] = tensor_bytes(t)
            self.shapes.append(tuple(t.shape))
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def __enter__(self) -> SavedTensorMeter:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        """Unique saved bytes (each storage once)."""
        return sum(self.saved.values())

    @property
    def count(self) -> int:
        """Number of distinct storages saved."""
        return len(self.saved)


def graph_saved_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The tensors still saved in the autograd graph behind ``t`` (empty after a backward frees them)."""
    out: list[torch.Tensor] = []
    # Keyed by id, holding the node: a graph node's Python object lives only while something refers to it, and a
    # freed one's id can come back for another node, which a set of bare ids takes as seen (it cut the walk short
    # on torch 2.11: 8,196 bytes found behind a 4-layer MLP's loss instead of 7 saved 32x64 activations).
    seen: dict[int, Any] = {}
    stack = [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        for name in dir(fn):
            if name.startswith("_saved_"):
                try:
                    value = getattr(fn, name)
                except RuntimeError:  # already freed by backward
                    continue
                values = value if isinstance(value, (tuple, list)) else (value,)
                out += [v for v in values if isinstance(v, torch.Tensor)]
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return out


def held_bytes(obj: Any, exclude: Iterable[Any] = ()) -> int:
    """Tensor bytes kept alive by ``obj``: tensors in nested lists/tuples/dicts and their graphs' saved tensors."""
    skip = _exclusions(exclude)
    counted: dict[int, int] = {}
    stack, seen = [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            for t in (item, *graph_saved_tensors(item)):
                if not _has_memory(t):
                    continue
                key = storage_key(t)
                if key not in skip and not isinstance(t, nn.Parameter):
                    counted[key] = tensor_bytes(t)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return sum(counted.values())


def live_tensor_bytes(exclude: Iterable[Any] = ()) -> tuple[int, int]:
    """(count, bytes) of distinct storages reachable from every tensor ``gc`` tracks, graphs included."""
    gc.collect()
    skip = _exclusions(exclude)
    counted: dict[int, int] = {}
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor):  # type(), not isinstance: lazy modules warn on isinstance
            continue
        for t in (obj, *graph_saved_tensors(obj)):
            if not _has_memory(t):
                continue
            key = storage_key(t)
            if key not in skip:
                counted[key] = tensor_bytes(t)
    return len(counted), sum(counted.values())
