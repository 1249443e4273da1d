"""Models: a log-density written for one point, plus what to record of each draw.

A :class:`Model` is pure functions of ONE unconstrained parameter value (a
pytree); the engine adds chains and particles. Internally the parameter pytree is
flattened to one ``(dim,)`` vector (:class:`FlatModel`), and the data a model
closes over is hoisted out of the functions (:func:`_hoist`) and passed to
compiled code as arguments, so a new data set of the same shapes reuses the program.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from sluice._jax import random
from sluice._jax.closure import closure_convert
from sluice._jax.tree import PyTree, as_named, path_name
from sluice.calling import CALLINGS, numbers_to_array, resolve_calling

__all__ = ["FlatModel", "Model", "as_model"]


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A posterior written for a single unconstrained parameter value.

    Parameters
    ----------
    log_density
        The unnormalised log density of one point in unconstrained space: a
        function of keyword arguments named as ``init``'s keys, of one array, or
        of one pytree shaped like ``init`` (:mod:`sluice.calling`).
    init
        Where chains start: a pytree of float arrays (one point, shared by all
        chains; lists of numbers become arrays), or a function ``init(rng_key)
        -> pytree`` called once per chain with a key derived from the seed and
        the chain index.
    transform
        ``transform(theta) -> {name: array}``: the quantities recorded as draws
        (constrained parameters and deterministics), called as ``log_density``
        is. Defaults to ``theta`` itself, named by its pytree paths (a bare
        array is named after ``log_density``'s parameter, else ``"x"``).
    log_likelihood
        ``log_likelihood(theta) -> {name: array}``: pointwise log-likelihood of
        each observed variable, for ArviZ's ``log_likelihood`` group (LOO, WAIC).
    observed_data
        ``{name: array}`` for ArviZ's ``observed_data`` group.
    dims, coords
        ArviZ dims (``{name: [dim, ...]}``) and coords (``{dim: values}``) for
        the recorded quantities.
    name
        A label used in progress bars and stores.
    calling
        ``"auto"`` (the rule above), or ``"pytree"``, ``"keywords"``, ``"array"``
        to force one way of calling the model's functions.

    Examples
    --------
    >>> import jax.numpy as jnp, sluice
    >>> model = sluice.Model(
    ...     log_density=lambda p: -0.5 * jnp.sum(p["mu"] ** 2) - 0.5 * p["log_s"] ** 2,
    ...     init={"mu": jnp.zeros(3), "log_s": jnp.zeros(())},
    ...     transform=lambda p: {"mu": p["mu"], "s": jnp.exp(p["log_s"])},
    ... )
    >>> sorted(model.flatten().draw_shapes())
    ['mu', 's']
    """

    log_density: Callable[[PyTree], jax.Array]
    init: PyTree | Callable[[jax.Array], PyTree]
    transform: Callable[[PyTree], Any] | None = None
    log_likelihood: Callable[[PyTree], Any] | None = None
    observed_data: Mapping[str, Any] | None = None
    dims: Mapping[str, list[str]] | None = None
    coords: Mapping[str, Any] | None = None
    name: str = "model"
    calling: str = "auto"

    def __post_init__(self) -> None:
        if self.calling not in CALLINGS:
            raise ValueError(f"calling must be one of {CALLINGS}, got {self.calling!r}")
        if not callable(self.log_density):
            raise TypeError(
                f"log_density must be a function of one parameter value, got {self.log_density!r}"
            )
        for field in ("transform", "log_likelihood"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"{field} must be a function or None, got {value!r}")

    def example_point(self) -> PyTree:
        """One point with the structure, shapes and dtypes of the parameters."""
        return _check_init(self.init(jax.random.PRNGKey(0)) if callable(self.init) else self.init)

    def example_structure(self) -> PyTree:
        """A point with the structure, shapes and dtypes of :meth:`example_point`,
        without calling a function ``init`` (its values are zeros then): enough to
        trace the model. A function ``init`` may be a compiled program (the PyMC
        adapter's jittered start), whose compile need not wait here."""
        if not callable(self.init):
            return self.example_point()
        key = jax.eval_shape(jax.random.PRNGKey, 0)  # a key's shape: JAX's PRNGKey compiles
        shapes = jax.eval_shape(self.init, key)
        return _check_init(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))

    def initial_points(self, rng_key: jax.Array, chain_ids: np.ndarray) -> PyTree:
        """Starting points, one per chain, stacked along a leading chain axis (NumPy
        arrays): a function ``init`` called with ``fold_in(rng_key, chain_id)``. The
        keys are folded and the points stacked on the host, where JAX's eager
        operations would each compile a small program."""
        n = len(chain_ids)
        if callable(self.init):
            keys = _chain_keys(rng_key, chain_ids)
            points = [_check_init(self.init(k)) for k in keys]
            return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *points)
        point = _check_init(self.init)
        return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))), point)

    def flatten(self) -> FlatModel:
        """The flat-vector form used by kernels (traced once per model)."""
        return self._flat

    @functools.cached_property
    def _flat(self) -> FlatModel:
        return FlatModel.from_model(self)


def as_model(model: Model | Callable[[PyTree], jax.Array], init: PyTree | None = None) -> Model:
    """Accept a :class:`Model` or a plain log-density function (with ``init``)."""
    if isinstance(model, Model):
        return model if init is None else dataclasses.replace(model, init=init)
    if callable(model):
        if init is None:
            raise TypeError(
                "init is required when the model is a plain log-density function: "
                "pass init=<one parameter value>, e.g. init={'beta': jnp.zeros(10)}"
            )
        return Model(log_density=model, init=init)
    raise TypeError(f"model must be a sluice.Model or a log-density function, got {model!r}")


def _chain_keys(rng_key: Any, chain_ids: np.ndarray) -> list[jax.Array]:
    """``jax.random.fold_in(rng_key, c)`` for every chain id ``c``: on the host for a
    raw Threefry key (``random.host_fold_in``, bit for bit), with JAX otherwise."""
    typed = hasattr(rng_key, "dtype") and jnp.issubdtype(rng_key.dtype, jax.dtypes.prng_key)
    key = None if typed else np.asarray(rng_key)
    if key is not None and key.shape == (2,) and key.dtype == np.uint32:
        return [jnp.asarray(random.host_fold_in(key, int(c))) for c in chain_ids]
    return list(jax.vmap(lambda c: jax.random.fold_in(rng_key, c))(jnp.asarray(chain_ids)))


def _check_init(point: PyTree) -> PyTree:
    point = numbers_to_array(point)
    leaves = jax.tree_util.tree_flatten_with_path(point)[0]
    if not leaves:
        raise TypeError(f"init must be a pytree of float arrays, got an empty pytree: {point!r}")
    out = []
    for path, leaf in leaves:
        where = path_name(path) or "init"
        if isinstance(leaf, float):
            leaf = jnp.asarray(leaf, dtype=jnp.result_type(float))
        if not hasattr(leaf, "dtype") or not hasattr(leaf, "shape"):
            raise TypeError(
                f"init must be a pytree of float arrays; leaf {where!r} is {type(leaf).__name__}: {leaf!r}"
            )
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            raise TypeError(
                f"init must be a pytree of float arrays; leaf {where!r} has dtype {leaf.dtype} "
                f"(value {leaf!r}). Use e.g. jnp.zeros(..., dtype=float)."
            )
        out.append(jnp.asarray(leaf))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(point), out)


def _hoist(fn: Callable, example: jax.Array) -> tuple[Callable, tuple[jax.Array, ...], str]:
    """Trace ``fn(example)`` and return ``(fn_h(consts, x), consts, fingerprint)``.

    ``fn_h`` evaluates the traced program with the closed-over arrays passed in
    as ``consts`` (:func:`sluice._jax.closure.closure_convert`);
    ``fingerprint`` identifies the program up to those values.

    ``fn_h`` is a ``jax.jit`` function: a run traces the model into several
    programs (the chains' start, the chunk program, the warmup's window ends),
    and JAX keeps the trace of a jitted function, and of its gradient, for the
    next program. Replayed instead, a TFP log density of Inference Gym took
    0.3-0.4 s to differentiate in each program, the jitted one 3 ms after the first.
    """
    fn_h, consts, jaxpr = closure_convert(fn, example)
    consts = tuple(jnp.asarray(c) for c in consts)
    shapes = ",".join(f"{c.dtype}{c.shape}" for c in consts)
    return jax.jit(fn_h), consts, f"{jaxpr}|{shapes}"


@dataclasses.dataclass(frozen=True, eq=False)
class FlatModel:
    """A :class:`Model` on one flat ``(dim,)`` vector, with its data hoisted out.

    All functions take ``consts`` (the model's data) first, then one flat point.
    """

    dim: int
    dtype: np.dtype
    unravel: Callable[[jax.Array], PyTree]
    logdensity_fn: Callable[[Any, jax.Array], jax.Array]
    draws_fn: Callable[[Any, jax.Array], dict[str, jax.Array]]
    log_likelihood_fn: Callable[[Any, jax.Array], dict[str, jax.Array]] | None
    consts: tuple[Any, ...]
    fingerprint: str

    @classmethod
    def from_model(cls, model: Model) -> FlatModel:
        point = model.example_structure()
        flat, unravel = ravel_pytree(point)
        calling = resolve_calling(model.log_density, point, model.calling)
        default_name = calling.name or "x"

        def traced(label: str, fn: Callable, wrap: Callable) -> tuple:
            how = calling if fn is model.log_density else resolve_calling(fn, point, model.calling)
            try:
                return _hoist(lambda x: wrap(how(fn, unravel(x))), flat)
            except Exception as error:
                error.add_note(how.describe(label, point))
                raise

        ld, ld_c, ld_fp = traced("log_density", model.log_density, jnp.asarray)
        _check_scalar(ld, ld_c, flat)
        named = as_named(lambda v: v, default_name)
        if model.transform is None:
            dr, dr_c, dr_fp = _hoist(lambda x: named(unravel(x)), flat)
        else:
            dr, dr_c, dr_fp = traced("transform", model.transform, named)
        if model.log_likelihood is not None:
            ll, ll_c, ll_fp = traced(
                "log_likelihood", model.log_likelihood, as_named(lambda v: v, "y")
            )
        else:
            ll, ll_c, ll_fp = None, (), ""
        fingerprint = hashlib.sha256(
            f"{flat.dtype}{flat.shape}|{ld_fp}|{dr_fp}|{ll_fp}".encode()
        ).hexdigest()
        return cls(
            dim=int(flat.shape[0]),
            dtype=np.dtype(flat.dtype),
            unravel=unravel,
            logdensity_fn=lambda c, x: ld(c[0], x),
            draws_fn=lambda c, x: dr(c[1], x),
            log_likelihood_fn=(lambda c, x: ll(c[2], x)) if ll is not None else None,
            consts=(ld_c, dr_c, ll_c),
            fingerprint=fingerprint,
        )

    def data_hash(self) -> str:
        """A hash of the data values (the hoisted constants), to recognise the same data."""
        digest = hashlib.sha256()
        for leaf in jax.tree.leaves(self.consts):
            if jnp.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)  # typed keys have no NumPy form
            array = np.ascontiguousarray(np.asarray(leaf))
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()

    def draw_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """``{name: ShapeDtypeStruct}`` of one recorded draw."""
        x = jax.ShapeDtypeStruct((self.dim,), self.dtype)
        return jax.eval_shape(self.draws_fn, self.consts, x)

    def log_likelihood_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        if self.log_likelihood_fn is None:
            return {}
        x = jax.ShapeDtypeStruct((self.dim,), self.dtype)
        return jax.eval_shape(self.log_likelihood_fn, self.consts, x)


def _check_scalar(ld: Callable, consts: Any, flat: jax.Array) -> None:
    out = jax.eval_shape(ld, consts, flat)
    if out.shape != ():
        raise ValueError(
            f"log_density must return a scalar for one parameter value, got shape {out.shape}. "
            "Write it for ONE point (sluice batches it), and sum over data points."
        )
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise TypeError(f"log_density must return a float scalar, got dtype {out.dtype}")


def _non_finite_names(tree: PyTree, limit: int = 6) -> list[str]:
    """``init['beta'][3] is nan``, ...: the non-finite elements of ``tree``."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        base = "init" + "".join(
            f"[{k.key!r}]" if isinstance(k, jax.tree_util.DictKey)
            else f"[{k.idx}]" if isinstance(k, jax.tree_util.SequenceKey)
            else f".{k.name}" if isinstance(k, jax.tree_util.GetAttrKey)
            else f"[{k}]"
            for k in path
        )  # fmt: skip
        leaf = np.asarray(leaf)
        for index in np.argwhere(~np.isfinite(leaf)):
            suffix = f"[{', '.join(str(int(i)) for i in index)}]" if leaf.ndim else ""
            out.append(f"{base}{suffix} is {leaf[tuple(index)]}")
            if len(out) == limit:
                return [*out, "..."]
    return out


def check_initial_values(
    flat_model: FlatModel, values: Any, grads: Any, positions: Any = None
) -> None:
    """Raise if a starting point, its log density (``(chains,)``) or its gradient
    (``(chains, dim)``) is not finite, naming the chain and the elements (the engine
    passes what its init program computed, so the check compiles nothing of its own)."""
    values, grads = np.asarray(values), np.asarray(grads)
    for chain in range(values.shape[0]):
        if not np.isfinite(values[chain]):
            where = ""
            if positions is not None:
                point = flat_model.unravel(np.asarray(positions[chain]))
                named = _non_finite_names(point)
                if named:
                    raise ValueError(
                        f"the starting point of chain {chain} is not finite: " + ", ".join(named)
                    )
                flat = np.asarray(ravel_pytree(point)[0])
                where = f" at {np.array2string(flat, threshold=6, precision=4)}"
            raise ValueError(
                f"log_density(init) is {values[chain]} for chain {chain}{where}. Start the "
                "chains where the density is positive (check init and the support of each "
                "parameter)."
            )
        if not np.all(np.isfinite(grads[chain])):
            tree = flat_model.unravel(np.asarray(grads[chain]))
            named = [n.replace("init", "the gradient at init", 1) for n in _non_finite_names(tree)]
            raise ValueError(
                f"the gradient of log_density at the starting point of chain {chain} is not "
                f"finite: {', '.join(named)}. Move init away from the edge of the support."
            )
