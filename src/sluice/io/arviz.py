"""Conversion of a run to ``arviz.InferenceData``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "constant_dataset",
    "dataset",
    "dim_names",
    "groups",
    "import_arviz",
    "to_datatree",
    "to_inference_data",
]


def dataset(values: dict[str, np.ndarray], dims: dict | None, coords: dict | None) -> Any:
    """``{name: (chain, draw, ...)}`` as an xarray Dataset with ArviZ's dims and coords."""
    import xarray as xr

    variables = {
        name: (("chain", "draw", *dim_names(name, array.ndim - 2, dims)), array)
        for name, array in values.items()
    }
    chain = np.arange(next(iter(values.values())).shape[0]) if values else np.arange(0)
    draw = np.arange(next(iter(values.values())).shape[1]) if values else np.arange(0)
    return _with_coords(xr.Dataset(variables, coords={"chain": chain, "draw": draw}), coords)


def import_arviz() -> Any:
    """Import ArviZ without its import-time notice about the 1.x refactor."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")
        import arviz

    return arviz


def groups(run: Any) -> dict[str, Any]:
    """ArviZ's groups of a run with draws, as xarray Datasets."""
    model = run.model
    groups = {
        "posterior": dataset(run.draws, model.dims, model.coords),
        "sample_stats": dataset(run.sample_stats, None, None),
    }
    if run.log_likelihood:
        groups["log_likelihood"] = dataset(run.log_likelihood, model.dims, model.coords)
    if model.observed_data:
        groups["observed_data"] = constant_dataset(model.observed_data, model.dims, model.coords)
    return groups


def to_inference_data(run: Any) -> Any:
    """Posterior, sample_stats and log_likelihood (and observed_data) of a run with draws."""
    return import_arviz().InferenceData(**groups(run))


def to_datatree(run: Any) -> Any:
    """The same groups as an ``xarray.DataTree``, in ArviZ 1.x's layout (one child node
    per group: what ``arviz-base`` 1.x reads)."""
    import xarray as xr

    return xr.DataTree.from_dict(groups(run))


def dim_names(name: str, ndim: int, dims: dict | None) -> tuple[str, ...]:
    """The model's dims for ``name``, completed with ArviZ's ``{name}_dim_{i}``."""
    named = list((dims or {}).get(name, []))[:ndim]
    return tuple(named + [f"{name}_dim_{i}" for i in range(len(named), ndim)])


def constant_dataset(values: dict[str, Any], dims: dict | None, coords: dict | None) -> Any:
    """Arrays without chain and draw axes (``observed_data``) with the model's dims and coords."""
    import xarray as xr

    ds = xr.Dataset(
        {name: (dim_names(name, np.ndim(v), dims), np.asarray(v)) for name, v in values.items()}
    )
    return _with_coords(ds, coords)


def _with_coords(ds: Any, coords: dict | None) -> Any:
    for dim, values in (coords or {}).items():
        if dim in ds.dims:
            ds = ds.assign_coords({dim: np.asarray(values)})
    return ds
