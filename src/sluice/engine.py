"""``sample()``: the host loop around the compiled chunk.

The host validates the arguments before anything compiles, starts the chains,
then calls the chunk function over and over: first through warmup, then
through the draws. Between chunks it moves the chunk's draws to the sink and
advances the progress bar. The next chunk is dispatched before the previous
one's draws are copied out, so the device keeps working while the host
writes.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from sluice import stats as _stats
from sluice.adaptation import window_schedule
from sluice.chunk import ChunkProgram, RunKeys, make_mesh
from sluice.kernels import Kernel, get_kernel
from sluice.model import Model, as_model, check_initial_points
from sluice.progress import ChunkProgress
from sluice.run import Run, RunInfo
from sluice.sinks import Layout, resolve_sink
from sluice.stats.base import Statistic

__all__ = ["sample"]

DEFAULT_CHUNK_BUDGET_BYTES = 256 * 2**20
CHAIN_METHODS = ("auto", "vectorized", "sequential")


def sample(
    model: Model | Callable,
    *,
    init: Any = None,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 1000,
    chunk_size: int | str | None = None,
    num_chunks: int | None = None,
    kernel: str | Kernel = "nuts",
    target_accept: float | None = None,
    max_tree_depth: int | None = None,
    dense_mass: bool | None = None,
    chain_method: str = "auto",
    seed: int = 0,
    sink: Any = "memory",
    stats: dict[str, Statistic] | None = None,
    progress: bool = True,
    devices: list[jax.Device] | None = None,
) -> Run:
    """Sample a posterior with MCMC, in compiled chunks of draws.

    Parameters
    ----------
    model
        A :class:`sluice.Model`, or a log-density function of ONE parameter
        value (then ``init`` is required).
    init
        Where the chains start (one parameter value, or ``init(rng_key)``);
        overrides ``model.init``.
    chains, warmup, draws
        Number of chains, of warmup (adaptation) iterations, and of draws kept
        per chain.
    chunk_size
        Iterations per chain in one compiled chunk: device memory holds at
        most ``chunk_size`` draws per chain. ``None`` or ``"auto"`` picks it
        from a device-memory budget and so that progress shows about ten
        chunks. The draws do not depend on it.
    num_chunks
        Alternatively, how many chunks the draws are split into.
    kernel
        ``"nuts"`` (default), ``"hmc"``, or a kernel object such as
        ``sluice.nuts(max_tree_depth=8)``.
    target_accept, max_tree_depth, dense_mass
        Shortcuts that override the kernel's settings.
    chain_method
        ``"vectorized"`` (``vmap`` over the chains of a device),
        ``"sequential"`` (``lax.map``: one chain after another), or ``"auto"``:
        sequential on CPU, vectorized on accelerators.
    seed
        Root of every random stream (see DESIGN: keys fold in the chain index
        and the absolute draw index).
    sink
        ``"memory"`` keeps all draws in host memory; ``None`` keeps none
        (statistics only); or a sink object such as ``sluice.ZarrSink(path)``.
    stats
        Extra streaming statistics ``{name: Statistic}``, updated on the
        device for every draw; results in ``run.stats``.
    progress
        Show a progress bar per phase (only on a terminal).
    devices
        Devices to spread chains over; default: one device.

    Returns
    -------
    Run
        Draws (if kept), sample statistics, streaming statistics, summary.

    Examples
    --------
    >>> import jax.numpy as jnp, sluice
    >>> run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2),
    ...                     chains=2, warmup=100, draws=100, progress=False)
    >>> run.draws["x"].shape
    (2, 100, 2)
    """
    _check_count("chains", chains)
    _check_count("draws", draws)
    _check_count("warmup", warmup, allow_zero=True)
    _check_int("seed", seed)
    if chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method must be one of {CHAIN_METHODS}, got {chain_method!r}")
    if chunk_size is not None and num_chunks is not None:
        raise ValueError(
            f"give chunk_size or num_chunks, not both (got chunk_size={chunk_size!r}, "
            f"num_chunks={num_chunks!r})"
        )
    if num_chunks is not None:
        _check_count("num_chunks", num_chunks)
    if chunk_size is not None and chunk_size != "auto":
        _check_count("chunk_size", chunk_size)
    if stats is not None and not (
        isinstance(stats, dict) and all(isinstance(s, Statistic) for s in stats.values())
    ):
        raise TypeError(f"stats must be a dict of sluice.stats.Statistic, got {stats!r}")

    model = as_model(model, init)
    kernel = get_kernel(
        kernel, target_accept=target_accept, max_tree_depth=max_tree_depth, dense_mass=dense_mass
    )
    sink = resolve_sink(sink)
    flat = model.flatten()
    devices = list(devices) if devices is not None else [jax.devices()[0]]
    platform = devices[0].platform
    if chain_method == "auto":
        chain_method = "sequential" if platform == "cpu" else "vectorized"

    keys = RunKeys.from_seed(seed)
    num_slots = math.ceil(chains / len(devices)) * len(devices)
    chain_ids = np.arange(num_slots, dtype=np.int32)
    points = model.initial_points(keys.points, chain_ids)
    positions = jax.vmap(lambda p: ravel_pytree(p)[0])(points)
    check_initial_points(model, flat, positions[:chains])

    draw_shapes = flat.draw_shapes()
    layout = Layout(chains, draws, _layout_groups(flat, kernel, draw_shapes))
    chunk = _resolve_chunk_size(
        chunk_size, num_chunks, draws, warmup, layout, num_slots // len(devices)
    )
    program = _program(
        flat, kernel, dict(stats or {}), chunk, sink.keeps_draws, chain_method, devices
    )
    statistic = program.statistic
    consts = flat.consts
    sharding = program.chain_sharding()
    if sharding is not None:
        positions = jax.device_put(positions, sharding)
        chain_ids_dev = jax.device_put(chain_ids, sharding)
    else:
        positions = jax.device_put(positions, devices[0])
        chain_ids_dev = jax.device_put(chain_ids, devices[0])
    example = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), draw_shapes)

    info = RunInfo(
        chains=chains,
        warmup=warmup,
        draws=draws,
        chunk_size=chunk,
        seed=seed,
        kernel=kernel,
        chain_method=chain_method,
        num_devices=len(devices),
    )
    t_start = time.perf_counter()
    carry, init_grads = program.init(consts, positions, chain_ids_dev, keys, example)
    info.num_gradients_warmup += int(np.sum(np.asarray(init_grads)[:chains]))
    schedule = window_schedule(warmup)

    # Warmup.
    t0 = time.perf_counter()
    num_warmup_chunks = math.ceil(warmup / chunk)
    with ChunkProgress("warmup", warmup, num_warmup_chunks, chains, progress) as bar:
        for k in range(num_warmup_chunks):
            start = k * chunk
            carry, counters, _ = program.advance(
                consts, carry, chain_ids_dev, start, warmup, warmup, schedule, keys
            )
            info.num_gradients_warmup += int(np.sum(np.asarray(counters.num_gradients)[:chains]))
            bar.advance(min(chunk, warmup - start))
    jax.block_until_ready(carry)
    info.warmup_seconds = time.perf_counter() - t0

    # The statistics start from the final warmup draw of chain 0 (same for all chains).
    example = jax.tree.map(
        lambda x: x[0],
        jax.vmap(flat.draws_fn, in_axes=(None, 0))(consts, carry.kernel.position[:1]),
    )
    stats_state = jax.vmap(lambda _: statistic.init(example))(jnp.arange(num_slots))
    if sharding is not None:
        stats_state = jax.device_put(stats_state, sharding)
    carry = carry._replace(stats=stats_state)

    # Sampling.
    sink.open(layout)
    t0 = time.perf_counter()
    num_draw_chunks = math.ceil(draws / chunk)
    pending = None
    with ChunkProgress("sampling", draws, num_draw_chunks, chains, progress) as bar:
        for k in range(num_draw_chunks + 1):
            if k < num_draw_chunks:
                start = warmup + k * chunk
                carry, counters, outputs = program.advance(
                    consts, carry, chain_ids_dev, start, warmup + draws, warmup, schedule, keys
                )
            if pending is not None:  # copy out the previous chunk while this one runs
                p_start, p_counters, p_outputs = pending
                n = min(chunk, draws - p_start)
                info.add_counters(jax.device_get(p_counters), chains)
                if p_outputs is not None:
                    host = jax.device_get(p_outputs)
                    sink.write(p_start, _trim(host, chains, n))
                bar.advance(n)
            pending = (k * chunk, counters, outputs) if k < num_draw_chunks else None
    sink.close()
    jax.block_until_ready(carry)
    info.sampling_seconds = time.perf_counter() - t0
    info.total_seconds = time.perf_counter() - t_start

    params = jax.device_get(carry.params)
    info.step_size = np.asarray(params.step_size)[:chains]
    info.inverse_mass_matrix = np.asarray(params.inverse_mass_matrix)[:chains]
    stats_states = jax.tree.map(lambda x: np.asarray(x)[:chains], jax.device_get(carry.stats))
    if info.num_divergent:
        warnings.warn(
            f"{info.num_divergent} divergent transitions after warmup "
            f"({info.num_divergent / (chains * draws):.1%} of draws); consider a larger "
            "target_accept or reparameterising the model",
            stacklevel=2,
        )
    return Run(model=model, sink=sink, info=info, statistic=statistic, stats_states=stats_states)


# -- helpers ------------------------------------------------------------------
_PROGRAMS: OrderedDict[tuple, ChunkProgram] = OrderedDict()


def _program(flat, kernel, statistics, chunk, record, chain_method, devices) -> ChunkProgram:
    """Reuse compiled programs across runs of the same model structure and settings.

    Two models with the same fingerprint differ only in their data values,
    which the program takes as arguments; statistics are matched by identity.
    """
    key = (
        flat.fingerprint,
        kernel,
        tuple((n, id(s)) for n, s in statistics.items()),
        chunk,
        record,
        chain_method,
        tuple(d.id for d in devices),
    )
    program = _PROGRAMS.get(key)
    if program is None:
        program = ChunkProgram(
            flat, kernel, _stats.group(statistics), chunk, record, chain_method, make_mesh(devices)
        )
        _PROGRAMS[key] = program
        while len(_PROGRAMS) > 8:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return program


def _trim(host: dict, chains: int, n: int) -> dict:
    return {
        group: {name: np.asarray(v)[:chains, :n] for name, v in names.items()}
        for group, names in host.items()
    }


def _layout_groups(flat, kernel, draw_shapes) -> dict:
    groups = {"posterior": {k: (v.shape, np.dtype(v.dtype)) for k, v in draw_shapes.items()}}
    x = jax.ShapeDtypeStruct((flat.dim,), flat.dtype)
    from sluice.kernels import KernelParams, KernelState

    state = KernelState(x, jax.ShapeDtypeStruct((), flat.dtype), x)
    imm = (flat.dim, flat.dim) if getattr(kernel, "dense_mass", False) else (flat.dim,)
    params = KernelParams(
        jax.ShapeDtypeStruct((), flat.dtype), jax.ShapeDtypeStruct(imm, flat.dtype)
    )
    stat_shapes = jax.eval_shape(
        lambda s, p: kernel.step(
            jax.random.PRNGKey(0), s, lambda z: flat.logdensity_fn(flat.consts, z), p
        )[1],
        state,
        params,
    )
    groups["sample_stats"] = {k: (v.shape, np.dtype(v.dtype)) for k, v in stat_shapes.items()}
    ll = flat.log_likelihood_shapes()
    if ll:
        groups["log_likelihood"] = {k: (v.shape, np.dtype(v.dtype)) for k, v in ll.items()}
    return groups


def _resolve_chunk_size(chunk_size, num_chunks, draws, warmup, layout, chains_per_device) -> int:
    if isinstance(chunk_size, int):
        return min(chunk_size, max(draws, warmup))
    if num_chunks is not None:
        return math.ceil(draws / num_chunks)
    bytes_per_draw = sum(
        int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        for names in layout.groups.values()
        for shape, dtype in names.values()
    )
    budget = _device_budget_bytes()
    by_memory = max(1, budget // max(1, chains_per_device * bytes_per_draw))
    by_progress = max(1, math.ceil(draws / 10))
    return int(min(by_memory, by_progress))


def _device_budget_bytes() -> int:
    """A quarter of the device's free memory where JAX reports it, else 256 MiB."""
    env = os.environ.get("SLUICE_CHUNK_BUDGET_BYTES")
    if env:
        return int(env)
    try:
        mem = jax.devices()[0].memory_stats() or {}
    except Exception:  # some backends do not implement memory_stats
        mem = {}
    if "bytes_limit" in mem:
        return max(
            DEFAULT_CHUNK_BUDGET_BYTES // 16, (mem["bytes_limit"] - mem.get("bytes_in_use", 0)) // 4
        )
    return DEFAULT_CHUNK_BUDGET_BYTES


def _check_count(name: str, value: Any, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not ok or value < (0 if allow_zero else 1):
        bound = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{name} must be {bound} integer, got {value!r}")


def _check_int(name: str, value: Any) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
