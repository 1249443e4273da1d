"""sluice: Bayesian inference on JAX past the accelerator's memory.

Chunked MCMC whose draws leave the device in chunks, streaming posterior
statistics computed on the device, and particle-parallel variational
inference, for log-densities written for one point.
"""

import importlib

from sluice import kernels, stats, vi
from sluice._jax import cores as _cores
from sluice._version import __version__ as __version__
from sluice.io.store import ZarrSink
from sluice.io.store import open_store as open
from sluice.mcmc.kernels import HMC, NUTS, hmc, nuts
from sluice.model import Model
from sluice.runtime import distributed
from sluice.runtime.diagnostics import DiagnosticWarning
from sluice.runtime.run import Run
from sluice.runtime.sampling import resume, sample
from sluice.runtime.until import converged

# None of the imports above starts JAX's backend, so it is not too late to give it
# one CPU device per core (chains then run on every core; see sluice._jax.cores).
_cores.use_every_core()

__all__ = [
    "HMC",
    "NUTS",
    "DiagnosticWarning",
    "Model",
    "Run",
    "ZarrSink",
    "converged",
    "cpu_devices",
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


def cpu_devices() -> _cores.CpuDevices:
    """What ``import sluice`` did about JAX's CPU devices, and why.

    See docs/distributed.md ("Every core of a CPU"); ``requested`` is the count sluice
    set (``None``: it set nothing).
    """
    return _cores.choice()


# The adapters are imported on first use, so that `import sluice` needs neither library.
_ADAPTERS = {"from_numpyro": "sluice.interop.numpyro", "from_pymc": "sluice.interop.pymc"}


def __getattr__(name: str):
    if name in _ADAPTERS:
        return getattr(importlib.import_module(_ADAPTERS[name]), name)
    if name == "pymc":  # the module sluice.pymc (sample: pm.sample's drop-in), imported once
        return importlib.import_module("sluice.pymc")
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
