"""The compiled chunk: advance every chain by ``chunk_size`` iterations.

One jitted function serves warmup and sampling alike; iteration ``i`` of chain
``c`` takes its key from ``(c, i)`` alone, so draws depend neither on the chunk
size nor on where a chunk starts, and a short last chunk is neither recompiled
nor padded. docs/architecture.md ("The chunk") describes the keys, the loop and
what each iteration does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from sluice._jax import random
from sluice._jax.batching import map_in_place
from sluice.mcmc.protocol import Kernel
from sluice.model import FlatModel
from sluice.stats.base import Statistic, chains_update

__all__ = ["ChainCarry", "ChunkCounters", "ChunkProgram", "RunKeys", "sample_stats_shapes"]

_KERNEL_INIT = 0x6B65726E  # fold_in(init key of a chain, this): the key of Kernel.init
_CHAINS = "chain"  # the vmap axis of a device's chains


class RunKeys(NamedTuple):
    """Root keys of the four independent streams of a run."""

    init: jax.Array  # (2,) uint32: initial step size search
    warmup: jax.Array  # (2,) uint32
    draws: jax.Array  # (2,) uint32
    points: jax.Array  # (2,) uint32: random initial points (when init is a function)

    @classmethod
    def from_seed(cls, seed: int) -> RunKeys:
        """``fold_in(PRNGKey(seed), i)`` for ``i = 0..3``; on the host with NumPy for
        seeds in ``[0, 2**31)`` (JAX's eager ops would compile small programs)."""
        if 0 <= seed < 2**31:  # PRNGKey(seed) is [0, seed]
            root = np.asarray([0, seed], np.uint32)
            return cls(*(random.host_fold_in(root, i) for i in range(4)))
        root = jax.random.PRNGKey(seed)
        return cls(*(np.asarray(jax.random.fold_in(root, i)) for i in range(4)))


class ChainCarry(NamedTuple):
    """Everything one chain carries from chunk to chunk (leading chain axis when batched)."""

    kernel: Any  # the kernel's state: position (dim,), logdensity (), logdensity_grad (dim,)
    adaptation: Any  # the kernel's warmup state; frozen during sampling
    params: Any  # the kernel's tuned parameters (NUTS: step size, inverse mass matrix)
    stats: Any  # state of the run's Statistic
    pilot: Any = None  # the last Statistic.pilot warmup draws (None when it asks for none)


class ChunkCounters(NamedTuple):
    """Per-chain totals over one chunk's valid iterations (summed on the host).

    ``energy`` holds what the E-BFMI needs of the chunk's Hamiltonian energies
    ``E_1 .. E_k`` (sampling only; zeros for a kernel that reports none):
    ``[E_1, E_k, sum(E_i - E_1), sum((E_i - E_1)**2), sum((E_i - E_{i-1})**2)]``,
    sums relative to the chunk's first energy so that float32 keeps their
    precision; the host joins the chunks (:class:`sluice.runtime.run.RunInfo`).
    """

    num_gradients: jax.Array  # () int32: log-density gradient evaluations
    num_divergent: jax.Array  # () int32: divergent transitions (sampling only)
    sum_acceptance: jax.Array  # () float32: sum of acceptance rates (sampling only)
    num_saturated: jax.Array  # () int32: transitions at the kernel's max tree depth (sampling)
    energy: jax.Array  # (5,) float32 for a chunk; () the energy of one iteration


def _add_counters(totals: ChunkCounters, one: ChunkCounters, first: jax.Array) -> ChunkCounters:
    """``totals`` of a chunk's iterations so far with iteration ``one`` added (``first``:
    it is the chunk's first): the counts add up, the energies join ``totals.energy``."""
    e = one.energy
    e_first = jnp.where(first, e, totals.energy[0])
    d = e - e_first
    step = jnp.where(first, 0.0, e - totals.energy[1])
    energy = jnp.stack([e_first, e, totals.energy[2] + d, totals.energy[3] + d * d,
                        totals.energy[4] + step * step])  # fmt: skip
    counts = [a + b for a, b in zip(totals[:4], one[:4], strict=True)]
    return ChunkCounters(*counts, energy)


def _warmup_params(warmup: Any, astate: Any, i: jax.Array, num_warmup: jax.Array) -> Any:
    """The parameters the step after warmup iteration ``i`` uses: the warmup's final
    ones after its last iteration, its current ones before."""
    return jax.tree.map(
        lambda final, current: jnp.where(i == num_warmup - 1, final, current),
        warmup.final(astate),
        warmup.params(astate),
    )


def _run_if(flag: jax.Array, fn: Callable[[Any], Any], operand: Any) -> Any:
    """``fn(operand)`` if ``flag``, else ``operand``: a loop of zero or one iteration, where
    a ``cond`` would copy an operand that one branch returns unchanged (the statistics'
    state, megabytes for a large model) at every step."""
    trips = jnp.where(flag, jnp.int32(1), jnp.int32(0))
    return jax.lax.fori_loop(0, trips, lambda _, x: fn(x), operand)


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkProgram:
    """The compiled per-run functions: ``init`` (start chains) and ``advance`` (one chunk).

    ``advance(consts, carry, chain_ids, start, stop, num_warmup, schedule, keys)``
    returns ``(carry, counters, outputs)``; ``outputs`` is ``None`` unless the
    program records draws or its statistics are updated apart
    (:attr:`separate_statistics`).
    """

    flat_model: FlatModel
    kernel: Kernel
    statistic: Statistic
    chunk_size: int
    record: bool
    chain_method: str
    mesh: Mesh | None
    num_chains: int | None = None  # the run's real chains (cross-chain warmups' means)

    def key(self, name: str) -> tuple:
        """The compile-cache key of the program ``name`` (``init``, ``advance``,
        ``advance_donated``): the model's fingerprint and every setting it is built
        from (see :mod:`sluice._jax.compile`)."""
        devices = None if self.mesh is None else tuple(d.id for d in self.mesh.devices.flat)
        return (
            "mcmc.chunk", name, self.flat_model.fingerprint, self.kernel,
            self.statistic.cache_key, self.chunk_size, self.record, self.chain_method, devices,
            self.num_chains,
        )  # fmt: skip

    def jitted(self, name: str) -> Callable:
        """The jitted function ``name`` (``init``, ``advance``, ``advance_donated``)."""
        return self._jitted[name]

    @functools.cached_property
    def _jitted(self) -> dict[str, Callable]:
        return {
            "init": jax.jit(self._batch(self._init_one, num_unbatched_tail=2)),
            "advance": self._build_advance(),
            "advance_donated": self._build_advance(donate=True),
            "update_statistics_donated": self._build_update_statistics(),
            "window_end": self._build_window_end(),
            "window_end_donated": self._build_window_end(donate=True),
        }

    # -- one chain ---------------------------------------------------------
    def _init_one(
        self, consts: Any, position: jax.Array, chain_id: jax.Array, keys: RunKeys, example: Any
    ) -> tuple[ChainCarry, jax.Array]:
        logdensity = functools.partial(self.flat_model.logdensity_fn, consts)
        warmup = self.kernel.warmup()
        chain_key = jax.random.fold_in(keys.init, chain_id)
        # the kernel's own start (MCLMC's momentum, say): a stream apart from the warmup's
        kstate = self.kernel.init(position, logdensity, jax.random.fold_in(chain_key, _KERNEL_INIT))
        astate, num_grads = warmup.init(chain_key, kstate, logdensity)
        params = warmup.params(astate)
        p = self.statistic.pilot
        pilot = None
        if p:  # the last p warmup draws fill it (the initial draw where warmup is shorter)
            first = self.flat_model.draws_fn(consts, position)
            pilot = jax.tree.map(lambda x: jnp.broadcast_to(x, (p, *x.shape)), first)
        # statistics with a program of their own start after the warmup, from its last
        # draws (the session's start program): no states to carry, or checkpoint, before
        stats = None if self.separate_statistics else self.statistic.init(pilot if p else example)
        carry = ChainCarry(kstate, astate, params, stats, pilot)
        return carry, num_grads + 1  # and the initial point's gradient

    def _window_end_one(
        self, consts: Any, kstate: Any, astate: Any, chain_id: jax.Array, t: jax.Array,
        num_warmup: jax.Array, schedule: Any, keys: RunKeys, *pooled: jax.Array,
    ) -> tuple[Any, Any, jax.Array]:  # fmt: skip
        """One chain's warmup ``window_end`` after warmup iteration ``t``, with the key
        that iteration's ``update`` gets (and the warmup's ``pooled`` sum over the run's
        chains, where it has one): ``(adaptation state, params, gradients)``."""
        logdensity = functools.partial(self.flat_model.logdensity_fn, consts)
        warmup = self.kernel.warmup()
        folded = random.fold_in(jax.random.fold_in(keys.warmup, chain_id), t)
        _, aux_key = random.split(folded)  # as _chain_step's
        astate, num_grads = warmup.window_end(
            aux_key, astate, t, schedule, kstate, logdensity, *pooled
        )
        return astate, _warmup_params(warmup, astate, t, num_warmup), num_grads

    def _record(self, consts: Any, position: jax.Array, stats: dict) -> dict[str, dict]:
        out = {"posterior": self.flat_model.draws_fn(consts, position), "sample_stats": stats}
        if self.flat_model.log_likelihood_fn is not None:
            out["log_likelihood"] = self.flat_model.log_likelihood_fn(consts, position)
        return out

    def _chain_step(
        self,
        consts: Any,
        chain_id: jax.Array,
        num_warmup: jax.Array,
        schedule: Any,
        keys: RunKeys,
    ) -> Callable:
        """One chain's ``step(warming, i, carry) -> (carry, counters, record)``.

        One kernel step serves both phases (the kernel dominates the program's size and
        compile time); it reads ``carry.params``, which the warmup keeps current. Each
        phase's own work runs only in its phase (:func:`_run_if`).
        """
        logdensity = functools.partial(self.flat_model.logdensity_fn, consts)
        warmup = self.kernel.warmup()
        warmup_key = jax.random.fold_in(keys.warmup, chain_id)
        draws_key = jax.random.fold_in(keys.draws, chain_id)

        def step(warming: jax.Array, i: jax.Array, carry: ChainCarry):
            # Warmup: split(fold_in(warmup_key, i)) (a key for the step, one for the
            # step-size search); sampling: fold_in(draws_key, i - num_warmup). Two
            # unrolled Threefry hashes (JAX's CPU lowering is a rolled loop), not three.
            base = jnp.where(warming, warmup_key, draws_key)
            folded = random.fold_in(base, jnp.where(warming, i, i - num_warmup))
            key, aux_key = random.split(folded)
            key = jnp.where(warming, key, folded)
            kstate, stats = self.kernel.step(key, carry.kernel, logdensity, carry.params)
            private = stats
            stats = {k: v for k, v in stats.items() if not k.startswith("_")}
            across = (self._mean_over_chains(chain_id),) if warmup.across_chains else ()

            def adapt_(acc):
                astate, _, _ = acc
                astate, extra = warmup.update(
                    aux_key, astate, i, schedule, kstate, private, logdensity, *across
                )
                return astate, _warmup_params(warmup, astate, i, num_warmup), extra

            acc = (carry.adaptation, carry.params, jnp.int32(0))
            astate, params, extra = _run_if(warming, adapt_, acc)
            sampling = jnp.logical_not(warming)
            statistics = carry.stats
            if self.statistic.update_block is None:  # else by their own program, per chunk

                def update(state):  # the draw is made inside: only when sampling
                    draw = self.flat_model.draws_fn(consts, kstate.position)
                    return self.statistic.update(state, draw)

                statistics = _run_if(sampling, update, statistics)
            pilot = carry.pilot
            if pilot is not None:  # the last `pilot` warmup draws, for the statistics' init
                p = self.statistic.pilot
                row = i - (num_warmup - p)
                in_window = warming & (row >= 0)

                def keep(buf):
                    draw = self.flat_model.draws_fn(consts, kstate.position)
                    return jax.tree.map(
                        lambda b, x: jax.lax.dynamic_update_index_in_dim(b, x, row, 0), buf, draw
                    )

                pilot = _run_if(in_window, keep, pilot)
            record = None
            if self.record:
                shape = jax.eval_shape(self._record, consts, kstate.position, stats)
                record = jax.lax.cond(
                    warming,
                    lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shape),
                    lambda: self._record(consts, kstate.position, stats),
                )
            max_depth = getattr(self.kernel, "max_tree_depth", None)
            saturated = jnp.bool_(False)
            if max_depth is not None and "tree_depth" in stats:
                saturated = stats["tree_depth"] >= max_depth
            energy = stats.get("energy", jnp.zeros((), jnp.float32))
            counters = ChunkCounters(
                stats["n_steps"] + extra,
                (stats["diverging"] & sampling).astype(jnp.int32),
                jnp.where(sampling, stats["acceptance_rate"], 0).astype(jnp.float32),
                (saturated & sampling).astype(jnp.int32),
                jnp.where(sampling, energy, 0).astype(jnp.float32),
            )
            if self.separate_statistics and not self.record:  # the draws the statistics see
                record = {"posterior": self.flat_model.draws_fn(consts, kstate.position)}
            return ChainCarry(kstate, astate, params, statistics, pilot), counters, record

        return step

    def _real(self, chain_id: jax.Array) -> jax.Array:
        """Whether each ``chain_id`` is one of the run's chains, not a padded slot."""
        if self.num_chains is None:
            return jnp.ones(jnp.shape(chain_id), jnp.bool_)
        return chain_id < self.num_chains

    def _mean_over_chains(self, chain_id: jax.Array) -> Callable[[jax.Array], jax.Array]:
        """``mean(x)``: the mean of ``x`` over the run's real chains (padded slots left
        out), across the chains of a device (the ``vmap`` axis) and across devices and
        processes (the mesh axis)."""
        axes = (_CHAINS,) + (("chains",) if self.mesh is not None and self.mesh.size > 1 else ())

        def mean(x: jax.Array) -> jax.Array:
            w = self._real(chain_id).astype(x.dtype)
            return jax.lax.psum(x * w, axes) / jax.lax.psum(w, axes)

        return mean

    def _step_output_shapes(self, consts, carry: ChainCarry, warming, start, step: Callable):
        """Shapes of ``step``'s ``(counters, record)``, without tracing a kernel step
        where the log-density has the positions' dtype (the kernel declares its
        statistics' shapes)."""
        position, logdensity = carry.kernel.position, carry.kernel.logdensity
        if logdensity.dtype != position.dtype:
            return jax.eval_shape(lambda: step(warming, start, carry)[1:])
        int32, float32 = (jax.ShapeDtypeStruct((), t) for t in (jnp.int32, jnp.float32))
        counters = ChunkCounters(int32, int32, float32, int32, float32)
        record = None
        x = jax.ShapeDtypeStruct(position.shape, position.dtype)
        if self.record:
            shapes = self.kernel.stats_shapes(x.dtype)
            shapes = {k: v for k, v in shapes.items() if not k.startswith("_")}
            record = jax.eval_shape(self._record, consts, x, shapes)
        elif self.separate_statistics:
            record = {"posterior": jax.eval_shape(self.flat_model.draws_fn, consts, x)}
        return counters, record

    def _loop(self, consts, carry: ChainCarry, start, stop, num_warmup, step: Callable):
        """Run iterations ``start .. min(start + chunk_size, stop) - 1`` of one phase (the
        host never lets a chunk straddle the end of warmup). Records go to row ``i -
        start`` of preallocated ``(chunk_size, ...)`` buffers (zeros during warmup)."""
        end = jnp.minimum(start + self.chunk_size, stop)
        warming = start < num_warmup
        counters_shape, record_shape = self._step_output_shapes(consts, carry, warming, start, step)
        zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), counters_shape)
        zero = zero._replace(energy=jnp.zeros((5,), jnp.float32))
        buffers = None
        if record_shape is not None:
            buffers = jax.tree.map(
                lambda s: jnp.zeros((self.chunk_size, *s.shape), s.dtype), record_shape
            )

        def body(i, acc):
            carry, totals, out = acc
            carry, counters, record = step(warming, i, carry)
            if out is not None:
                out = jax.tree.map(
                    lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, i - start, 0),
                    out,
                    record,
                )
            return carry, _add_counters(totals, counters, i == start), out

        return jax.lax.fori_loop(start, end, body, (carry, zero, buffers))

    @property
    def separate_statistics(self) -> bool:
        """Whether the statistics take a chunk's draws at once (``update_block``) and are
        updated by their own program, ``update_statistics`` (``(stats, draws, count) ->
        stats``, every chain), from the draws the chunk program outputs, rather than
        inside the sampler's loop; each program then compiles with the options that
        suit it."""
        return self.statistic.update_block is not None

    def _advance_one(self, consts, carry, chain_id, start, stop, num_warmup, schedule, keys):
        """One chunk of one chain (batched over chains by ``lax.map`` or ``vmap``)."""
        step = self._chain_step(consts, chain_id, num_warmup, schedule, keys)
        return self._loop(consts, carry, start, stop, num_warmup, step)

    # -- batching over chains and devices -----------------------------------
    def _sharded(self, batched: Callable, num_unbatched_tail: int) -> Callable:
        """Wrap ``batched(consts, *per_chain, *shared)`` in ``shard_map`` over the devices."""
        if self.mesh is None or self.mesh.size == 1:
            return batched
        chains = PartitionSpec("chains")

        def sharded(consts, *args):
            n = len(args) - num_unbatched_tail
            in_specs = (PartitionSpec(), *([chains] * n), *([PartitionSpec()] * num_unbatched_tail))
            return jax.shard_map(
                batched, mesh=self.mesh, in_specs=in_specs, out_specs=chains, check_vma=False
            )(consts, *args)

        return sharded

    def _batch(self, fn: Callable, num_unbatched_tail: int, carry_first: bool = False) -> Callable:
        """Batch the one-chain ``fn(consts, *per_chain, *shared)`` over the chain axis
        and shard it over the devices.

        ``carry_first``: ``fn`` returns a tuple whose first element has the
        structure of its first per-chain argument (the chunk's carry); sequential
        chains then update that argument's buffers in place (:func:`map_in_place`).
        """
        return self._sharded(
            self._per_chain(fn, num_unbatched_tail, carry_first), num_unbatched_tail
        )

    def _per_chain(
        self, fn: Callable, num_unbatched_tail: int, carry_first: bool = False
    ) -> Callable:
        """:meth:`_batch` on one device: vectorized or sequential chains."""

        def batched(consts, *args):
            n = len(args) - num_unbatched_tail
            per_chain, shared = args[:n], args[n:]
            one = lambda *pc: fn(consts, *pc, *shared)  # noqa: E731
            if self.chain_method == "vectorized":  # named: cross-chain warmups reduce over it
                return jax.vmap(one, axis_name=_CHAINS)(*per_chain)
            if carry_first:
                return map_in_place(one, per_chain)
            return jax.lax.map(lambda pc: one(*pc), per_chain)

        return batched

    def _build_update_statistics(self) -> Callable:
        """``(stats, draws, count) -> stats``: every chain's statistics updated with its
        first ``count`` rows of a chunk's ``draws`` (``{"posterior": ...}`` of
        ``advance``'s outputs), in place (the states' buffers are reused: with
        checkpoints the session updates them once the chunk before is saved)."""
        update = chains_update(self.statistic)

        def batched(_consts, stats, draws, count):
            return update(stats, draws["posterior"], count)

        sharded = self._sharded(batched, num_unbatched_tail=1)

        def update_statistics(stats, draws, count):  # named: bench/stats_scale.py times it
            return sharded((), stats, draws, count)

        return jax.jit(update_statistics, donate_argnums=(0,))

    def _build_window_end(self, donate: bool = False) -> Callable:
        """``(consts, kernel states, adaptation states, chain_ids, t, num_warmup, schedule,
        keys) -> (adaptation states, params, gradients)``: every chain's warmup
        ``window_end`` (:class:`~sluice.mcmc.protocol.Warmup`) after iteration ``t``.
        ``donate``: the adaptation states' buffers are reused."""
        pooled = self.kernel.warmup().pooled
        if pooled is None:
            batched = self._batch(self._window_end_one, num_unbatched_tail=4)
            return jax.jit(batched, donate_argnums=(2,) if donate else ())
        per_chain = self._per_chain(self._window_end_one, num_unbatched_tail=5)
        multi = self.mesh is not None and self.mesh.size > 1

        def with_sum(consts, kstates, astates, chain_ids, *shared):
            # summed over this device's real chains (padded slots left out), then over
            # the devices and processes: before the chains' own window ends, so that
            # it needs no collective inside them (sequential chains have no axis)
            values = jax.vmap(pooled)(astates)
            total = jnp.sum(jnp.where(self._real(chain_ids), values, jnp.zeros_like(values)))
            if multi:
                total = jax.lax.psum(total, "chains")
            return per_chain(consts, kstates, astates, chain_ids, *shared, total)

        batched = self._sharded(with_sum, num_unbatched_tail=4)
        return jax.jit(batched, donate_argnums=(2,) if donate else ())

    def draws_shapes(self, consts: Any, slots: int, sharding: Any = None) -> dict:
        """The shapes of ``advance``'s draws output, ``{"posterior": ...}`` with leading
        ``(slots, chunk_size)`` axes (``sharding``: their layout over the devices), as
        ``update_statistics`` takes them."""
        x = jax.ShapeDtypeStruct((self.flat_model.dim,), self.flat_model.dtype)
        one = jax.eval_shape(self.flat_model.draws_fn, consts, x)
        return {
            "posterior": jax.tree.map(
                lambda s: jax.ShapeDtypeStruct(
                    (slots, self.chunk_size, *s.shape), s.dtype, sharding=sharding
                ),
                one,
            )
        }

    def _build_advance(self, donate: bool = False) -> Callable:
        # ``advance_donated`` (runs without checkpoints) reuses the carry's buffers;
        # ``advance`` keeps them: with checkpoints the host still reads chunk k's carry.
        batched = self._batch(self._advance_one, num_unbatched_tail=5, carry_first=True)
        return jax.jit(batched, donate_argnums=(1,) if donate else ())


def sample_stats_shapes(flat_model: FlatModel, kernel: Kernel) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes of the sample statistics a step of ``kernel`` returns on ``flat_model``.

    The kernel's declaration (:meth:`~sluice.mcmc.protocol.Kernel.stats_shapes`)
    when the log-density has the positions' dtype; a traced transition when it
    has another (mixed precision)."""
    x = jax.ShapeDtypeStruct((flat_model.dim,), flat_model.dtype)
    logdensity = functools.partial(flat_model.logdensity_fn, flat_model.consts)
    if jax.eval_shape(logdensity, x).dtype == flat_model.dtype:
        shapes = kernel.stats_shapes(flat_model.dtype)
        return {k: v for k, v in shapes.items() if not k.startswith("_")}

    def one(x: jax.Array) -> dict[str, jax.Array]:
        key = jnp.zeros((2,), jnp.uint32)
        warmup = kernel.warmup()
        kstate = kernel.init(x, logdensity, key)
        astate, _ = warmup.init(key, kstate, logdensity)
        stats = kernel.step(key, kstate, logdensity, warmup.params(astate))[1]
        return {k: v for k, v in stats.items() if not k.startswith("_")}

    return jax.eval_shape(one, x)
