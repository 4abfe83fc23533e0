"""Find a lab's tasks and public checks from its id, through the course manifest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from torchcontracts.course import package_of_lab

if TYPE_CHECKING:
    from torchcontracts.checks import LabSpec

__all__ = ["load", "module_name"]


def module_name(lab_id: str) -> str:
    """The dotted module of a lab's checks, e.g. ``torchcontracts.lessons.l01_tensors.lab01_strides``."""
    return package_of_lab(lab_id)


def load(lab_id: str) -> "LabSpec":
    """The lab's ``LabSpec`` (its ``lab``); KeyError for a lab the manifest does not list."""
    return importlib.import_module(module_name(lab_id)).lab
