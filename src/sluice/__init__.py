"""sluice: Bayesian inference on JAX past the accelerator's memory.

Chunked MCMC whose draws leave the device in chunks, streaming posterior
statistics computed on the device, and particle-parallel variational
inference, for log-densities written for one point.
"""

from sluice import kernels, stats, vi
from sluice._version import __version__ as __version__
from sluice.io.store import ZarrSink
from sluice.io.store import open_store as open
from sluice.mcmc.kernels import HMC, NUTS, hmc, nuts
from sluice.model import Model
from sluice.runtime import distributed
from sluice.runtime.run import Run
from sluice.runtime.sampling import resume, sample
from sluice.runtime.until import converged

__all__ = [
    "HMC",
    "NUTS",
    "Model",
    "Run",
    "ZarrSink",
    "converged",
    "distributed",
    "from_numpyro",
    "from_pymc",
    "hmc",
    "kernels",
    "nuts",
    "open",
    "pymc",
    "resume",
    "sample",
    "stats",
    "vi",
]


def __getattr__(name: str):
    # The adapters are imported on first use, so that `import sluice` needs neither library.
    if name == "from_numpyro":
        from sluice.interop.numpyro import from_numpyro

        return from_numpyro
    if name == "from_pymc":
        from sluice.interop.pymc import from_pymc

        return from_pymc
    if name == "pymc":  # sluice.pymc.sample: pm.sample's drop-in
        from sluice.interop import pymc

        return pymc
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
