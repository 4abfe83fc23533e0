"""Import shims for the module paths of torchcontracts 0.1 (before the course manifest and lesson folders).

A lab notebook opened before an update imports ``torchcontracts.labchecks.lab01_strides``, and a learner's
solution cell may import ``torchcontracts.check``; both keep working: importing an old name imports the new
module and binds it under the old name too (one module object, not a copy). The shims stay through course release 0.5.0 and go in 0.6.0;
CHANGELOG.md lists the moves. New code imports the new paths (a test checks that the package does).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["MOVED", "install"]

# old name under torchcontracts -> new name under torchcontracts
MOVED: dict[str, str] = {
    "claims": "core.claims",
    "skips": "core.skips",
    "device": "core.device",
    "timing": "core.timing",
    "nbio": "core.nbio",
    "check": "checks",
    "tryit": "checks.tryit",
    "labformat": "labs.format",
    "labbuild": "labs.build",
    "ledger": "publish.ledger",
    "site": "publish.site",
    "record": "publish.record",
    "gpu_checks": "publish.gpu_checks",
    "exercises.lesson00": "lessons.l00_start.tryit",
    "exercises.lesson01": "lessons.l01_tensors.tryit",
    "viz": "lessons.l01_tensors.viz",
    "labchecks.lab01_strides": "lessons.l01_tensors.lab01_strides",
    "exercises.lesson02": "lessons.l02_autograd.tryit",
    "graph": "lessons.l02_autograd.graph",
    "labchecks.lab02_autograd": "lessons.l02_autograd.lab02_autograd",
    "exercises.lesson03": "lessons.l03_memory.tryit",
    "alloc": "lessons.l03_memory.alloc",
    "alloc_viz": "lessons.l03_memory.alloc_viz",
    "memory": "lessons.l03_memory.memory",
    "labchecks.lab03_memory": "lessons.l03_memory.lab03_memory",
    "exercises.lesson04": "lessons.l04_async.tryit",
    "roofline": "lessons.l04_async.roofline",
    "workloads": "lessons.l04_async.workloads",
    "labchecks.lab04_timing": "lessons.l04_async.lab04_timing",
    "exercises.lesson05": "lessons.l05_data.tryit",
    "data_pipeline": "lessons.l05_data.data_pipeline",
    "throughput": "lessons.l05_data.throughput",
    "exercises.lesson06": "lessons.l06_training.tryit",
    "training": "lessons.l06_training.training",
    "labchecks.lab05_reproducible_training": "lessons.l06_training.lab05_reproducible_training",
    "labchecks.lab05_parts": "lessons.l06_training.lab05_parts",
    "exercises.lesson07": "lessons.l07_compile.tryit",
    "compile_tools": "lessons.l07_compile.compile_tools",
    "exercises.lesson08": "lessons.l08_deploy.tryit",
    "deploy": "lessons.l08_deploy.deploy",
    "labchecks.lab06_deployment": "lessons.l08_deploy.lab06_deployment",
    "exercises.lesson09": "lessons.l09_distributed.tryit",
    "dist_tools": "lessons.l09_distributed.dist_tools",
    "rank_runner": "lessons.l09_distributed.rank_runner",
    "labchecks.lab07_ddp": "lessons.l09_distributed.lab07_ddp",
    "exercises.lesson10": "lessons.l10_ledger.tryit",
}
_OLD_PACKAGES = {"labchecks", "exercises"}  # removed packages: their submodules are aliased one by one


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str | None) -> None:
        self.new = new
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.new is None:  # an old package: an empty one, so its submodules can be found
            module = types.ModuleType(spec.name, "moved: see torchcontracts._moved")
            module.__path__ = []
            return module
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # importlib has just set ``__spec__`` to the alias's spec on the shared module object; give the module
        # back its own (the new name, its real loader), or reloading or inspecting it would see the old name
        if self.new is not None:
            module.__spec__ = self.own_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("torchcontracts."):
            return None
        old = fullname[len("torchcontracts.") :]
        if old in _OLD_PACKAGES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(None), is_package=True)
        if old in MOVED:
            return importlib.util.spec_from_loader(fullname, _AliasLoader("torchcontracts." + MOVED[old]))
        return None


def install() -> None:
    """Put the finder on ``sys.meta_path`` once; it answers only the old names above."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
