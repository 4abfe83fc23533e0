"""Look inside ``torch.compile`` the way lesson 07 needs to: graphs, breaks, guards, counters, generated code.

Most of what dynamo and inductor know is reachable only through private names
(``torch._dynamo.explain``, ``torch._dynamo.utils.counters``, a cache-entry debug hook,
``torch._inductor.utils.run_and_get_code``). Each wrapper here names the private API it uses, so a
notebook cell calls one documented function instead of repeating the incantation, and a torch
upgrade that moves a private name breaks one place, not a lesson.

* ``GraphRecorder``: a dynamo backend that keeps every FX graph it is handed and counts how often
  each one runs; it can pass the graph on to a real backend (``then="aot_eager"``, ``"inductor"``).
* ``graph_report``: ``torch._dynamo.explain`` plus a count of the breaks themselves, which
  ``explain``'s ``graph_break_count`` (graphs minus one) misses in places, and of skipped frames.
* ``CounterDelta``: what ``torch._dynamo.utils.counters`` gained inside a ``with`` block
  (cache hits and misses, cudagraph skips, autotuning runs).
* ``Noise``: Python warnings and torch log records at WARNING or above, caught inside a block.
* ``guard_lines``, ``kernel_names``, ``kernel_source``: read guards and Inductor's output code.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import warnings
from unittest import mock
from typing import Any, Callable

import torch

__all__ = [
    "CounterDelta",
    "GraphRecorder",
    "GraphReport",
    "Noise",
    "graph_ops",
    "graph_report",
    "guard_lines",
    "kernel_names",
    "kernel_source",
]


def graph_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The operations of an FX graph, in order, by short name (``sin``, ``mul``, ``aten.tanh.default``)."""
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_method":
            names.append(str(node.target))
        elif node.op == "call_module":
            names.append(f"module:{node.target}")
        elif node.op == "call_function":
            target = node.target
            if isinstance(target, torch._ops.OpOverload):
                names.append(str(target))  # aten.tanh.default
            else:
                names.append(getattr(target, "__name__", str(target)))
    return names


class GraphRecorder:
    """A dynamo backend that records each graph it receives and counts each graph's runs.

    A backend is any callable ``(GraphModule, example_inputs) -> callable``. This one returns a
    wrapper around the graph (run as is, or compiled by ``then``, e.g. ``"aot_eager"``), so after a
    call ``graphs`` holds what dynamo captured and ``runs`` lists which graph ran, call by call.
    Zero graphs after a call means dynamo ran the whole function in Python.
    """

    def __init__(self, then: str | Callable[..., Any] | None = None) -> None:
        self.then = then
        self.graphs: list[torch.fx.GraphModule] = []
        self.runs: list[int] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        index = len(self.graphs)
        self.graphs.append(gm)
        if self.then is None:
            inner: Callable[..., Any] = gm.forward
        else:
            backend = torch._dynamo.lookup_backend(self.then) if isinstance(self.then, str) else self.then
            inner = backend(gm, example_inputs)

        def run(*args: Any) -> Any:
            self.runs.append(index)
            return inner(*args)

        return run

    def ops(self) -> list[list[str]]:
        """The operations of each recorded graph."""
        return [graph_ops(gm) for gm in self.graphs]

    def clear(self) -> None:
        """Forget recorded graphs and runs (call ``torch.compiler.reset()`` too, or dynamo keeps its cache)."""
        self.graphs.clear()
        self.runs.clear()


@dataclasses.dataclass(frozen=True)
class GraphReport:
    """What dynamo made of one call: graphs compiled, graph breaks, skipped frames, and why.

    ``graphs`` and ``explain_breaks`` are ``torch._dynamo.explain``'s ``graph_count`` and
    ``graph_break_count``; the installed source computes the latter as ``graph_count - 1``, so a
    break before the first op (nothing to compile yet) or a skipped frame does not show there.
    ``breaks`` counts the breaks dynamo resumed after, one per call of its graph-break logger
    (the place ``TORCH_LOGS=graph_breaks`` reports from). ``skipped`` counts frames dynamo gave up
    on and ran in plain Python (``counters["frames"]``: total minus ok), e.g. a break in a loop.
    """

    graphs: int
    explain_breaks: int
    breaks: int
    skipped: int
    reasons: tuple[str, ...]
    ops: tuple[tuple[str, ...], ...]

    def row(self) -> dict[str, Any]:
        """A flat dict for one row of a pandas table."""
        return {
            "graphs": self.graphs,
            "breaks": self.breaks,
            "explain's graph_break_count": self.explain_breaks,
            "skipped frames": self.skipped,
            "ops per graph": [len(o) for o in self.ops],
            "first reason": self.reasons[0] if self.reasons else "",
        }


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:90] if text.strip() else ""


def graph_report(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GraphReport:
    """Run ``fn(*args)`` under ``torch._dynamo.explain`` and count breaks and skipped frames.

    Private APIs: ``explain`` (it calls ``torch._dynamo.reset()`` before and after, which drops every
    compiled function's cache), ``counters``, and dynamo's ``InstructionTranslatorBase.log_graph_break``,
    wrapped here to count each break once.
    """
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase
    from torch._dynamo.utils import counters

    logged: list[str] = []
    original = InstructionTranslatorBase.log_graph_break

    def counting(self: Any, code_options: Any, reason: str, exc: Any) -> None:
        if not getattr(exc, "logged", False):
            logged.append(_first_line(getattr(exc, "msg", "") or str(exc)))
        return original(self, code_options, reason=reason, exc=exc)

    frames_before = collections.Counter(counters["frames"])
    skips_before = collections.Counter(counters["unimplemented"])
    with mock.patch.object(InstructionTranslatorBase, "log_graph_break", counting):
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    frames = collections.Counter(counters["frames"]) - frames_before
    skipped = frames["total"] - frames["ok"]
    reasons = list(logged)
    if skipped:
        skips = collections.Counter(counters["unimplemented"]) - skips_before
        reasons += [_first_line(r.split("***")[-1]) for r in skips]
    reasons = list(dict.fromkeys(reasons))  # each reason once, in order
    return GraphReport(
        out.graph_count,
        out.graph_break_count,
        len(logged),
        skipped,
        tuple(reasons),
        tuple(tuple(graph_ops(gm)) for gm in out.graphs),
    )


class CounterDelta:
    """What ``torch._dynamo.utils.counters`` (private) gained inside the block: ``d["inductor"]["fxgraph_cache_hit"]``.

    Inductor counts FX-graph cache hits and misses, cudagraph skips and autotuning runs there;
    a missing key reads as 0.
    """

    def __enter__(self) -> CounterDelta:
        from torch._dynamo.utils import counters

        self._counters = counters
        self._before = {k: collections.Counter(v) for k, v in counters.items()}
        self.gained: dict[str, collections.Counter[str]] = {}
        return self

    def __exit__(self, *exc: object) -> None:
        self.gained = {
            k: collections.Counter(v) - self._before.get(k, collections.Counter()) for k, v in self._counters.items()
        }

    def __getitem__(self, group: str) -> collections.Counter[str]:
        return self.gained.get(group, collections.Counter())


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Noise:
    """Catch what a learner would see: Python warnings and ``torch.*`` log records at WARNING or above.

    ``warnings`` and ``logs`` hold their first lines. Torch's loggers do not all propagate to the
    ``torch`` logger, so the handler is attached to every ``torch`` logger that exists at entry.
    """

    def __enter__(self) -> Noise:
        self._handler = _Keep()
        self._loggers = [logging.getLogger("torch")] + [
            logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith("torch.")
        ]
        for lg in self._loggers:
            lg.addHandler(self._handler)
        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        # A ResourceWarning is the garbage collector finding some other object's socket or file (seen in CI: an
        # "Unclosed socket <zmq...>" left by an earlier test), whenever it runs: never something the code said.
        warnings.simplefilter("ignore", ResourceWarning)
        return self

    def __exit__(self, *exc: object) -> None:
        self._catch.__exit__(*exc)
        for lg in self._loggers:
            lg.removeHandler(self._handler)
        seen: dict[int, logging.LogRecord] = {id(r): r for r in self._handler.records}  # one record, many loggers
        self.logs = [_first_line(r.getMessage()) for r in seen.values()]
        self.warnings = [_first_line(str(w.message)) for w in self._caught]

    @property
    def quiet(self) -> bool:
        """True when nothing was warned or logged at WARNING or above."""
        return not self.logs and not self.warnings


def guard_lines(fn: Callable[..., Any], entry: int = 0) -> list[str]:
    """The guard tree of one compiled entry of ``fn`` (newest first), one line per guard.

    Reads ``torch._dynamo.eval_frame._debug_get_cache_entry_list`` (private): dynamo keeps its
    compiled entries on the function's code object. ``TORCH_LOGS=guards`` prints the same tree.
    """
    code = getattr(fn, "__code__", None) or type(fn).forward.__code__
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(code)
    if not entries:
        raise LookupError(f"{getattr(fn, '__name__', fn)!r} has no compiled entry: call the compiled function first")
    return [line.rstrip() for line in str(entries[entry].guard_manager).splitlines() if line.strip()]


_KERNEL = re.compile(r"^(cpp_fused_\w+|triton_\w+) = async_compile\.\w+\(", re.M)


def kernel_names(code: str) -> list[str]:
    """The fused kernels Inductor generated in one output-code module (C++ on CPU, Triton on GPU)."""
    return _KERNEL.findall(code)


def kernel_source(code: str, name: str) -> str:
    """The source text of kernel ``name`` inside Inductor's output code (between its ``r'''`` quotes)."""
    start = code.find(f"{name} = async_compile.")
    if start < 0:
        raise KeyError(f"no kernel {name!r}; kernels here: {kernel_names(code)}")
    body = code.index("'''", start) + 3
    return code[body : code.index("'''", body)].strip("\n")
