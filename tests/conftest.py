"""Test set-up: CPU only, with 4 virtual CPU devices standing in for a GPU cluster.

This must run before anything initialises the JAX backend; pytest imports
conftest.py before the test modules.
"""

import os
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")
warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")
