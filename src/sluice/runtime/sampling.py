"""``sample()`` and ``resume()``: the public entry points of MCMC runs.

Both validate their arguments into a :class:`~sluice.runtime.config.RunConfig`
before anything is traced or compiled, build a
:class:`~sluice.runtime.plan.Plan` and run a
:class:`~sluice.runtime.session.Session` (the host loop around the compiled
chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from sluice._jax import cores
from sluice.io.sinks import resolve_sink
from sluice.mcmc.kernels import get_kernel
from sluice.mcmc.protocol import Kernel
from sluice.model import Model
from sluice.runtime.config import RunConfig
from sluice.runtime.plan import Plan
from sluice.runtime.run import Run
from sluice.runtime.session import Session, open_sink
from sluice.runtime.until import Converged
from sluice.stats.base import Statistic

__all__ = ["resume", "sample"]


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
    mass_matrix: str | None = None,
    chain_method: str = "auto",
    seed: int = 0,
    sink: Any = "memory",
    stats: dict[str, Statistic] | None = None,
    default_stats: bool | str = "auto",
    until: Converged | None = None,
    superchains: int | None = None,
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
    chunk_size, num_chunks
        Iterations per chain in one compiled chunk (device memory holds at
        most that many draws per chain), or how many chunks the draws are
        split into. ``None`` or ``"auto"`` picks it from a device-memory
        budget. The draws do not depend on it.
    kernel
        ``"nuts"`` (default), ``"hmc"``, or a kernel object such as
        ``sluice.nuts(max_tree_depth=8)`` or BlackJAX's and NumPyro's
        (:mod:`sluice.kernels`).
    target_accept, max_tree_depth, dense_mass, mass_matrix
        Shortcuts that override the kernel's settings
        (:class:`sluice.mcmc.kernels.NUTS`; the run records the metric
        ``mass_matrix="auto"`` chose in ``run.info.config.kernel``).
    chain_method
        ``"vectorized"`` (``vmap`` over the chains of a device),
        ``"sequential"`` (``lax.map``), or ``"auto"``: vectorized on
        accelerators, on CPU what
        :func:`sluice.mcmc.chain_method.choose_chain_method` favours.
    seed
        Root of every random stream; draws depend on neither chunking nor
        devices.
    sink
        ``"memory"`` keeps all draws in host memory; ``None`` keeps none
        (statistics only); ``sluice.ZarrSink(path)`` streams them to disk and
        checkpoints after every chunk, so that :func:`resume` can finish an
        interrupted run.
    stats
        Extra streaming statistics ``{name: Statistic}``, updated on the
        device for every draw, in order; merged over chains in ``run.stats``,
        per chain in ``run.stats_per_chain``. See :mod:`sluice.stats`.
    default_stats
        Also stream :func:`sluice.stats.streaming.summary` on the device, as
        ``run.stats["summary"]``, and build ``run.summary()`` from it.
        ``"auto"`` (default): on unless ``sink="memory"`` and ``until`` is not
        given, where ``run.summary()`` runs ArviZ on the draws instead.
    until
        ``sluice.converged(ess_bulk=..., ess_tail=..., r_hat=..., mcse_mean=...)``:
        stop at the first chunk boundary where every element meets every
        target; ``draws`` is then the most draws per chain, and
        ``run.info.draws`` the number taken (the first draws of the same run
        without ``until``).
    superchains
        Group the chains into this many superchains of contiguous chains that
        start from one point. From 64 chains on, the summary adds nested
        R-hat (Margossian et al. 2024) over them.
    progress
        Show a progress bar per phase (only on a terminal, only on process 0).
    devices
        Devices to spread chains over. Default: every device of every process
        (in a single process, at most one device per chain).

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
    _check_host_options(progress, devices)
    sink = resolve_sink(sink)
    config = RunConfig(
        chains=chains,
        warmup=warmup,
        draws=draws,
        chunk_size=chunk_size,
        num_chunks=num_chunks,
        kernel=get_kernel(
            kernel,
            target_accept=target_accept,
            max_tree_depth=max_tree_depth,
            dense_mass=dense_mass,
            mass_matrix=mass_matrix,
        ),
        chain_method=chain_method,
        seed=seed,
        default_stats=default_stats,
        until=until,
        superchains=superchains,
    )
    plan = Plan.build(config, model, sink=sink, init=init, stats=stats, devices=devices)
    try:
        open_sink(plan, sink)
        session = Session(plan, sink, progress)
        with cores.one_blas_thread(plan.topology.devices):
            session.start()
            return session.run()
    finally:
        sink.close()  # also on failure: a store's lock is released


def resume(
    path: Any,
    model: Model | Callable | None = None,
    *,
    progress: bool = True,
    stats: dict[str, Statistic] | None = None,
    devices: list[jax.Device] | None = None,
    allow_model_change: bool = False,
    **expected: Any,
) -> Run:
    """Continue an interrupted run from its store's last complete chunk.

    The resumed run ends with the draws and statistics of an uninterrupted
    one. A run that stopped before its first checkpoint starts again.

    Parameters
    ----------
    path
        The store (a ``sluice.ZarrSink`` path) of the interrupted run.
    model
        The model that started the run: the same program and data, as the
        store's fingerprint records them (a store never names code to run).
    progress, stats, devices
        As in :func:`sample`; ``stats`` must be the statistics the run started
        with (they are part of its checkpoint).
    allow_model_change
        Continue with a model whose program or data differs from the one that
        started the run (the same parameters and recorded quantities): the
        store then holds draws of both models (needed, too, where another JAX
        release traces the model into another program).
    **expected
        Settings the caller expects the run to have (``draws=...``,
        ``seed=...``, ...): a mismatch is an error that names the setting.
        A run with a kernel from another library (``sluice.kernels.from_blackjax``,
        ``from_numpyro``) needs it again as ``kernel=``: a store holds no code.
    """
    from sluice.io.store import ZarrSink

    _check_host_options(progress, devices)
    if not isinstance(allow_model_change, bool):
        raise TypeError(f"allow_model_change must be True or False, got {allow_model_change!r}")
    if model is None:
        raise TypeError(
            "resume() needs the run's model: sluice.resume(path, model). A store never "
            "names code to run; the model is checked against the fingerprint it records"
        )
    sink = ZarrSink.open_existing(path)
    stored = sink.description()["config"]
    kernel = expected.pop("kernel", None)
    if kernel is not None and not isinstance(kernel, Kernel):
        kernel = get_kernel(kernel)
    for name, value in expected.items():
        if name not in stored:
            raise TypeError(f"resume() got an unknown setting {name}={value!r}")
        if RunConfig.jsonable(name, value) != stored[name]:
            raise ValueError(
                f"the run in {sink.path} has {name}={stored[name]!r}, not {name}={value!r}"
            )
    config = RunConfig.from_json(stored, kernel=kernel)
    plan = Plan.build(config, model, sink=sink, stats=stats, devices=devices, check_init=False)
    sink.check_compatible(plan.describe(), allow_model_change=allow_model_change)
    checkpoint = sink.load_checkpoint()
    try:
        session = Session(plan, sink, progress)
        with cores.one_blas_thread(plan.topology.devices):
            if checkpoint is None:  # stopped before its first chunk ended: start again
                open_sink(plan, sink)
                session.start()
            else:
                sink.attach(plan.layout)
                session.restore(checkpoint)
            return session.run()
    finally:
        sink.close()  # also on failure: a store's lock is released


def _check_host_options(progress: Any, devices: Any) -> None:
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, got {progress!r}")
    if devices is not None and (
        not isinstance(devices, list | tuple) or not all(isinstance(d, jax.Device) for d in devices)
    ):
        raise TypeError(
            f"devices must be a list of jax.Device (e.g. jax.devices()[:2]) or None, "
            f"got {devices!r}"
        )
