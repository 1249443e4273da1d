"""Fixtures of the store tests."""

from __future__ import annotations

import pytest
from tests.helpers.store_checks import reference_run


@pytest.fixture(scope="module")
def reference():
    """The crash tests' run, uninterrupted, in memory (once per module)."""
    return reference_run()
