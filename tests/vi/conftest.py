"""VI tests run on CPU; the project's top-level conftest adds virtual devices."""

import os
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")
