"""sluice, NumPyro and BlackJAX NUTS behind one call, on the same log-density.

Each ``run_<library>(target, settings, clock)`` samples ``target`` with NUTS
(diagonal mass matrix, Stan-style window adaptation, target acceptance 0.8,
the same maximum tree depth) and returns a :class:`SamplerRun`: the draws as
NumPy arrays ``(chain, draw, ...)``, phase times and gradient counts.

Times (``time.perf_counter``; device work awaited with ``block_until_ready``):

* ``wall_seconds`` — the whole library call(s), compilation included: what a
  user waits for;
* ``compile_seconds`` — JAX trace + lowering + XLA compile inside that call
  (:class:`harness.CompileClock`), the same measure for every library;
* ``sampling_seconds`` — the sampling phase (after warmup) minus any
  compilation inside it.

Gradient counts (``num_gradients`` is comparable across libraries: the
leapfrog steps of the sampling transitions, one gradient each):

* sluice: ``run.info.num_gradients`` (sampling) and ``num_gradients_warmup``
  (warmup transitions + the initial gradients + its step-size searches);
* NumPyro: the sum of ``num_steps`` from ``extra_fields`` over sampling, and
  over warmup (collected with ``collect_warmup=True``, positions excluded);
  its step-size searches are not counted;
* BlackJAX: the sum of ``num_integration_steps`` over the sampling loop and
  over ``window_adaptation`` (its info filtered down to that one field).
  BlackJAX's window adaptation does no step-size search.

How chains are batched (``settings.chain_method``): ``"sequential"`` runs one
chain after another, ``"vectorized"`` runs them in lock step under ``vmap``.
sluice and NumPyro take it as their own ``chain_method`` argument. For
BlackJAX, which leaves batching to the user, the harness compiles one program
per phase and maps a one-chain function over the chains with ``lax.map``
(sequential) or ``jax.vmap`` (vectorized); both phases are compiled ahead of
time (``jit(...).lower(...).compile()``), so its phases contain no compilation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from harness import CompileClock, peak_rss_bytes
from targets import Target

__all__ = ["LIBRARIES", "SamplerRun", "Settings", "run_blackjax", "run_numpyro", "run_sluice"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every library is asked to do."""

    chains: int = 4
    warmup: int = 1000
    draws: int = 1000
    seed: int = 0
    chain_method: str = "sequential"
    max_tree_depth: int = 10
    target_accept: float = 0.8
    keep_draws: bool = True  # sluice only: sink="memory" (True) or sink=None (statistics only)
    chunk_size: int | None = None  # sluice only: None = sluice's automatic choice


@dataclasses.dataclass
class SamplerRun:
    """What one library's run produced, in the same units for every library."""

    draws: dict[str, np.ndarray]  # {name: (chain, draw, ...)}; empty if draws were not kept
    wall_seconds: float
    compile_seconds: float
    sampling_seconds: float
    compile_in_sampling_seconds: float  # already subtracted from sampling_seconds
    warmup_seconds: float  # the rest of wall_seconds: start-up and adaptation, no compilation
    peak_rss_bytes: int  # the process's high-water mark right after the run, draws in hand
    num_gradients_warmup: int
    num_gradients: int
    num_divergent: int
    step_size: list[float]  # per chain, after adaptation
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def _batched_init(target: Target, chains: int) -> dict[str, jax.Array]:
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (chains, *x.shape)), target.init)


def _numpy_draws(draws: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value) for name, value in draws.items()}


def _timed_run(clock: CompileClock, draws: dict[str, np.ndarray], start: float, end: float,
               wall: float, sampling_from: float, sampling: float, warmup_steps: Any, steps: Any,
               divergent: Any, step_size: Any, extra: dict | None = None) -> SamplerRun:  # fmt: skip
    """A run timed by ``clock`` from ``start`` to ``end`` (``wall`` seconds), its sampling
    phase ``sampling`` seconds from ``sampling_from``: the compilation within that phase
    comes out of it, and the warmup is the rest of the wall time."""
    in_sampling = clock.seconds(sampling_from, end)
    compile, sampling = clock.seconds(start, end), sampling - in_sampling
    return SamplerRun(
        draws=draws, wall_seconds=wall, compile_seconds=compile, sampling_seconds=sampling,
        compile_in_sampling_seconds=in_sampling, warmup_seconds=wall - compile - sampling,
        peak_rss_bytes=peak_rss_bytes(),
        num_gradients_warmup=int(np.asarray(warmup_steps).sum(dtype=np.int64)),
        num_gradients=int(np.asarray(steps).sum(dtype=np.int64)),
        num_divergent=int(np.asarray(divergent).sum()),
        step_size=[float(s) for s in np.asarray(step_size).reshape(-1)], extra=extra or {},
    )  # fmt: skip


# -- sluice ---------------------------------------------------------------------
def run_sluice(
    target: Target, settings: Settings, clock: CompileClock, kernel: Any = None
) -> SamplerRun:
    """sluice's NUTS, or ``kernel`` (another library's, built by :func:`external_kernel`)."""
    import sluice

    if kernel is None:
        kernel = sluice.nuts(  # the diagonal metric, as NumPyro's and BlackJAX's NUTS here
            max_tree_depth=settings.max_tree_depth,
            target_accept=settings.target_accept,
            mass_matrix="diag",
        )
    start, begin = clock.now(), time.perf_counter()
    run = sluice.sample(
        target.logdensity_fn,
        init=target.init,
        chains=settings.chains,
        warmup=settings.warmup,
        draws=settings.draws,
        chunk_size=settings.chunk_size,
        chain_method=settings.chain_method,
        kernel=kernel,
        seed=settings.seed,
        sink="memory" if settings.keep_draws else None,
        progress=False,
    )
    draws = _numpy_draws(run.draws) if settings.keep_draws else {}
    wall, end = time.perf_counter() - begin, clock.now()
    info = run.info
    extra = {"chunk_size": int(info.chunk_size), "num_chunks": int(info.num_chunks),
             "library_warmup_seconds": info.warmup_seconds,
             "library_sampling_seconds": info.sampling_seconds,
             "library_total_seconds": info.total_seconds}  # fmt: skip
    # sluice times its own phases; its sampling phase ends as sample() returns,
    # so the window [end - sampling_seconds, end] holds it (and a little more).
    return _timed_run(clock, draws, start, end, wall, end - info.sampling_seconds,
                      info.sampling_seconds, info.num_gradients_warmup, info.num_gradients,
                      info.num_divergent, info.step_size, extra)  # fmt: skip


# -- NumPyro --------------------------------------------------------------------
def run_numpyro(target: Target, settings: Settings, clock: CompileClock) -> SamplerRun:
    """``MCMC.warmup`` then ``MCMC.run``, so that the two phases are timed apart.

    A user's single ``mcmc.run()`` compiles one loop; this split compiles the
    warmup loop and the sampling loop separately. The second compilation is
    measured and taken out of ``sampling_seconds`` but stays in ``wall_seconds``
    and ``compile_seconds`` (see ``compile_in_sampling_seconds``).

    NumPyro 0.22 compiles its loop again at every ``fori_collect`` call (with
    ``chain_method="sequential"``, once per chain and phase), and some of its
    compilations happen while an earlier computation is still running under
    JAX's asynchronous dispatch. Compile time taken out of a phase is then
    partly run time: the phase times of this function are exact only in a
    process with ``jax_cpu_enable_async_dispatch=False`` (see mcmc.py).
    """
    from numpyro.infer import MCMC, NUTS

    kernel = NUTS(
        potential_fn=lambda params: -target.logdensity_fn(params),
        target_accept_prob=settings.target_accept,
        max_tree_depth=settings.max_tree_depth,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=settings.warmup,
        num_samples=settings.draws,
        num_chains=settings.chains,
        chain_method=settings.chain_method,
        progress_bar=False,
    )
    warmup_key, sampling_key = jax.random.split(jax.random.PRNGKey(settings.seed))
    # Count warmup gradients without keeping the warmup positions.
    no_positions = tuple(f"~z.{name}" for name in target.init)

    start, begin = clock.now(), time.perf_counter()
    mcmc.warmup(
        warmup_key,
        init_params=_batched_init(target, settings.chains),
        extra_fields=("num_steps", *no_positions),
        collect_warmup=True,
    )
    warmup_steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    sampling_start, sampling_begin = clock.now(), time.perf_counter()
    mcmc.run(sampling_key, extra_fields=("num_steps",))
    draws = _numpy_draws(mcmc.get_samples(group_by_chain=True))
    fields = mcmc.get_extra_fields(group_by_chain=True)
    steps, divergent = np.asarray(fields["num_steps"]), np.asarray(fields["diverging"])
    end = clock.now()
    sampling = time.perf_counter() - sampling_begin
    wall = time.perf_counter() - begin
    step_size = mcmc.last_state.adapt_state.step_size
    return _timed_run(clock, draws, start, end, wall, sampling_start, sampling, warmup_steps,
                      steps, divergent, step_size)  # fmt: skip


# -- BlackJAX -------------------------------------------------------------------
def _map_chains(fn: Callable, chain_method: str) -> Callable:
    """Batch a one-chain function over a leading chain axis of all its arguments."""
    if chain_method == "vectorized":
        return jax.vmap(fn)
    return lambda *args: jax.lax.map(lambda a: fn(*a), args)


def run_blackjax(target: Target, settings: Settings, clock: CompileClock) -> SamplerRun:
    """``blackjax.window_adaptation`` then a ``lax.scan`` of ``blackjax.nuts`` steps, per chain."""
    import blackjax
    from blackjax.adaptation.base import get_filter_adapt_info_fn

    logdensity_fn = target.logdensity_fn
    adaptation = blackjax.window_adaptation(
        blackjax.nuts,
        logdensity_fn,
        target_acceptance_rate=settings.target_accept,
        # Keep only the step counts of the warmup trace, not every warmup state.
        adaptation_info_fn=get_filter_adapt_info_fn(info_keys={"num_integration_steps"}),
        max_num_doublings=settings.max_tree_depth,
    )

    def warmup_one(key: jax.Array, position: Any) -> tuple[Any, dict, jax.Array]:
        (state, parameters), info = adaptation.run(key, position, settings.warmup)
        tuned = {k: parameters[k] for k in ("step_size", "inverse_mass_matrix")}
        return state, tuned, jnp.sum(info.info.num_integration_steps)

    def sample_one(
        key: jax.Array, state: Any, parameters: dict
    ) -> tuple[Any, jax.Array, jax.Array]:
        nuts = blackjax.nuts(logdensity_fn, **parameters, max_num_doublings=settings.max_tree_depth)

        def step(state, key):
            state, info = nuts.step(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)

        keys = jax.random.split(key, settings.draws)
        _, (positions, steps, divergent) = jax.lax.scan(step, state, keys)
        return positions, jnp.sum(steps), jnp.sum(divergent)

    warmup_key, sampling_key = jax.random.split(jax.random.PRNGKey(settings.seed))
    warmup_keys = jax.random.split(warmup_key, settings.chains)
    sampling_keys = jax.random.split(sampling_key, settings.chains)
    positions = _batched_init(target, settings.chains)

    start, begin = clock.now(), time.perf_counter()
    warmup_fn = jax.jit(_map_chains(warmup_one, settings.chain_method))
    warmup_compiled = warmup_fn.lower(warmup_keys, positions).compile()
    states_shape, parameters_shape, _ = jax.eval_shape(warmup_fn, warmup_keys, positions)
    sample_fn = jax.jit(_map_chains(sample_one, settings.chain_method))
    sample_compiled = sample_fn.lower(sampling_keys, states_shape, parameters_shape).compile()

    states, parameters, warmup_steps = jax.block_until_ready(
        warmup_compiled(warmup_keys, positions)
    )
    sampling_start, sampling_begin = clock.now(), time.perf_counter()
    draws, steps, divergent = jax.block_until_ready(
        sample_compiled(sampling_keys, states, parameters)
    )
    draws = _numpy_draws(draws)
    end = clock.now()
    sampling = time.perf_counter() - sampling_begin
    wall = time.perf_counter() - begin
    return _timed_run(clock, draws, start, end, wall, sampling_start, sampling, warmup_steps,
                      steps, divergent, parameters["step_size"])  # fmt: skip


# Adjusted MCLMC (BlackJAX's adjusted_mclmc_dynamic): a random number of integration
# steps per transition, uniform on 1 .. 2 n - 1 (a fixed number resonates on a
# Gaussian: draws flip sign from one to the next). sluice's window warmup tunes the
# step size (target 0.9) and the preconditioner; BlackJAX's own tuner of L runs a
# whole warmup as one scan. n = 4 gave the best ESS per gradient of 4, 8, 16 on both
# models (2 chains, 500 + 500 iterations).
ADJUSTED_MCLMC_MEAN_STEPS = 4


def adjusted_mclmc_steps(key: jax.Array) -> jax.Array:
    return jax.random.randint(key, (), 1, 2 * ADJUSTED_MCLMC_MEAN_STEPS)


def external_kernel(name: str, settings: Settings) -> Any:
    """Another library's kernel through sluice (``sluice.kernels``), by variant name."""
    import blackjax

    import sluice

    if name == "blackjax.nuts":
        return sluice.kernels.from_blackjax(
            blackjax.nuts,
            target_accept=settings.target_accept,
            max_num_doublings=settings.max_tree_depth,
        )
    if name == "blackjax.adjusted_mclmc":
        return sluice.kernels.from_blackjax(
            blackjax.adjusted_mclmc_dynamic, integration_steps_fn=adjusted_mclmc_steps
        )
    raise ValueError(f"no external kernel {name!r}")


def _through_sluice(name: str) -> Callable[[Target, Settings, CompileClock], SamplerRun]:
    def run(target: Target, settings: Settings, clock: CompileClock) -> SamplerRun:
        return run_sluice(target, settings, clock, kernel=external_kernel(name, settings))

    return run


LIBRARIES: dict[str, Callable[[Target, Settings, CompileClock], SamplerRun]] = {
    "sluice": run_sluice,
    "numpyro": run_numpyro,
    "blackjax": run_blackjax,
    "sluice+blackjax.nuts": _through_sluice("blackjax.nuts"),
    "sluice+blackjax.adjusted_mclmc": _through_sluice("blackjax.adjusted_mclmc"),
}
