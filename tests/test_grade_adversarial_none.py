"""The adversarial submissions graded with ``--sandbox none``; the tests themselves are in ``adversarial_suite.py``."""

from __future__ import annotations

import pytest

from adversarial_suite import *  # noqa: F401,F403 - the shared tests, collected here against this file's batch
from adversarial_suite import grade_batch


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return grade_batch("none", tmp_path_factory)
