"""Hamiltonian Monte Carlo transitions written for the chunk engine: NUTS and static HMC.

Each transition is a pure function of ``(rng_key, state, step_size,
inverse_mass_matrix)`` for ONE chain on a flat ``(dim,)`` position; under
``jax.vmap`` a batched implementation takes over (below). The state is the
triple ``(position, logdensity, logdensity_grad)``.

The No-U-Turn sampler
---------------------
Hoffman & Gelman (2014) with the multinomial sampling and the generalized
no-U-turn criterion of Betancourt (2017), built iteratively rather than
recursively, as in NumPyro and BlackJAX, which this implementation matches
in distribution. Given a state ``x`` with log-density ``log p(x)``, a momentum
``p ~ N(0, M)`` is drawn and the trajectory of the leapfrog integrator of
``H(x, p) = -log p(x) + p' M^{-1} p / 2`` is doubled in a random direction
(doubling ``j`` integrates a new subtree of ``2**j`` steps from the end of
the trajectory on that side) until

* the whole trajectory turns back: with ``rho`` the trapezoidal integral of
  the momentum from the leftmost state ``-`` to the rightmost ``+``,
  ``rho = sum_i p_i - (p_- + p_+) / 2``, the trajectory turns when
  ``(M^{-1} p_-) . rho <= 0`` or ``(M^{-1} p_+) . rho <= 0``;
* or any binary sub-trajectory of the new subtree turns (then the subtree is
  rejected: its states are not candidates);
* or the energy error ``H - H_0`` exceeds ``divergence_threshold`` (a
  divergence; the subtree is rejected too);
* or ``max_tree_depth`` doublings were made.

Candidates are weighted by ``exp(-H)``. Within a subtree a state is drawn
in proportion to its weight by progressive sampling (leaf ``n`` replaces the
subtree's candidate with probability ``w_n / sum_{i <= n} w_i``); an accepted
subtree then replaces the trajectory's candidate with probability
``min(1, W_subtree / W_old)`` (biased progressive sampling, which favours
the states far from the start; Betancourt 2017, appendix A.3.2).

The sub-trajectory checks keep the first leaves of the open binary
sub-trajectories on a stack of ``max_tree_depth + 1`` rows (one a scratch
row), so no copy of the trajectory is ever made (``_push_checkpoint``).

Whitened coordinates
--------------------
The integrator runs in ``y = L^{-1} x`` with ``L L' = M^{-1}`` (``L`` the
square root of a diagonal inverse mass matrix, its Cholesky factor, or the
low-rank factor of :mod:`sluice.mcmc.metric`), where
the mass matrix is the identity: ``p ~ N(0, I)``, the kinetic energy is
``|p|^2 / 2``, the gradient is ``L' grad log p(L y)`` and the U-turn test is
a plain dot product. The leapfrog trajectories, energies and tests are those
of the original coordinates (up to rounding) while the metric enters a step
only in the drift and the kick, never in kinetic energies or U-turn tests.
The momentum is carried half a step ahead of the position (kick-drift-kick
with the kicks of consecutive steps merged).

Costs and batching
------------------
Per leapfrog step the transition touches the position, momentum, gradient,
momentum sum, candidate and one checkpoint row; no array of the trajectory's
size is copied. Randomness (the momentum, the directions, and one uniform per
leaf) is the Threefry-2x32 generator of ``jax.random`` evaluated inline
(unrolled, so XLA fuses it; JAX's own CPU lowering is a rolled loop that costs
tens of operations per draw).

Under ``jax.vmap`` (vectorized chains) a ``custom_vmap`` rule runs the
doubling and leaf loops while *any* chain is active, the per-chain work
vmapped inside, with finished chains masked: their step size is held at zero
in effect (their state is not updated) and their checkpoint and candidate
writes go to the scratch row. JAX's default batching of a ``while_loop``
would instead select every loop-carried array, checkpoints included, after
every step. Draws are the same, chain by chain, as with sequential chains
(the same keys give the same trajectories).

References
----------
Hoffman & Gelman (2014), "The No-U-Turn Sampler", JMLR 15.
Betancourt (2017), "A Conceptual Introduction to Hamiltonian Monte Carlo",
arXiv:1701.02434 (multinomial sampling, generalized no-U-turn criterion).
Salmon, Moraes, Dror & Shaw (2011), "Parallel random numbers: as easy as
1, 2, 3" (Threefry).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice._jax import random
from sluice._jax.batching import batched_by
from sluice._jax.closure import closure_convert
from sluice.mcmc import metric

__all__ = ["find_step_size", "hmc_step", "nuts_step"]

# Up to this dimension the per-step bookkeeping is dominated by the number of
# operations, not by memory traffic: checkpoints are tested all at once (masked)
# and writes go to a scratch row instead of being skipped by a branch. Set
# between the two regimes measured (dim 10: masked faster; dim 10,000: the
# check loop and branches faster); the crossover itself was not measured.
_SMALL_DIM = 256

# Counter streams of the transition's key (one Threefry block per draw).
_MOMENTUM, _DIRECTIONS, _LEAF, _MERGE, _ACCEPT, _TRIAL = range(6)  # _TRIAL + i: trial i


def _dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.sum(a * b, axis=-1)


# -- NUTS ------------------------------------------------------------------------
# One transition, read top to bottom: ``_nuts`` draws a momentum (``_start``)
# and doubles the trajectory while ``_keeps_doubling``; each doubling starts a
# subtree at one end (``_start_subtree``), adds leaves while
# ``_subtree_grows`` (``_add_leaf``: a leapfrog step, its weight, the
# sub-trajectory U-turn checks) and joins it to the trajectory (``_join``).
# The per-chain functions take the transition's settings first; ``_nuts``
# runs them for one chain, or vmapped for a batch.
#
# The loops carry the trajectory and the subtree packed into a few arrays
# (``_Trajectory.pack``, ``_Subtree.pack``): on CPU each loop-carried array is
# a fusion of its own in every step, and a dozen small ones can cost more than
# the arithmetic between gradients.


class _Settings(NamedTuple):
    """What a transition's program depends on besides its arrays (Python values)."""

    logdensity_and_grad: Callable  # (d,) position -> (log-density (), gradient (d,))
    max_tree_depth: int  # K: most doublings
    divergence_threshold: float
    dim: int  # d
    batched: bool  # the arrays have a leading batch axis (vectorized chains)

    @property
    def check_all_rows(self) -> bool:
        """Test every checkpoint row at once, masked (cheap in operations when ``d`` is small)."""
        return self.dim <= _SMALL_DIM

    @property
    def skip_by_branch(self) -> bool:
        """Skip a write with ``lax.cond`` instead of sending it to a scratch row.

        Only for one chain: under ``vmap`` a ``cond`` with a batched predicate
        runs both branches."""
        return not (self.batched or self.check_all_rows)


class _Context(NamedTuple):
    """Per-chain constants of a transition, and of the subtree being built."""

    key_words: Any  # two () uint32: the transition's key
    factor: Any  # L: (d,), (d, d) or a metric.LowRankFactor
    initial_energy: jax.Array  # () H0
    directions: jax.Array  # () uint32: bit j is the direction of doubling j (1: right)
    step_size: jax.Array  # ()
    depth: jax.Array  # () int32: depth of the subtree being built (2**depth leaves)
    signed_step_size: jax.Array  # () the step size, negative when integrating to the left


def _flags(*bools):
    """() bools and ints as one int32 vector (along the last axis)."""
    return jnp.stack([b.astype(jnp.int32) for b in bools], axis=-1)


class _Trajectory(NamedTuple):
    """The trajectory built so far (one chain, or a batch along leading axes)."""

    ends: jax.Array  # (2, 3, d): [0] the leftmost state, [1] the rightmost: (x, p, g)
    momentum_sum: jax.Array  # (d,) sum of the momenta of all its states
    position: jax.Array  # (d,) the proposal: the state sampled among its states
    logdensity: jax.Array  # () the proposal's
    grad: jax.Array  # (d,) the proposal's
    energy: jax.Array  # () the proposal's H
    log_weight: jax.Array  # () log sum over its states of exp(H0 - H)
    sum_accept_prob: jax.Array  # () sum over its steps of min(1, exp(H0 - H))
    depth: jax.Array  # () int32: doublings made
    num_steps: jax.Array  # () int32: leapfrog steps (= gradients)
    turning: jax.Array  # () bool: the trajectory or a rejected subtree made a U-turn
    diverging: jax.Array  # () bool

    def pack(self):
        """``(ends, (position, grad, momentum_sum), scalars (4,), flags (4,))``."""
        vectors = jnp.stack([self.position, self.grad, self.momentum_sum], axis=-2)
        scalars = jnp.stack(
            [self.logdensity, self.energy, self.log_weight, self.sum_accept_prob], axis=-1
        )
        flags = _flags(self.depth, self.num_steps, self.turning, self.diverging)
        return self.ends, vectors, scalars, flags

    @classmethod
    def unpack(cls, packed) -> _Trajectory:
        ends, vectors, scalars, flags = packed
        position, grad, momentum_sum = (vectors[..., i, :] for i in range(3))
        logdensity, energy, log_weight, sum_accept_prob = (scalars[..., i] for i in range(4))
        return cls(
            ends=ends,
            momentum_sum=momentum_sum,
            position=position,
            logdensity=logdensity,
            grad=grad,
            energy=energy,
            log_weight=log_weight,
            sum_accept_prob=sum_accept_prob,
            depth=flags[..., 0],
            num_steps=flags[..., 1],
            turning=flags[..., 2] != 0,
            diverging=flags[..., 3] != 0,
        )


class _Subtree(NamedTuple):
    """The subtree being integrated (one chain): the carry of the leaf loop."""

    position: jax.Array  # (d,) of the last leaf
    momentum_ahead: jax.Array  # (d,) half a step past the last leaf (see _leapfrog_step)
    grad: jax.Array  # (d,) of the last leaf
    momentum_sum: jax.Array  # (d,) sum of the momenta of its leaves
    candidate: jax.Array  # (2, 2, d): [0] (position, grad) of the leaf sampled so far; [1] scratch
    logdensity: jax.Array  # () the candidate's
    energy: jax.Array  # () the candidate's
    log_weight: jax.Array  # () log sum over its leaves of exp(H0 - H)
    sum_accept_prob: jax.Array  # () sum over its leaves of min(1, exp(H0 - H))
    checkpoints: jax.Array  # (K + 1, 2, d): (p_a, q_a) of open sub-trajectories (_push_checkpoint)
    num_leaves: jax.Array  # () int32: leaves built
    turning: jax.Array  # () bool: a sub-trajectory made a U-turn (or the chain is finished)
    diverging: jax.Array  # () bool

    def pack(self):
        """``(vectors (4, d), candidate, scalars (4,), checkpoints, flags (3,))``."""
        vectors = jnp.stack([self.position, self.momentum_ahead, self.grad, self.momentum_sum], -2)
        scalars = jnp.stack(
            [self.logdensity, self.energy, self.log_weight, self.sum_accept_prob], axis=-1
        )
        flags = _flags(self.num_leaves, self.turning, self.diverging)
        return vectors, self.candidate, scalars, self.checkpoints, flags

    @classmethod
    def unpack(cls, packed) -> _Subtree:
        vectors, candidate, scalars, checkpoints, flags = packed
        position, momentum_ahead, grad, momentum_sum = (vectors[..., i, :] for i in range(4))
        logdensity, energy, log_weight, sum_accept_prob = (scalars[..., i] for i in range(4))
        return cls(
            position=position,
            momentum_ahead=momentum_ahead,
            grad=grad,
            momentum_sum=momentum_sum,
            candidate=candidate,
            logdensity=logdensity,
            energy=energy,
            log_weight=log_weight,
            sum_accept_prob=sum_accept_prob,
            checkpoints=checkpoints,
            num_leaves=flags[..., 0],
            turning=flags[..., 1] != 0,
            diverging=flags[..., 2] != 0,
        )


def _nuts(cfg: _Settings, key_words, state, step_size, inverse_mass_matrix):
    """One transition of one chain (``cfg.batched`` False) or of a batch of chains.

    A batch runs each loop while any chain is active, the per-chain work
    vmapped inside and finished chains masked (see the module docstring)."""
    per_chain = jax.vmap if cfg.batched else (lambda f: f)
    any_chain = jnp.any if cfg.batched else (lambda b: b)
    trajectory, ctx = per_chain(functools.partial(_start, cfg))(
        key_words, state, step_size, inverse_mass_matrix
    )

    @per_chain
    def keeps_doubling(packed):
        return _keeps_doubling(cfg, _Trajectory.unpack(packed))

    @per_chain
    def start_subtree(packed, ctx, checkpoints, active):
        subtree, sub_ctx = _start_subtree(cfg, _Trajectory.unpack(packed), ctx, checkpoints, active)
        return subtree.pack(), sub_ctx

    @per_chain
    def subtree_grows(packed, sub_ctx):
        return _subtree_grows(_Subtree.unpack(packed), sub_ctx)

    @per_chain
    def add_leaf(packed, sub_ctx, active):
        return _add_leaf(cfg, _Subtree.unpack(packed), sub_ctx, active).pack()

    @per_chain
    def join(packed, sub_packed, sub_ctx, active):
        trajectory = _Trajectory.unpack(packed)
        return _join(trajectory, _Subtree.unpack(sub_packed), sub_ctx, active).pack()

    def double(carry):
        packed, checkpoints = carry
        active = keeps_doubling(packed)
        subtree, sub_ctx = start_subtree(packed, ctx, checkpoints, active)

        def grow(subtree):
            if cfg.batched:
                return add_leaf(subtree, sub_ctx, subtree_grows(subtree, sub_ctx))
            return add_leaf(subtree, sub_ctx, jnp.bool_(True))  # the loop runs only while active

        def grows(subtree):
            return any_chain(subtree_grows(subtree, sub_ctx))

        subtree = jax.lax.while_loop(grows, grow, subtree)
        return join(packed, subtree, sub_ctx, active), _Subtree.unpack(subtree).checkpoints

    def doubling(carry):
        return any_chain(keeps_doubling(carry[0]))

    x0 = state[0]
    checkpoints = jnp.zeros((*x0.shape[:-1], cfg.max_tree_depth + 1, 2, cfg.dim), x0.dtype)
    packed, _ = jax.lax.while_loop(doubling, double, (trajectory.pack(), checkpoints))
    trajectory = _Trajectory.unpack(packed)
    info = {
        "acceptance_rate": trajectory.sum_accept_prob / trajectory.num_steps,
        "tree_depth": trajectory.depth,
        "n_steps": trajectory.num_steps,
        "diverging": trajectory.diverging,
        "energy": trajectory.energy,
    }
    return (trajectory.position, trajectory.logdensity, trajectory.grad), info


def _start(cfg: _Settings, key_words, state, step_size, inverse_mass_matrix):
    """The one-state trajectory at ``state`` with a fresh momentum, and the constants."""
    x0, logp0, g0 = state
    factor = metric.factor(inverse_mass_matrix)
    p0 = random.normal(key_words, _MOMENTUM, cfg.dim).astype(x0.dtype)
    h0 = -logp0 + 0.5 * _dot(p0, p0)
    zero = jnp.zeros((), x0.dtype)
    end = jnp.stack([x0, p0, g0])
    trajectory = _Trajectory(
        ends=jnp.stack([end, end]),
        momentum_sum=p0,
        position=x0,
        logdensity=logp0,
        grad=g0,
        energy=h0,
        log_weight=zero,  # log exp(H0 - H0)
        sum_accept_prob=zero,
        depth=jnp.int32(0),
        num_steps=jnp.int32(0),
        turning=jnp.bool_(False),
        diverging=jnp.bool_(False),
    )
    directions = random.bits(key_words, _DIRECTIONS, 0)[0]
    ctx = _Context(key_words, factor, h0, directions, step_size, jnp.int32(0), step_size)
    return trajectory, ctx


def _keeps_doubling(cfg: _Settings, trajectory: _Trajectory) -> jax.Array:
    return (trajectory.depth < cfg.max_tree_depth) & ~trajectory.turning & ~trajectory.diverging


def _goes_right(trajectory: _Trajectory, ctx: _Context) -> jax.Array:
    """() int32: 1 if this doubling extends the right end, 0 the left."""
    return ((ctx.directions >> trajectory.depth.astype(jnp.uint32)) & 1).astype(jnp.int32)


def _start_subtree(cfg: _Settings, trajectory, ctx, checkpoints, active):
    """An empty subtree at the end this doubling extends, and its constants.

    ``checkpoints`` are reused from the previous subtree: rows are written
    before they are read (leaf ``a`` writes the row its sub-trajectories read)."""
    right = _goes_right(trajectory, ctx)
    eps = jnp.where(right == 1, ctx.step_size, -ctx.step_size).astype(trajectory.momentum_sum.dtype)
    x, p, g = trajectory.ends[right]
    zero = jnp.zeros((), x.dtype)
    subtree = _Subtree(
        position=x,
        momentum_ahead=p + 0.5 * eps * metric.grad_y(ctx.factor, g),
        grad=g,
        momentum_sum=jnp.zeros_like(x),
        candidate=jnp.zeros((2, 2, cfg.dim), x.dtype),
        logdensity=zero,
        energy=zero,
        log_weight=jnp.full((), -jnp.inf, x.dtype),  # no leaves: log 0
        sum_accept_prob=zero,
        checkpoints=checkpoints,
        num_leaves=jnp.int32(0),
        turning=~active,  # a finished chain builds no leaves: it starts turning
        diverging=jnp.bool_(False),
    )
    return subtree, ctx._replace(depth=trajectory.depth, signed_step_size=eps)


def _subtree_grows(subtree: _Subtree, ctx: _Context) -> jax.Array:
    full = subtree.num_leaves >= jnp.left_shift(1, ctx.depth)
    return ~full & ~subtree.turning & ~subtree.diverging


def _leapfrog_step(cfg: _Settings, subtree: _Subtree, ctx: _Context, active):
    """One leapfrog step from the subtree's last leaf: the new leaf.

    The momentum is carried half a step ahead of the position, so a step is a
    drift and one kick to the full step (``p``, for the energy and the U-turn
    checks), then a second kick half a step ahead for the next drift: the two
    half kicks of consecutive steps, merged. An inactive chain stays put.
    Returns ``(position, logdensity, grad, p, momentum_ahead)``."""
    eps = ctx.signed_step_size
    half = 0.5 * eps
    drifted = subtree.position + eps * metric.to_x(ctx.factor, subtree.momentum_ahead)
    x = jnp.where(active, drifted, subtree.position)
    logp, g = cfg.logdensity_and_grad(x)
    gy = metric.grad_y(ctx.factor, g)
    p = subtree.momentum_ahead + half * gy
    ahead = jnp.where(active, p + half * gy, subtree.momentum_ahead)
    return x, logp, g, p, ahead


def _write_candidate(cfg: _Settings, candidate, take, x, g):
    """``(x, g)`` into row 0 of the candidate if ``take`` (else into the scratch row 1)."""
    if cfg.skip_by_branch:  # write only when the candidate changes
        return jax.lax.cond(take, lambda c: _write_row(c, 0, x, g), lambda c: c, candidate)
    return _write_row(candidate, jnp.where(take, 0, 1), x, g)


def _push_checkpoint(cfg: _Settings, checkpoints, n, active, p, q):
    """At an even leaf ``n``, ``(p_n, q_n)`` into row ``popcount(n)``.

    The sub-trajectories that start at leaf ``a`` (even) are those of ``2**k``
    leaves for ``2**k`` dividing ``a``; they end at leaves ``a + 2**k - 1``.
    While they are open, every leaf ``b`` with ``a < b`` pushed so far has
    ``popcount(b) > popcount(a)`` (``b`` is ``a`` plus a number below
    ``2**k``), so row ``popcount(a)`` still holds leaf ``a``: ``K`` rows hold
    every open start, and nothing of the trajectory's size is ever copied.
    Row ``K`` is scratch."""
    even = (n & 1) == 0
    if cfg.skip_by_branch:  # push at even leaves only
        row = jax.lax.population_count(n)
        return jax.lax.cond(even, lambda c: _write_row(c, row, p, q), lambda c: c, checkpoints)
    row = jnp.where(active & even, jax.lax.population_count(n), cfg.max_tree_depth)
    return _write_row(checkpoints, row, p, q)


def _subtrajectory_turns(cfg: _Settings, checkpoints, n, p, q) -> jax.Array:
    """() bool: does a binary sub-trajectory ending at leaf ``n`` make a U-turn?

    With ``t`` the number of trailing one bits of ``n``, the sub-trajectories
    ending at ``n`` have ``2, 4, .., 2**t`` leaves; the one of ``2**k`` leaves
    starts at ``a = n + 1 - 2**k``, whose popcount is ``popcount(n >> 1) - k
    + 1``: rows ``lo..hi`` below (none for an even ``n``). Each turns, by the
    generalized criterion, if the momentum at either end points against the
    trapezoidal momentum integral between them, ``rho = q_n - q_a``."""
    hi = jax.lax.population_count(n >> 1)
    trailing_ones = jax.lax.population_count((~n & (n + 1)) - 1)
    lo = hi - trailing_ones + 1
    if cfg.check_all_rows:  # all rows at once, masked
        rho = q - checkpoints[:, 1]
        turns = (_dot(checkpoints[:, 0], rho) <= 0) | (_dot(p, rho) <= 0)
        rows = jnp.arange(cfg.max_tree_depth + 1)
        return jnp.any(turns & (rows >= lo) & (rows <= hi))

    # only the rows that close here, newest first, until one turns
    def more(carry):
        row, turned = carry
        return (row >= lo) & ~turned

    def check(carry):
        row, _ = carry
        p_a, q_a = jax.lax.dynamic_index_in_dim(checkpoints, row, keepdims=False)
        rho = q - q_a
        return row - 1, (_dot(p_a, rho) <= 0) | (_dot(p, rho) <= 0)

    _, turned = jax.lax.while_loop(more, check, (hi, jnp.bool_(False)))
    return turned


def _add_leaf(cfg: _Settings, subtree: _Subtree, ctx: _Context, active) -> _Subtree:
    """One leapfrog step, its weight, the candidate, and the sub-trajectory checks."""
    n = subtree.num_leaves
    x, logp, g, p, ahead = _leapfrog_step(cfg, subtree, ctx, active)
    energy = -logp + 0.5 * _dot(p, p)
    delta = energy - ctx.initial_energy  # H - H0, the energy error
    delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)

    # Multinomial sampling within the subtree, progressively: the leaf has
    # weight exp(-delta) and replaces the candidate with probability its
    # weight over the subtree's weight so far (leaf included), so that in the
    # end each leaf is the candidate in proportion to its weight.
    log_weight = jnp.logaddexp(subtree.log_weight, -delta)
    u = random.uniform(ctx.key_words, _LEAF, jnp.left_shift(1, ctx.depth) + n)
    take = active & (jnp.log(u) < -delta - log_weight)

    # q_n = S_n - p_n / 2 with S_n the momentum sum through leaf n: the
    # trapezoidal integral from leaf a to leaf n is q_n - q_a.
    momentum_sum = subtree.momentum_sum + jnp.where(active, p, 0.0)
    q = momentum_sum - 0.5 * p
    checkpoints = _push_checkpoint(cfg, subtree.checkpoints, n, active, p, q)
    turning = _subtrajectory_turns(cfg, checkpoints, n, p, q)
    return _Subtree(
        position=x,
        momentum_ahead=ahead,
        grad=g,
        momentum_sum=momentum_sum,
        candidate=_write_candidate(cfg, subtree.candidate, take, x, g),
        logdensity=jnp.where(take, logp, subtree.logdensity),
        energy=jnp.where(take, energy, subtree.energy),
        log_weight=jnp.where(active, log_weight, subtree.log_weight),
        sum_accept_prob=subtree.sum_accept_prob
        + jnp.where(active, jnp.minimum(1.0, jnp.exp(-delta)), 0.0),
        checkpoints=checkpoints,
        num_leaves=n + active.astype(jnp.int32),
        turning=subtree.turning | (active & turning),
        diverging=subtree.diverging | (active & (delta > cfg.divergence_threshold)),
    )


def _join(trajectory: _Trajectory, subtree: _Subtree, ctx: _Context, active) -> _Trajectory:
    """Add an integrated subtree to the trajectory and test the whole trajectory."""
    right = _goes_right(trajectory, ctx)

    # Biased progressive sampling: a subtree that neither turned nor diverged
    # replaces the proposal with probability min(1, W_subtree / W_trajectory),
    # which favours states far from the start (Betancourt 2017, A.3.2).
    valid = active & ~subtree.turning & ~subtree.diverging
    u = random.uniform(ctx.key_words, _MERGE, trajectory.depth)
    take = valid & (jnp.log(u) < subtree.log_weight - trajectory.log_weight)

    # The subtree's last leaf becomes the trajectory's end on its side (its
    # momentum taken back from half a step ahead to the leaf).
    p_end = subtree.momentum_ahead - 0.5 * ctx.signed_step_size * metric.grad_y(
        ctx.factor, subtree.grad
    )
    new_end = jnp.stack([subtree.position, p_end, subtree.grad])
    ends = trajectory.ends.at[right].set(jnp.where(active, new_end, trajectory.ends[right]))

    # The generalized U-turn criterion on the whole trajectory: the momentum
    # at either end against the trapezoidal integral of the momentum between
    # them, rho = sum_i p_i - (p_- + p_+) / 2.
    momentum_sum = trajectory.momentum_sum + jnp.where(active, subtree.momentum_sum, 0.0)
    p_left, p_right = ends[0, 1], ends[1, 1]
    rho = momentum_sum - 0.5 * (p_left + p_right)
    turning = (_dot(p_left, rho) <= 0) | (_dot(p_right, rho) <= 0)

    log_weight = jnp.logaddexp(trajectory.log_weight, subtree.log_weight)
    return _Trajectory(
        ends=ends,
        momentum_sum=momentum_sum,
        position=jnp.where(take, subtree.candidate[0, 0], trajectory.position),
        logdensity=jnp.where(take, subtree.logdensity, trajectory.logdensity),
        grad=jnp.where(take, subtree.candidate[0, 1], trajectory.grad),
        energy=jnp.where(take, subtree.energy, trajectory.energy),
        log_weight=jnp.where(active, log_weight, trajectory.log_weight),
        sum_accept_prob=trajectory.sum_accept_prob
        + jnp.where(active, subtree.sum_accept_prob, 0.0),
        depth=trajectory.depth + active.astype(jnp.int32),
        num_steps=trajectory.num_steps + subtree.num_leaves,
        turning=trajectory.turning | (active & (subtree.turning | turning)),
        diverging=trajectory.diverging | (active & subtree.diverging),
    )


def _write_row(rows: jax.Array, row: Any, *values: jax.Array) -> jax.Array:
    """``values`` (stacked) into row ``row`` of ``rows``.

    A write that must not happen goes to a scratch row, so that it needs no
    branch (under ``vmap`` a branch runs both sides) and no copy."""
    # (an index helper, not dynamic_update_slice with literal zeros: under
    # jax_enable_x64, as PyMC sets it, those are int64 against an int32 row)
    return jax.lax.dynamic_update_index_in_dim(rows, jnp.stack(values), row, 0)


def nuts_step(
    rng_key: jax.Array,
    state: tuple[jax.Array, jax.Array, jax.Array],
    logdensity_fn: Callable[[jax.Array], jax.Array],
    step_size: jax.Array,
    inverse_mass_matrix: jax.Array,
    *,
    max_tree_depth: int = 10,
    divergence_threshold: float = 1000.0,
) -> tuple[tuple[jax.Array, jax.Array, jax.Array], dict[str, jax.Array]]:
    """One NUTS transition of one chain (see the module docstring for the algorithm).

    Parameters
    ----------
    rng_key
        A Threefry key (raw ``(2,)`` uint32 or typed).
    state
        ``(position (dim,), logdensity (), logdensity_grad (dim,))``.
    logdensity_fn
        Log-density of a ``(dim,)`` position.
    step_size, inverse_mass_matrix
        Leapfrog step size; inverse mass matrix, diagonal ``(dim,)``, dense
        ``(dim, dim)`` or low rank (:class:`sluice.mcmc.metric.LowRank`).
    max_tree_depth
        Most doublings: at most ``2**max_tree_depth - 1`` leapfrog steps.
    divergence_threshold
        Energy error ``H - H0`` above which a step diverges.

    Returns
    -------
    state, info
        The new state, and ``{"acceptance_rate", "tree_depth", "n_steps",
        "diverging", "energy"}``: the mean of ``min(1, exp(H0 - H))`` over all
        steps (the statistic the step-size adaptation targets), the doublings
        made, the leapfrog steps (gradients), whether a step diverged, and the
        energy of the new state.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> logdensity = lambda x: -0.5 * jnp.sum(x**2)
    >>> x = jnp.zeros(3)
    >>> state = (x, *jax.value_and_grad(logdensity)(x))
    >>> new, info = nuts_step(jax.random.PRNGKey(0), state, logdensity, 0.5, jnp.ones(3))
    >>> new[0].shape, int(info["n_steps"]) >= 1
    ((3,), True)
    """
    if not (isinstance(max_tree_depth, int) and max_tree_depth >= 1):
        raise ValueError(f"max_tree_depth must be a positive int, got {max_tree_depth!r}")
    vg, consts, _ = closure_convert(jax.value_and_grad(logdensity_fn), state[0])

    def settings(consts, batched):
        fn = functools.partial(vg, consts)
        threshold = float(divergence_threshold)
        return _Settings(fn, max_tree_depth, threshold, state[0].shape[-1], batched)

    def one(key, state, step_size, imm, consts):
        cfg = settings(consts, batched=False)
        return _nuts(cfg, random.key_words(key), state, step_size, imm)

    def many(keys, state, step_size, imm, consts):
        cfg = settings(consts, batched=True)
        return _nuts(cfg, jax.vmap(random.key_words)(keys), state, step_size, imm)

    return batched_by(one, many)(rng_key, tuple(state), step_size, inverse_mass_matrix, consts)


# -- static HMC --------------------------------------------------------------------
def _leapfrog(vg, factor, eps, y, ph, num_steps):
    """``num_steps`` whitened leapfrog steps from ``y`` with momentum ``ph`` half a step ahead.

    Returns ``(y, ph, p, x, logp, g)`` at the last step (``p`` the full-step momentum).
    """
    half = 0.5 * eps

    def body(_, carry):
        y, ph, _p, _x, _logp, _g = carry
        y = y + eps * ph
        x = metric.to_x(factor, y)
        logp, g = vg(x)
        gy = metric.grad_y(factor, g)
        p = ph + half * gy
        return y, p + half * gy, p, x, logp, g

    x = metric.to_x(factor, y)
    zero = jnp.zeros((), y.dtype)
    return jax.lax.fori_loop(0, num_steps, body, (y, ph, ph, x, zero, jnp.zeros_like(x)))


def hmc_step(
    rng_key: jax.Array,
    state: tuple[jax.Array, jax.Array, jax.Array],
    logdensity_fn: Callable[[jax.Array], jax.Array],
    step_size: jax.Array,
    inverse_mass_matrix: jax.Array,
    *,
    num_integration_steps: int = 10,
    divergence_threshold: float = 1000.0,
) -> tuple[tuple[jax.Array, jax.Array, jax.Array], dict[str, jax.Array]]:
    """One static HMC transition: ``num_integration_steps`` leapfrog steps, then Metropolis.

    The proposal (the trajectory's end) is accepted with probability
    ``min(1, exp(H0 - H))`` (Neal 2011, "MCMC using Hamiltonian dynamics").
    Returns the new state and ``{"acceptance_rate", "n_steps", "diverging", "energy"}``.
    """
    x0, logp0, g0 = state
    words = random.key_words(rng_key)
    factor = metric.factor(inverse_mass_matrix)
    p0 = random.normal(words, _MOMENTUM, x0.shape[0]).astype(x0.dtype)
    h0 = -logp0 + 0.5 * _dot(p0, p0)
    eps = jnp.asarray(step_size, x0.dtype)
    ph0 = p0 + 0.5 * eps * metric.grad_y(factor, g0)
    _, _, p, x, logp, g = _leapfrog(
        jax.value_and_grad(logdensity_fn),
        factor,
        eps,
        metric.to_y(factor, x0),
        ph0,
        num_integration_steps,
    )
    energy = -logp + 0.5 * _dot(p, p)
    delta = jnp.where(jnp.isnan(energy - h0), jnp.inf, energy - h0)
    accept_prob = jnp.minimum(1.0, jnp.exp(-delta))
    accept = random.uniform(words, _ACCEPT, 0) < accept_prob
    new = (jnp.where(accept, x, x0), jnp.where(accept, logp, logp0), jnp.where(accept, g, g0))
    info = {
        "acceptance_rate": accept_prob,
        "n_steps": jnp.int32(num_integration_steps),
        "diverging": delta > divergence_threshold,
        "energy": jnp.where(accept, energy, h0),
    }
    return new, info


# -- initial step size ---------------------------------------------------------------
def find_step_size(
    rng_key: jax.Array,
    state: tuple[jax.Array, jax.Array, jax.Array],
    logdensity_fn: Callable[[jax.Array], jax.Array],
    step_size: jax.Array,
    inverse_mass_matrix: jax.Array,
    target: float = 0.8,
    max_iterations: int = 100,
) -> tuple[jax.Array, jax.Array]:
    """Stan's ``init_stepsize``: double or halve until one step's acceptance crosses ``target``.

    Starting from ``step_size``, each trial draws a fresh momentum and takes
    one leapfrog step; if ``exp(H0 - H) > target`` the size is doubled until
    it no longer is, else halved until it is. Returns ``(step_size,
    num_gradients)`` (the size at which the acceptance first crossed).
    """
    x0, logp0, g0 = state
    words = random.key_words(rng_key)
    factor = metric.factor(inverse_mass_matrix)
    vg = jax.value_and_grad(logdensity_fn)
    y0 = metric.to_y(factor, x0)
    gy0 = metric.grad_y(factor, g0)
    log_target = jnp.log(jnp.asarray(target, x0.dtype))

    def delta_h(i, eps):
        p0 = random.normal(words, _TRIAL + i, x0.shape[0]).astype(x0.dtype)
        ph = p0 + 0.5 * eps * gy0
        _, _, p, _, logp, _ = _leapfrog(vg, factor, eps, y0, ph, 1)
        h0 = -logp0 + 0.5 * _dot(p0, p0)
        h1 = -logp + 0.5 * _dot(p, p)
        return jnp.where(jnp.isfinite(h1), h0 - h1, -jnp.inf)

    # One loop traces the trial once (its first pass fixes the direction): the
    # trial is a leapfrog step with inline random numbers, and a second copy of it
    # outside the loop made this function take twice as long to compile.
    eps0 = jnp.asarray(step_size, x0.dtype)
    grow = jnp.asarray(2.0, x0.dtype)
    shrink = jnp.asarray(0.5, x0.dtype)

    def cond(carry):
        i, eps, dh, direction = carry
        crossed = jnp.where(direction > 0, dh <= log_target, dh >= log_target)
        return (i == 0) | ((~crossed) & (i < max_iterations) & (eps > 1e-8) & (eps < 1e7))

    def body(carry):
        i, eps, _, direction = carry
        eps = jnp.where(i == 0, eps, eps * jnp.where(direction > 0, grow, shrink))
        dh = delta_h(i, eps)
        direction = jnp.where(i == 0, jnp.where(dh > log_target, 1.0, -1.0), direction)
        return i + 1, eps, dh, direction.astype(x0.dtype)

    zero = jnp.zeros((), x0.dtype)
    i, eps, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), eps0, zero, zero))
    return eps, i
