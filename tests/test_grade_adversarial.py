"""The adversarial submissions graded with ``--sandbox bwrap``; the tests themselves are in ``adversarial_suite.py``."""

from __future__ import annotations

import pytest

from adversarial_suite import *  # noqa: F401,F403 - the shared tests, collected here against this file's batch
from adversarial_suite import grade_batch
from torchcontracts.grading.sandbox import bwrap_path


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    return grade_batch("bwrap", tmp_path_factory)
