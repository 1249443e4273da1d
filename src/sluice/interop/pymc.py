"""Sample a PyMC model with sluice: :func:`from_pymc`, and :func:`sample`, a drop-in for
``pm.sample`` inside ``with model:``.

The adapter goes through PyMC's own JAX export (``pymc.sampling.jax``, the path
``pm.sample(nuts_sampler="numpyro")`` takes) and hands sluice pure functions of ONE
unconstrained point, ``{value variable name: array}``; docs/adapters.md tables how
each piece maps onto PyMC's. An adapted model runs in the model's own precision.
PyMC is imported only when :func:`from_pymc` or :func:`sample` is called.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax import compile as programs
from sluice._version import __version__
from sluice.model import Model
from sluice.runtime import sampling

__all__ = ["from_pymc", "sample"]

JITTER_MAX_RETRIES = 10  # as pm.sample's default


def _require_pymc() -> tuple[Any, Any]:
    """Import ``pymc`` and ``pymc.sampling.jax``, keeping ``XLA_FLAGS`` unchanged (the
    latter rewrites them to ask for 100 CPU devices)."""
    flags = os.environ.get("XLA_FLAGS")
    try:
        import pymc
        import pymc.sampling.jax as pymc_jax
    except ImportError as err:
        raise ImportError(
            f"sluice.from_pymc needs PyMC, which is not installed (or failed to import: "
            f"{err}); install it with: pip install 'sluice[pymc]'"
        ) from err
    finally:
        if flags is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = flags
    return pymc, pymc_jax


def from_pymc(
    model: Any = None,
    *,
    log_likelihood: bool = True,
    jitter: bool = True,
    name: str | None = None,
) -> Model:
    """A :class:`sluice.Model` for a PyMC model.

    With ``u`` the model's value variables in unconstrained space, ``T`` PyMC's
    transforms onto each variable's support and ``p`` the joint density of the
    free and observed variables, sluice samples

    .. math:: \\log \\pi(u) = \\log p(T(u), y) + \\log |\\det J_T(u)|

    and records the free variables ``T(u)`` and the deterministics.

    Parameters
    ----------
    model
        A ``pymc.Model``; default: the model of the enclosing ``with`` block.
    log_likelihood
        Record the pointwise log-likelihood of each observed variable (ArviZ's
        ``log_likelihood`` group, for LOO and WAIC), at one evaluation of the
        likelihood per draw.
    jitter
        Start each chain at the model's initial point plus ``U(-1, 1)`` jitter
        in unconstrained space (``pm.sample``'s default); ``False`` starts every
        chain at the initial point itself.
    name
        A label for progress bars and stores; default the model's name, or
        ``"pymc_model"``.

    Returns
    -------
    sluice.Model
        ``transform`` records the free variables and deterministics under their
        PyMC names; ``observed_data``, ``dims`` and ``coords`` are PyMC's.

    Raises
    ------
    ValueError
        If a free variable is discrete, if the model has no free variable, or
        if the model is float64 while JAX runs in 32-bit mode.

    Examples
    --------
    >>> import numpy as np, pymc as pm, sluice
    >>> with pm.Model(coords={"obs": range(5)}) as normal_mean:
    ...     mu = pm.Normal("mu", 0.0, 10.0)
    ...     sigma = pm.HalfNormal("sigma", 5.0)
    ...     y = pm.Normal("y", mu, sigma, observed=[0.3, -1.2, 0.8, 1.9, 0.1], dims="obs")
    >>> model = sluice.from_pymc(normal_mean)
    >>> run = sluice.sample(model, chains=2, warmup=200, draws=200, progress=False)
    >>> sorted(run.draws), run.draws["sigma"].shape, run.log_likelihood["y"].shape
    (['mu', 'sigma'], (2, 200), (2, 200, 5))
    >>> model.dims
    {'y': ['obs']}
    """
    pm, pymc_jax = _require_pymc()
    from pymc.backends.arviz import coords_and_dims_for_inferencedata, find_observations
    from pymc.util import get_default_varnames

    model = pm.modelcontext(model)
    if not isinstance(model, pm.Model):
        raise TypeError(f"model must be a pymc.Model, got {model!r}")
    label = name or model.name or "pymc_model"
    _check_free_variables(pm, model, label)

    value_vars = list(model.value_vars)
    names = [v.name for v in value_vars]
    _check_precision(value_vars, label)

    logp_graph = pymc_jax.get_jaxified_graph(inputs=value_vars, outputs=[model.logp()])
    recorded = get_default_varnames(model.unobserved_value_vars, include_transformed=False)
    recorded_names = [v.name for v in recorded]
    draws_graph = pymc_jax.get_jaxified_graph(inputs=value_vars, outputs=recorded)

    def _args(theta: dict[str, jax.Array]) -> list[jax.Array]:
        return [theta[n] for n in names]

    def log_density(theta: dict[str, jax.Array]) -> jax.Array:
        return logp_graph(*_args(theta))[0]

    def transform(theta: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return dict(zip(recorded_names, draws_graph(*_args(theta)), strict=True))

    log_likelihood_fn = None
    observed_rvs = list(model.observed_RVs)
    if log_likelihood and observed_rvs:
        pointwise = model.logp(observed_rvs, sum=False)
        ll_graph = pymc_jax.get_jaxified_graph(inputs=value_vars, outputs=pointwise)
        ll_names = [rv.name for rv in observed_rvs]

        def log_likelihood_fn(theta: dict[str, jax.Array]) -> dict[str, jax.Array]:
            return dict(zip(ll_names, ll_graph(*_args(theta)), strict=True))

    start = model.initial_point()
    base = {n: jnp.asarray(start[n]) for n in names}
    init = _jittered_init(base, log_density) if jitter else base

    coords, dims = coords_and_dims_for_inferencedata(model)
    observed = {k: np.asarray(v) for k, v in find_observations(model).items()}
    return Model(
        log_density=log_density,
        init=init,
        transform=transform,
        log_likelihood=log_likelihood_fn,
        observed_data=observed or None,
        dims={k: list(v) for k, v in dims.items()},
        coords={k: np.asarray(v) for k, v in coords.items()},
        name=label,
        calling="pytree",
    )


def _jittered_init(
    base: dict[str, jax.Array],
    log_density: Callable[[dict[str, jax.Array]], jax.Array],
) -> Callable[[jax.Array], dict[str, jax.Array]]:
    """``init(rng_key)``: ``base`` + U(-1, 1), redrawn until the log density is finite."""

    def draw(key: jax.Array) -> dict[str, jax.Array]:
        keys = jax.random.split(key, len(base))
        return {
            n: x + jax.random.uniform(k, x.shape, x.dtype, -1.0, 1.0)
            for (n, x), k in zip(base.items(), keys, strict=True)
        }

    def attempt(carry: tuple) -> tuple:
        i, key, _, _ = carry
        key, sub = jax.random.split(key)
        point = draw(sub)
        return i + 1, key, point, jnp.isfinite(log_density(point))

    def retry(carry: tuple) -> jax.Array:
        i, _, _, finite = carry
        return (i <= JITTER_MAX_RETRIES) & ~finite

    def init(rng_key: jax.Array) -> dict[str, jax.Array]:
        first = attempt((0, rng_key, base, jnp.bool_(False)))
        return jax.lax.while_loop(retry, attempt, first)[2]

    # Run once per chain, a few log densities each: compiled for a quick compile.
    return jax.jit(init, compiler_options=programs.compile_options(base))


def _check_free_variables(pm: Any, model: Any, label: str) -> None:
    free = list(model.free_RVs)
    if not free:
        raise ValueError(f"PyMC model {label!r} has no free variable to sample")
    for rv in free:
        if rv.type.dtype in pm.vartypes.discrete_types:
            op = type(rv.owner.op).__name__ if rv.owner is not None else "?"
            raise ValueError(
                f"free variable {rv.name!r} of PyMC model {label!r} is discrete "
                f"({op}, dtype {rv.type.dtype}); sluice samples continuous parameters with "
                "gradient-based kernels. Marginalise it out (e.g. pm.Mixture, or "
                "pymc_extras.marginalize) or observe it."
            )


def _check_precision(value_vars: Sequence[Any], label: str) -> None:
    wide = [v.name for v in value_vars if v.type.dtype == "float64"]
    if wide and not jax.config.jax_enable_x64:
        raise ValueError(
            f"PyMC model {label!r} is float64 (value variables {wide}; "
            "pytensor.config.floatX='float64') but JAX runs in 32-bit mode, which would "
            "silently round it: call jax.config.update('jax_enable_x64', True) first, or "
            "build the model with pytensor.config.floatX = 'float32'"
        )


def sample(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    target_accept: float = 0.8,
    random_seed: Any = None,
    model: Any = None,
    *,
    progressbar: bool = True,
    idata_kwargs: dict[str, Any] | None = None,
    init: str = "jitter+adapt_diag",
    discard_tuned_samples: bool = True,
    return_inferencedata: bool = True,
    **options: Any,
) -> Any:
    """``pm.sample`` with sluice: NUTS in compiled chunks, returning ``arviz.InferenceData``.

    Use it inside ``with model:`` (or pass ``model=``) as ``pm.sample``::

        with pm.Model() as model:
            ...
            idata = sluice.pymc.sample(draws=1000, tune=1000, chains=4, random_seed=1)

    The groups are named as ``pm.sample(nuts_sampler="numpyro")`` names them.

    Parameters
    ----------
    draws, tune, chains, target_accept
        As ``pm.sample``: draws kept and tuning (warmup) iterations per chain,
        chains, and NUTS's target acceptance.
    random_seed
        An integer, a ``numpy.random.Generator``, or ``None`` (a fresh seed).
    model
        The PyMC model; default the enclosing ``with`` block's.
    progressbar
        Show progress.
    idata_kwargs
        ``{"log_likelihood": True}`` records the pointwise log-likelihood.
    init
        ``"jitter+adapt_diag"`` (``pm.sample``'s default: jittered starting
        points) or ``"adapt_diag"`` (the model's initial point); sluice's
        warmup adapts a diagonal metric either way.
    discard_tuned_samples, return_inferencedata
        Must be ``True``: sluice keeps no tuning draws and returns
        ``InferenceData``.
    **options
        sluice's options, passed to :func:`sluice.sample`: ``sink``,
        ``chunk_size``, ``num_chunks``, ``stats``, ``default_stats``,
        ``kernel``, ``chain_method``, ``devices``, ``max_tree_depth``,
        ``dense_mass``, ``mass_matrix``, ``until``. ``cores``,
        ``compute_convergence_checks`` and ``keep_warning_stat`` are accepted
        and ignored.

    Returns
    -------
    arviz.InferenceData
    """
    if not discard_tuned_samples:
        raise ValueError(
            "discard_tuned_samples=False is not supported: sluice keeps no tuning draws"
        )
    if not return_inferencedata:
        raise ValueError(
            "return_inferencedata=False is not supported: sluice returns InferenceData"
        )
    if init not in ("jitter+adapt_diag", "adapt_diag"):
        raise ValueError(
            f"init must be 'jitter+adapt_diag' or 'adapt_diag', got {init!r} (sluice adapts its "
            "own metric: mass_matrix='auto', 'diag', 'dense' or 'low_rank')"
        )
    for name in ("cores", "compute_convergence_checks", "keep_warning_stat"):  # ignored
        options.pop(name, None)
    for name in ("nuts_sampler", "step", "nuts", "callback", "trace", "blas_cores"):
        if name in options:
            raise TypeError(
                f"sluice.pymc.sample does not take pm.sample's {name}=; sluice runs its own "
                "NUTS (pass kernel=... for another sluice kernel)"
            )
    known = {"sink", "chunk_size", "num_chunks", "stats", "default_stats", "kernel",
             "chain_method", "devices", "max_tree_depth", "dense_mass", "mass_matrix",
             "until"}  # fmt: skip
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"sluice.pymc.sample got unknown argument(s) {unknown}")
    idata_kwargs = dict(idata_kwargs or {})
    log_likelihood = bool(idata_kwargs.pop("log_likelihood", False))
    if idata_kwargs:
        raise TypeError(f"idata_kwargs {sorted(idata_kwargs)} are not supported by sluice")
    adapted = from_pymc(model, log_likelihood=log_likelihood, jitter=init == "jitter+adapt_diag")
    run = sampling.sample(
        adapted,
        chains=chains,
        warmup=tune,
        draws=draws,
        target_accept=target_accept,
        seed=_seed(random_seed),
        progress=progressbar,
        **options,
    )
    idata = run.to_arviz()
    idata.posterior.attrs.update(
        inference_library="sluice",
        inference_library_version=__version__,
        sampling_time=run.info.warmup_seconds + run.info.sampling_seconds,
        tuning_steps=tune,
    )
    return idata


def _seed(random_seed: Any) -> int:
    """An int seed from ``pm.sample``'s ``random_seed`` (int, Generator or None)."""
    if random_seed is None or isinstance(random_seed, np.random.Generator):
        return int(np.random.default_rng(random_seed).integers(2**31))  # (a Generator as it is)
    if isinstance(random_seed, int | np.integer) and not isinstance(random_seed, bool):
        return int(random_seed)
    raise TypeError(
        f"random_seed must be an int, a numpy.random.Generator or None, got {random_seed!r}"
    )
