"""Every public docstring example of ``sluice.stats`` runs.

Apart from ``test_stats_docs.py`` so that the two slow files can run on two
test workers at once (the suite distributes whole files).
"""

from __future__ import annotations

import doctest

import pytest


@pytest.mark.slow
def test_docstring_examples_run():
    """Every public docstring's example runs (they compile several statistics: slow)."""
    import importlib

    modules = ["_numerics", "base", "combinators", "moments", "streaming", "streaming_readout"]
    failures = 0
    for name in modules:
        module = importlib.import_module(f"sluice.stats.{name}")
        failures += doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed
    assert failures == 0
