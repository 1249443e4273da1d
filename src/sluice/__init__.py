"""sluice: Bayesian inference on JAX past the accelerator's memory.

Chunked MCMC whose draws leave the device in chunks, streaming posterior
statistics computed on the device, and particle-parallel variational
inference, for log-densities written for one point.
"""

from sluice import stats
from sluice.engine import sample
from sluice.kernels import HMC, NUTS, hmc, nuts
from sluice.model import Model
from sluice.run import Run

__version__ = "0.1.0"

__all__ = ["HMC", "NUTS", "Model", "Run", "hmc", "nuts", "sample", "stats"]
