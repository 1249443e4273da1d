"""sluice for PyMC users: :func:`sample`, ``pm.sample``'s drop-in, and :func:`from_pymc`.

The adapter itself is :mod:`sluice.interop.pymc`; PyMC is imported when one of them
is called.

Examples
--------
>>> import pymc as pm
>>> from sluice.pymc import sample
>>> with pm.Model():
...     mu = pm.Normal("mu", 0.0, 10.0)
...     y = pm.Normal("y", mu, 1.0, observed=[0.3, -1.2, 0.8, 1.9, 0.1])
...     idata = sample(100, tune=100, chains=2, random_seed=1, progressbar=False)
>>> idata.posterior["mu"].shape
(2, 100)
"""

from sluice.interop.pymc import from_pymc, sample

__all__ = ["from_pymc", "sample"]
