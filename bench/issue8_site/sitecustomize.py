"""Put this folder first on PYTHONPATH to run any script with the engine change of issue 8.

Every Python process that starts with it on its path (the benchmark harness
starts one per measurement) applies :mod:`nuts_engine_patch` at start-up:
the adaptation receives kernel states, and ``chain_method="auto"`` uses
:func:`sluice.kernels.choose_chain_method`. Benchmark use only.

    PYTHONPATH=bench/issue8_site:src python path/to/bench/mcmc.py --models gaussian
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nuts_engine_patch

nuts_engine_patch.apply()
