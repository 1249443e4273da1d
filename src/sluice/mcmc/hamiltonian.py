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

The sub-trajectory checks need, at leaf ``n`` of a subtree, the checks of
every binary sub-trajectory that ends at ``n``: there are as many as ``n``
has trailing one bits. Their first leaves are kept on a small stack of
checkpoints (one row per level, ``max_tree_depth + 1`` rows including a
scratch row, so no copy of the trajectory is ever made): leaf ``n`` (even)
pushes ``(p_n, q_n)`` at row ``popcount(n)``, with ``q_i = S_i - p_i / 2``
and ``S_i`` the running momentum sum, so that the trapezoidal integral over
leaves ``a..n`` is ``rho = q_n - q_a``; odd leaves check the rows
``popcount(n >> 1)`` down to ``popcount(n >> 1) - trailing_ones(n) + 1``.

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
class _Tree(NamedTuple):
    """The trajectory built so far (one chain, or a batch along leading axes)."""

    ends: jax.Array  # (2, 3, d): (x, p, g) at the left (0) and right (1) ends
    vec: jax.Array  # (3, d): the candidate's position and gradient, the momentum sum
    scal: jax.Array  # (4,): candidate log-density, candidate energy, log sum of weights,
    #                   sum over steps of min(1, exp(H0 - H))
    flags: jax.Array  # (4,) int32: doublings made, leapfrog steps (= gradients),
    #                    turning, diverging

    @property
    def prop_x(self) -> jax.Array:
        return self.vec[..., 0, :]

    @property
    def prop_g(self) -> jax.Array:
        return self.vec[..., 1, :]

    @property
    def psum(self) -> jax.Array:
        return self.vec[..., 2, :]

    @property
    def depth(self) -> jax.Array:
        return self.flags[..., 0]

    @property
    def n_steps(self) -> jax.Array:
        return self.flags[..., 1]

    @property
    def turning(self) -> jax.Array:
        return self.flags[..., 2] != 0

    @property
    def diverging(self) -> jax.Array:
        return self.flags[..., 3] != 0


class _Subtree(NamedTuple):
    """The subtree being integrated (one chain); the loop carry of the leaf loop.

    Few, packed arrays (here and in :class:`_Tree`): on CPU each loop-carried array
    costs operations per step (its own fusion; copies when entering a loop or when
    its old value is read after the new one is made). Packing took the kernel,
    scanned on its own, from 3.0 to 2.2 us per gradient on a 10-dim logistic
    regression (the same draws); inside the engine's chunk program, where XLA
    already avoided those copies, it changed nothing measurable.
    """

    vec: jax.Array  # (4, d): the last leaf's position, the momentum half a step past it,
    #                 the leaf's gradient (original coordinates), the momentum sum
    prop: jax.Array  # (2, 2, d): [0] the candidate's (x, g), [1] scratch
    scal: jax.Array  # (4,) as in _Tree, for the subtree
    ckpt: jax.Array  # (K + 1, 2, d): (p_a, q_a) of open sub-trajectories; row K scratch
    flags: jax.Array  # (3,) int32: leaves built, turning, diverging

    @property
    def x(self) -> jax.Array:
        return self.vec[0]

    @property
    def ph(self) -> jax.Array:
        return self.vec[1]

    @property
    def g(self) -> jax.Array:
        return self.vec[2]

    @property
    def psum(self) -> jax.Array:
        return self.vec[3]

    @property
    def n(self) -> jax.Array:
        return self.flags[0]

    @property
    def turning(self) -> jax.Array:
        return self.flags[1] != 0

    @property
    def diverging(self) -> jax.Array:
        return self.flags[2] != 0


class _Context(NamedTuple):
    """Per-chain constants of a transition (and of the subtree being built)."""

    words: Any  # two uint32: the transition's key
    factor: Any  # (d,), (d, d) or a metric.LowRankFactor
    h0: jax.Array  # () initial energy
    directions: jax.Array  # () uint32: bit j = direction of doubling j
    step_size: jax.Array  # ()
    depth: jax.Array  # () int32: depth of the subtree being built
    eps: jax.Array  # () signed step size of the subtree


def _nuts_parts(vg: Callable, max_depth: int, threshold: float, batched: bool, dim: int):
    """The per-chain pieces of a transition; the loops around them are in :func:`_nuts`."""
    small = dim <= _SMALL_DIM
    skip_by_branch = not (batched or small)  # skip writes with a branch instead of a scratch row
    rows = jnp.arange(max_depth + 1)

    def init(words, state, step_size, inverse_mass_matrix):
        x0, logp0, g0 = state
        factor = metric.factor(inverse_mass_matrix)
        p0 = random.normal(words, _MOMENTUM, dim).astype(x0.dtype)
        h0 = -logp0 + 0.5 * _dot(p0, p0)
        end = jnp.stack([x0, p0, g0])
        zero = jnp.zeros((), x0.dtype)
        tree = _Tree(
            ends=jnp.stack([end, end]),
            vec=jnp.stack([x0, g0, p0]),
            scal=jnp.stack([logp0, h0, zero, zero]),
            flags=jnp.zeros((4,), jnp.int32),
        )
        directions = random.bits(words, _DIRECTIONS, 0)[0]
        return tree, _Context(words, factor, h0, directions, step_size, jnp.int32(0), step_size)

    def tree_active(tree):
        return (tree.depth < max_depth) & ~tree.turning & ~tree.diverging

    def side(tree, ctx):
        return ((ctx.directions >> tree.depth.astype(jnp.uint32)) & 1).astype(jnp.int32)

    def start(tree, ctx, ckpt, active):
        right = side(tree, ctx)
        eps = jnp.where(right == 1, ctx.step_size, -ctx.step_size).astype(tree.psum.dtype)
        x, p, g = tree.ends[right]
        ph = p + 0.5 * eps * metric.grad_y(ctx.factor, g)
        sub = _Subtree(
            vec=jnp.stack([x, ph, g, jnp.zeros_like(x)]),
            prop=jnp.zeros((2, 2, dim), x.dtype),
            scal=jnp.array([0.0, 0.0, -jnp.inf, 0.0], x.dtype),
            ckpt=ckpt,
            flags=jnp.stack([jnp.int32(0), (~active).astype(jnp.int32), jnp.int32(0)]),
        )  # a finished chain builds no leaves: it starts turning
        return sub, ctx._replace(depth=tree.depth, eps=eps)

    def subtree_active(sub, ctx):
        return (sub.n < jnp.left_shift(1, ctx.depth)) & ~sub.turning & ~sub.diverging

    def leaf(sub, ctx, active):
        """One leapfrog step, its weight, the candidate, and the sub-trajectory checks."""
        half = 0.5 * ctx.eps
        x = jnp.where(active, sub.x + ctx.eps * metric.to_x(ctx.factor, sub.ph), sub.x)
        logp, g = vg(x)
        gy = metric.grad_y(ctx.factor, g)
        p = sub.ph + half * gy
        ph = jnp.where(active, p + half * gy, sub.ph)
        energy = -logp + 0.5 * _dot(p, p)
        delta = energy - ctx.h0
        delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)
        log_w = jnp.logaddexp(sub.scal[2], -delta)
        n = sub.n
        u = random.uniform(ctx.words, _LEAF, jnp.left_shift(1, ctx.depth) + n)
        take = active & (jnp.log(u) < -delta - log_w)
        if skip_by_branch:  # write the candidate only when it changes
            prop = jax.lax.cond(
                take,
                lambda a: jax.lax.dynamic_update_index_in_dim(a, jnp.stack([x, g]), 0, 0),
                lambda a: a,
                sub.prop,
            )
        else:
            slot = jnp.where(take, 0, 1)
            prop = jax.lax.dynamic_update_index_in_dim(sub.prop, jnp.stack([x, g]), slot, 0)
        scal = jnp.stack(
            [
                jnp.where(take, logp, sub.scal[0]),
                jnp.where(take, energy, sub.scal[1]),
                jnp.where(active, log_w, sub.scal[2]),
                sub.scal[3] + jnp.where(active, jnp.minimum(1.0, jnp.exp(-delta)), 0.0),
            ]
        )
        psum = sub.psum + jnp.where(active, p, 0.0)
        q = psum - 0.5 * p
        even = (n & 1) == 0
        if skip_by_branch:  # push a checkpoint at even leaves only
            ckpt = jax.lax.cond(
                even,
                lambda c: jax.lax.dynamic_update_index_in_dim(
                    c, jnp.stack([p, q]), jax.lax.population_count(n), 0
                ),
                lambda c: c,
                sub.ckpt,
            )
        else:
            slot = jnp.where(active & even, jax.lax.population_count(n), max_depth)
            # (an index helper, not dynamic_update_slice with literal zeros: under
            # jax_enable_x64, as PyMC sets it, those are int64 against an int32 slot)
            ckpt = jax.lax.dynamic_update_index_in_dim(sub.ckpt, jnp.stack([p, q]), slot, 0)
        hi = jax.lax.population_count(n >> 1)
        lo = hi - jax.lax.population_count((~n & (n + 1)) - 1) + 1
        if small:  # all rows at once, masked
            rho = q - ckpt[:, 1]
            turns = (_dot(ckpt[:, 0], rho) <= 0) | (_dot(p, rho) <= 0)
            turning = jnp.any(turns & (rows >= lo) & (rows <= hi))
        else:  # only the rows that close here, newest first, until one turns

            def more(c):
                k, turned = c
                return (k >= lo) & ~turned

            def check(c):
                k, _ = c
                p_a, q_a = jax.lax.dynamic_index_in_dim(ckpt, k, keepdims=False)
                rho = q - q_a
                return k - 1, (_dot(p_a, rho) <= 0) | (_dot(p, rho) <= 0)

            _, turning = jax.lax.while_loop(more, check, (hi, jnp.bool_(False)))
        flags = jnp.stack(
            [
                n + active.astype(jnp.int32),
                (sub.turning | (active & turning)).astype(jnp.int32),
                (sub.diverging | (active & (delta > threshold))).astype(jnp.int32),
            ]
        )
        return _Subtree(jnp.stack([x, ph, g, psum]), prop, scal, ckpt, flags)

    def merge(tree, sub, ctx, active):
        """Add an integrated subtree to the trajectory and test the whole trajectory."""
        right = side(tree, ctx)
        valid = active & ~sub.turning & ~sub.diverging
        u = random.uniform(ctx.words, _MERGE, tree.depth)
        take = valid & (jnp.log(u) < sub.scal[2] - tree.scal[2])
        p_end = sub.ph - 0.5 * ctx.eps * metric.grad_y(ctx.factor, sub.g)
        end = jnp.where(active, jnp.stack([sub.x, p_end, sub.g]), tree.ends[right])
        ends = tree.ends.at[right].set(end)
        psum = tree.psum + jnp.where(active, sub.psum, 0.0)
        p_left, p_right = ends[0, 1], ends[1, 1]
        rho = psum - 0.5 * (p_left + p_right)
        turning = (_dot(p_left, rho) <= 0) | (_dot(p_right, rho) <= 0)
        scal = jnp.stack(
            [
                jnp.where(take, sub.scal[0], tree.scal[0]),
                jnp.where(take, sub.scal[1], tree.scal[1]),
                jnp.where(active, jnp.logaddexp(tree.scal[2], sub.scal[2]), tree.scal[2]),
                tree.scal[3] + jnp.where(active, sub.scal[3], 0.0),
            ]
        )
        vec = jnp.stack(
            [
                jnp.where(take, sub.prop[0, 0], tree.prop_x),
                jnp.where(take, sub.prop[0, 1], tree.prop_g),
                psum,
            ]
        )
        flags = jnp.stack(
            [
                tree.depth + active.astype(jnp.int32),
                tree.n_steps + sub.n,
                (tree.turning | (active & (sub.turning | turning))).astype(jnp.int32),
                (tree.diverging | (active & sub.diverging)).astype(jnp.int32),
            ]
        )
        return _Tree(ends, vec, scal, flags)

    return init, tree_active, start, subtree_active, leaf, merge


def _nuts(vg, max_depth, threshold, batched, words, state, step_size, inverse_mass_matrix):
    """One transition of one chain (``batched=False``) or of a batch of chains (leading axis)."""
    dim = state[0].shape[-1]
    init, tree_active, start, subtree_active, leaf, merge = _nuts_parts(
        vg, max_depth, threshold, batched, dim
    )
    vm = jax.vmap if batched else (lambda f: f)
    anyone = jnp.any if batched else (lambda b: b)
    tree, ctx = vm(init)(words, state, step_size, inverse_mass_matrix)
    ckpt = jnp.zeros((*state[0].shape[:-1], max_depth + 1, 2, dim), state[0].dtype)

    def double(carry):
        tree, ckpt = carry
        active = vm(tree_active)(tree)
        sub, sub_ctx = vm(start)(tree, ctx, ckpt, active)

        def step(sub):
            if batched:
                return vm(leaf)(sub, sub_ctx, vm(subtree_active)(sub, sub_ctx))
            return leaf(sub, sub_ctx, jnp.bool_(True))  # the loop runs only while active

        sub = jax.lax.while_loop(lambda s: anyone(vm(subtree_active)(s, sub_ctx)), step, sub)
        return vm(merge)(tree, sub, sub_ctx, active), sub.ckpt

    tree, _ = jax.lax.while_loop(lambda c: anyone(vm(tree_active)(c[0])), double, (tree, ckpt))
    info = {
        "acceptance_rate": tree.scal[..., 3] / tree.n_steps,
        "tree_depth": tree.depth,
        "n_steps": tree.n_steps,
        "diverging": tree.diverging,
        "energy": tree.scal[..., 1],
    }
    return (tree.prop_x, tree.scal[..., 0], tree.prop_g), info


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
    settings = (max_tree_depth, float(divergence_threshold))

    def one(key, state, step_size, imm, consts):
        fn = functools.partial(vg, consts)
        return _nuts(fn, *settings, False, random.key_words(key), state, step_size, imm)

    def many(keys, state, step_size, imm, consts):
        fn = functools.partial(vg, consts)
        return _nuts(fn, *settings, True, jax.vmap(random.key_words)(keys), state, step_size, imm)

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
