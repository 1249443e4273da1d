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
    "hmc",
    "nuts",
    "open",
    "resume",
    "sample",
    "stats",
    "vi",
]
