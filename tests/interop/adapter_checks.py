"""Shared checks for the adapter tests: two samplers agree within Monte Carlo error.

``assert_same_posterior`` compares the posterior mean and standard deviation of
every element of every variable: with MCSEs ``s1``, ``s2`` of the two
estimates (ArviZ, from each run's own draws), it requires
``|m1 - m2| <= Z * sqrt(s1**2 + s2**2)``. Z = 4.5 keeps the chance of a false
alarm over the few hundred checks of the adapter suites below 1e-3, while a
bias of a handful of MCSEs (a missing Jacobian, a wrong transform, a dropped
likelihood term) still fails.

``assert_same_structure`` compares the names, shapes, dims and coordinates of
the groups of two ``InferenceData``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from sluice.io.arviz import import_arviz

Z = 4.5
SAMPLE_DIMS = ("chain", "draw")


def moment_mismatches(ours: xr.Dataset, theirs: xr.Dataset, z: float = Z) -> list[str]:
    """Every (variable, element, moment) whose difference exceeds ``z`` combined MCSEs."""
    names = sorted(set(ours.data_vars) & set(theirs.data_vars))
    ours, theirs = ours[names].astype(np.float64), theirs[names].astype(np.float64)
    bad = []
    for moment, estimate in (
        ("mean", lambda ds: ds.mean(SAMPLE_DIMS)),
        ("sd", lambda ds: ds.std(SAMPLE_DIMS, ddof=1)),
    ):
        m1, m2 = estimate(ours), estimate(theirs)
        s1, s2 = _mcse(ours, moment), _mcse(theirs, moment)
        for name in names:
            a, b = np.atleast_1d(m1[name]), np.atleast_1d(m2[name])
            diff = np.abs(a - b)
            bound = z * np.sqrt(np.atleast_1d(s1[name]) ** 2 + np.atleast_1d(s2[name]) ** 2)
            for index in zip(*np.nonzero(~(diff <= bound)), strict=True):
                bad.append(
                    f"{moment} of {name}{list(index)}: {a[index]:.4g} vs {b[index]:.4g}, "
                    f"|diff| {diff[index]:.3g} > {z} x combined MCSE = {bound[index]:.3g}"
                )
    return bad


def _mcse(ds: xr.Dataset, method: str) -> xr.Dataset:
    """``az.mcse`` with ArviZ's Numba path off: with Numba installed (PyMC brings it)
    ArviZ 0.23.4's ``mcse(method="sd")`` calls ``float()`` on a 1-element array,
    which NumPy >= 2.4 refuses."""
    az = import_arviz()
    numba_was_on = bool(az.Numba.numba_flag)
    az.Numba.disable_numba()
    try:
        return az.mcse(ds, method=method)
    finally:
        if numba_was_on:
            az.Numba.enable_numba()


def assert_same_posterior(ours: xr.Dataset, theirs: xr.Dataset, z: float = Z) -> None:
    assert set(ours.data_vars) == set(theirs.data_vars)
    bad = moment_mismatches(ours, theirs, z)
    assert not bad, "posteriors differ beyond Monte Carlo error:\n" + "\n".join(bad)


def assert_same_structure(ours, theirs, groups=("posterior", "log_likelihood", "observed_data")):
    """Same variables, shapes, dims and coordinate values in each group."""
    for group in groups:
        assert hasattr(theirs, group), f"reference has no {group} group"
        assert hasattr(ours, group), f"sluice's InferenceData has no {group} group"
        a, b = getattr(ours, group), getattr(theirs, group)
        assert set(a.data_vars) == set(b.data_vars), (group, set(a.data_vars), set(b.data_vars))
        for name in b.data_vars:
            assert a[name].dims == b[name].dims, (group, name, a[name].dims, b[name].dims)
            assert a[name].shape == b[name].shape, (group, name, a[name].shape, b[name].shape)
            for dim in a[name].dims:
                if dim in SAMPLE_DIMS:
                    continue
                if dim in a.coords:
                    np.testing.assert_array_equal(np.asarray(a[dim]), np.asarray(b[dim]))
                elif dim in b.coords:  # ArviZ's default integer labels; sluice leaves them implicit
                    np.testing.assert_array_equal(np.asarray(b[dim]), np.arange(b.sizes[dim]))
