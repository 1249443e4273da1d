"""Sample a NumPyro model with sluice: :func:`from_numpyro`.

The adapter asks NumPyro for everything model-specific (its bijections to
unconstrained space, its post-processing into latent and deterministic sites,
its init strategy, its log-likelihood and ``az.from_numpyro``'s dims) and gives
sluice pure functions of ONE unconstrained point; docs/adapters.md tables how
each piece maps onto NumPyro's. NumPyro is imported only when
:func:`from_numpyro` is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice.model import Model

__all__ = ["convert", "from_numpyro"]


def _require_numpyro() -> None:
    try:
        import numpyro.infer.util  # noqa: F401
    except ImportError as err:  # pragma: no cover - exercised in an environment without numpyro
        raise ImportError(
            "sluice.from_numpyro needs NumPyro, which is not installed; "
            "install it with: pip install 'sluice[numpyro]'"
        ) from err


def from_numpyro(model: Callable[..., Any], *args: Any, **kwargs: Any) -> Model:
    """A :class:`sluice.Model` for a NumPyro model called with ``*args, **kwargs``.

    Every argument after ``model`` is passed to the model, as in
    ``numpyro.infer.MCMC.run(rng_key, *args, **kwargs)``; for options use
    :func:`sluice.interop.numpyro.convert`. With ``p(z, y)`` the model's joint
    density, ``z`` its latent sites and ``T`` NumPyro's bijection from
    unconstrained space onto their support, sluice samples ``u`` from

    .. math:: \\log \\pi(u) = \\log p(T(u), y) + \\log |\\det J_T(u)|

    and records ``T(u)`` and the deterministic sites.

    Parameters
    ----------
    model
        A NumPyro model: a Python function whose ``numpyro.sample`` sites with
        ``obs=...`` are the data and the others are the parameters.
    *args, **kwargs
        The model's arguments (the data), fixed for the run.

    Returns
    -------
    sluice.Model
        ``transform`` records each latent site (constrained) and each
        deterministic site by its site name; ``log_likelihood`` gives the
        pointwise log-likelihood of each observed site; ``observed_data``,
        ``dims`` and ``coords`` fill ArviZ's groups as ``az.from_numpyro`` does.

    Raises
    ------
    ValueError
        If a latent site is discrete, if a plate subsamples its data, or if
        the model has no continuous latent site.

    Examples
    --------
    >>> import numpy as np, numpyro, numpyro.distributions as dist, sluice
    >>> def normal_mean(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    ...     sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    ...     with numpyro.plate("obs", y.shape[0]):
    ...         numpyro.sample("y", dist.Normal(mu, sigma), obs=y)
    >>> y = np.array([0.3, -1.2, 0.8, 1.9, 0.1], dtype=np.float32)
    >>> model = sluice.from_numpyro(normal_mean, y)
    >>> run = sluice.sample(model, chains=2, warmup=200, draws=200, progress=False)
    >>> sorted(run.draws), run.draws["sigma"].shape, run.log_likelihood["y"].shape
    (['mu', 'sigma'], (2, 200), (2, 200, 5))
    >>> model.dims
    {'y': ['obs']}
    """
    return convert(model, args, kwargs)


def convert(
    model: Callable[..., Any],
    model_args: tuple[Any, ...] = (),
    model_kwargs: Mapping[str, Any] | None = None,
    *,
    init_strategy: Callable[..., Any] | None = None,
    log_likelihood: bool = True,
    dims: Mapping[str, list[str]] | None = None,
    coords: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Model:
    """:func:`from_numpyro` with options.

    Parameters
    ----------
    model
        A NumPyro model.
    model_args, model_kwargs
        Its positional and keyword arguments.
    init_strategy
        A NumPyro init strategy, applied once per chain with that chain's key;
        default ``init_to_uniform``, as ``numpyro.infer.NUTS``.
    log_likelihood
        Record the pointwise log-likelihood of each observed site (ArviZ's
        ``log_likelihood`` group): one likelihood evaluation and ``num_data``
        values per draw.
    dims, coords
        ArviZ dims and coords; they update the dims inferred from the plates
        and the plates' integer coordinates.
    name
        A label for progress bars and stores; default the model function's name.

    Returns
    -------
    sluice.Model
        See :func:`from_numpyro`.

    Examples
    --------
    >>> import numpyro, numpyro.distributions as dist, sluice
    >>> from numpyro.infer import init_to_median
    >>> def scale(n):
    ...     with numpyro.plate("groups", n):
    ...         numpyro.sample("s", dist.LogNormal(0.0, 1.0))
    >>> model = sluice.interop.numpyro.convert(scale, (3,), init_strategy=init_to_median,
    ...                                coords={"groups": ["a", "b", "c"]})
    >>> model.dims, list(model.coords["groups"])
    ({'s': ['groups']}, ['a', 'b', 'c'])
    """
    _require_numpyro()
    from numpyro import handlers
    from numpyro.infer import init_to_uniform
    from numpyro.infer.util import constrain_fn, initialize_model, potential_energy

    if not callable(model):
        raise TypeError(f"model must be a NumPyro model (a function), got {model!r}")
    if not isinstance(model_args, tuple):
        raise TypeError(f"model_args must be a tuple, got {type(model_args).__name__}")
    model_kwargs = dict(model_kwargs or {})
    init_strategy = init_strategy if init_strategy is not None else init_to_uniform
    label = name or getattr(model, "__name__", None) or "numpyro_model"
    # A raw uint32 key (not a typed jax.random.key): it ends up among the
    # model's hoisted constants, which sluice hashes as plain arrays.
    fixed_key = jax.random.PRNGKey(0)

    # The model's structure, from one trace at a point of the init strategy, compiled
    # (one small program) rather than op by op; the values sluice keeps come out as outputs.
    captured: dict[str, Any] = {}

    def _structure() -> dict[str, jax.Array]:
        seeded = handlers.substitute(handlers.seed(model, fixed_key), substitute_fn=init_strategy)
        trace = handlers.trace(seeded).get_trace(*model_args, **model_kwargs)
        captured["trace"] = trace
        return {
            site_name: site["value"]
            for site_name, site in trace.items()
            if site["type"] in ("param", "mutable")
            or (site["type"] == "sample" and site["is_observed"])
        }

    values = jax.device_get(jax.jit(_structure)())
    structure = captured["trace"]
    _check_structure(structure, label)
    observed = {
        site_name: np.asarray(values[site_name])
        for site_name, site in structure.items()
        if site["type"] == "sample" and site["is_observed"]
    }
    # As numpyro.infer.MCMC does: numpyro.param / mutable sites keep their
    # initial values, and sites that ask for a key get a fixed one.
    fixed = {k: v for k, v in values.items() if k not in observed}
    prepared = handlers.substitute(handlers.seed(model, fixed_key), data=fixed)

    def log_density(theta: dict[str, jax.Array]) -> jax.Array:
        return -potential_energy(prepared, model_args, model_kwargs, theta)

    def transform(theta: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return constrain_fn(prepared, model_args, model_kwargs, theta, return_deterministic=True)

    log_likelihood_fn = None
    if observed and log_likelihood:

        def log_likelihood_fn(theta: dict[str, jax.Array]) -> dict[str, jax.Array]:
            # numpyro.infer.log_likelihood at one point: log_prob of each
            # observed site given the constrained latent values.
            trace = handlers.trace(handlers.substitute(prepared, data=transform(theta))).get_trace(
                *model_args, **model_kwargs
            )
            return {
                site_name: site["fn"].log_prob(site["value"])
                for site_name, site in trace.items()
                if site["type"] == "sample" and site["is_observed"]
            }

    @jax.jit
    def _init(rng_key: jax.Array) -> tuple[dict[str, jax.Array], jax.Array]:
        found = initialize_model(
            rng_key,
            model,
            init_strategy=init_strategy,
            model_args=model_args,
            model_kwargs=model_kwargs,
        ).param_info
        grad = jnp.concatenate([jnp.ravel(g) for g in jax.tree.leaves(found.z_grad)])
        valid = jnp.isfinite(found.potential_energy) & jnp.all(jnp.isfinite(grad))
        return found.z, valid

    def init(rng_key: jax.Array) -> dict[str, jax.Array]:
        """NumPyro's init strategy, for the chain whose key is ``rng_key``."""
        z, valid = _init(rng_key)
        if not isinstance(valid, jax.core.Tracer) and not bool(valid):
            raise ValueError(
                f"NumPyro's init strategy {getattr(init_strategy, '__name__', init_strategy)!r} "
                f"found no point where the log density of model {label!r} and its gradient "
                f"are finite in 100 tries (chain key {np.asarray(rng_key).tolist()}); check the "
                "priors' supports and the data, or pass another init_strategy to "
                "sluice.interop.numpyro.convert"
            )
        return z

    inferred_dims, inferred_coords = _plate_dims_and_coords(structure)
    inferred_dims.update(dims or {})
    inferred_coords.update(coords or {})
    return Model(
        log_density=log_density,
        init=init,
        transform=transform,
        log_likelihood=log_likelihood_fn,
        observed_data=observed or None,
        dims=inferred_dims,
        coords=inferred_coords,
        name=label,
        calling="pytree",
    )


def _check_structure(trace: Mapping[str, Any], label: str) -> None:
    """Raise, naming the site, for what sluice cannot sample."""
    latent = []
    for site_name, site in trace.items():
        if site["type"] == "plate":
            size, subsample_size = site["args"]
            if subsample_size is not None and subsample_size != size:
                raise ValueError(
                    f"plate {site_name!r} of NumPyro model {label!r} subsamples "
                    f"{subsample_size} of {size} items; sluice's MCMC needs the full data: "
                    f"remove subsample_size from numpyro.plate({site_name!r}, ...)"
                )
        if site["type"] != "sample" or site["is_observed"]:
            continue
        fn = site["fn"]
        if fn.support.is_discrete:
            raise ValueError(
                f"latent site {site_name!r} of NumPyro model {label!r} is discrete "
                f"({type(fn).__name__}); sluice samples continuous parameters with gradient-"
                "based kernels, and NumPyro's automatic enumeration of discrete sites is not "
                "supported. Marginalise it out by hand (e.g. a mixture with "
                "dist.MixtureSameFamily or a logsumexp factor) or observe it."
            )
        latent.append(site_name)
    if not latent:
        raise ValueError(
            f"NumPyro model {label!r} has no latent sample site to sample (every "
            "numpyro.sample site is observed)"
        )


def _plate_dims_and_coords(trace: Mapping[str, Any]) -> tuple[dict[str, list[str]], dict]:
    """ArviZ dims from plates (outermost first) and event dims, and plate coords."""
    dims: dict[str, list[str]] = {}
    coords: dict[str, Any] = {}
    for site_name, site in trace.items():
        if site["type"] == "plate":
            coords[site_name] = np.arange(site["args"][0])
        if site["type"] not in ("sample", "deterministic"):
            continue
        frames = sorted(site.get("cond_indep_stack", ()), key=lambda frame: frame.dim)
        names = [frame.name for frame in frames]
        names += list(site.get("infer", {}).get("event_dims", []))
        if names:
            dims[site_name] = names
    return dims, coords
