"""sluice: Bayesian inference on JAX past the accelerator's memory.

Chunked MCMC whose draws leave the device in chunks, streaming posterior
statistics computed on the device, and particle-parallel variational
inference, for log-densities written for one point.
"""

from sluice import distributed, stats, vi
from sluice.engine import resume, sample
from sluice.kernels import HMC, NUTS, hmc, nuts
from sluice.model import Model
from sluice.run import Run
from sluice.store import ZarrSink
from sluice.store import open_store as open

__version__ = "0.1.0"

__all__ = [
    "HMC",
    "NUTS",
    "Model",
    "Run",
    "ZarrSink",
    "distributed",
    "from_numpyro",
    "from_pymc",
    "hmc",
    "nuts",
    "open",
    "resume",
    "sample",
    "stats",
    "vi",
]


def __getattr__(name: str):
    # The adapters are imported on first use, so that `import sluice` needs neither library.
    if name == "from_numpyro":
        from sluice.numpyro import from_numpyro

        return from_numpyro
    if name == "from_pymc":
        from sluice.pymc import from_pymc

        return from_pymc
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
