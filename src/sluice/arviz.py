"""Conversion of a run to ``arviz.InferenceData``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dataset", "import_arviz", "to_inference_data"]


def dataset(values: dict[str, np.ndarray], dims: dict | None, coords: dict | None) -> Any:
    """``{name: (chain, draw, ...)}`` as an xarray Dataset with ArviZ's dims and coords."""
    import xarray as xr

    variables = {}
    for name, array in values.items():
        extra = list((dims or {}).get(name, []))
        extra += [f"{name}_dim_{i}" for i in range(len(extra), array.ndim - 2)]
        variables[name] = (("chain", "draw", *extra[: array.ndim - 2]), array)
    chain = np.arange(next(iter(values.values())).shape[0]) if values else np.arange(0)
    draw = np.arange(next(iter(values.values())).shape[1]) if values else np.arange(0)
    ds = xr.Dataset(variables, coords={"chain": chain, "draw": draw})
    for dim, values_ in (coords or {}).items():
        if dim in ds.dims:
            ds = ds.assign_coords({dim: np.asarray(values_)})
    return ds


def import_arviz() -> Any:
    """Import ArviZ without its import-time notice about the 1.x refactor."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")
        import arviz

    return arviz


def to_inference_data(run: Any) -> Any:
    """Posterior, sample_stats and log_likelihood (and observed_data) of a run with draws."""
    import xarray as xr

    az = import_arviz()

    model = run.model
    groups = {
        "posterior": dataset(run.draws, model.dims, model.coords),
        "sample_stats": dataset(run.sample_stats, None, None),
    }
    if run.log_likelihood:
        groups["log_likelihood"] = dataset(run.log_likelihood, model.dims, model.coords)
    if model.observed_data:
        groups["observed_data"] = xr.Dataset(
            {
                name: ([f"{name}_dim_{i}" for i in range(np.ndim(v))], np.asarray(v))
                for name, v in model.observed_data.items()
            }
        )
    return az.InferenceData(**groups)
