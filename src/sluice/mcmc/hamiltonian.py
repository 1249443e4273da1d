"""Hamiltonian Monte Carlo transitions written for the chunk engine: NUTS and static HMC.

Each transition is a pure function of ``(rng_key, state, step_size,
inverse_mass_matrix)`` for ONE chain on a flat ``(dim,)`` position, the state
the triple ``(position, logdensity, logdensity_grad)``; under ``jax.vmap`` a
batched implementation takes over (:func:`sluice._jax.batching.batched_by`).
docs/architecture.md ("Kernels") describes the tree building, the whitened
integrator and the random numbers, and why each choice was made.

References: Hoffman & Gelman (2014), "The No-U-Turn Sampler", JMLR 15;
Betancourt (2017), arXiv:1701.02434 (multinomial sampling, generalized no-U-turn
criterion).
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

# Up to these dimensions a leapfrog step's sub-trajectory checks cost fewer
# operations than passes over memory: every checkpoint row is tested at once
# (masked) and a step's checkpoint goes to a scratch row instead of being skipped
# by a branch. Above them only the rows that close are tested, in a loop, and one
# chain skips its writes by a branch: a masked step reads and rewrites the whole
# (max_tree_depth + 1, 2, dim) stack. A vmap of chains crosses over sooner (its
# masked rows are a batch's). Measured: bench/studies/nuts_turn_checks.py.
_MASKED_MAX_DIM = 48  # one chain
_MASKED_MAX_DIM_BATCHED = 32  # a vmap of chains

# Counter streams of the transition's key (one Threefry block per draw).
_MOMENTUM, _DIRECTIONS, _LEAF, _MERGE, _ACCEPT, _TRIAL = range(6)  # _TRIAL + i: trial i


def _dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.sum(a * b, axis=-1)


# -- NUTS ------------------------------------------------------------------------
class _Tree(NamedTuple):
    """The trajectory built so far (one chain)."""

    ends: jax.Array  # (2, 3, d): (x, p, g) at the left (0) and right (1) ends
    x: jax.Array  # (d,) the candidate's position
    g: jax.Array  # (d,) the candidate's gradient
    psum: jax.Array  # (d,) the sum of the momenta over the trajectory
    logp: jax.Array  # () the candidate's log-density
    energy: jax.Array  # () the candidate's energy
    log_w: jax.Array  # () log of the sum of the weights exp(H0 - H)
    accept_sum: jax.Array  # () sum over steps of min(1, exp(H0 - H))
    depth: jax.Array  # () int32: doublings made
    n_steps: jax.Array  # () int32: leapfrog steps (= gradients)
    turning: jax.Array  # () bool
    diverging: jax.Array  # () bool

    def pack(self) -> tuple:
        """The loops' carry: few arrays (see :class:`_Subtree`)."""
        vec = _stack([self.x, self.g, self.psum], -2)
        scal = _stack([self.logp, self.energy, self.log_w, self.accept_sum], -1)
        flags = _stack([self.depth, self.n_steps, self.turning, self.diverging], -1)
        return self.ends, vec, scal, flags

    @classmethod
    def unpack(cls, carry: tuple) -> _Tree:
        ends, vec, scal, flags = carry
        depth, n_steps, turning, diverging = _split(flags, -1)
        return cls(
            ends, *_split(vec, -2), *_split(scal, -1), depth, n_steps, turning != 0, diverging != 0
        )


class _Subtree(NamedTuple):
    """The subtree being integrated (one chain).

    The loops carry it, and the tree, packed into few arrays (``pack``): on CPU
    each carried array costs operations per step (docs/architecture.md, "Kernels").
    """

    x: jax.Array  # (d,) the last leaf's position
    ph: jax.Array  # (d,) the momentum half a step past it
    g: jax.Array  # (d,) the leaf's gradient (original coordinates)
    psum: jax.Array  # (d,) the sum of the subtree's momenta
    prop: jax.Array  # (2, 2, d): [0] the candidate's (x, g), [1] scratch
    ckpt: jax.Array  # (K + 1, 2, d): (p_a, q_a) of open sub-trajectories; row K scratch
    logp: jax.Array  # () as in _Tree, for the subtree
    energy: jax.Array  # ()
    log_w: jax.Array  # ()
    accept_sum: jax.Array  # ()
    n: jax.Array  # () int32: leaves built
    turning: jax.Array  # () bool
    diverging: jax.Array  # () bool

    def pack(self) -> tuple:
        vec = _stack([self.x, self.ph, self.g, self.psum], -2)
        scal = _stack([self.logp, self.energy, self.log_w, self.accept_sum], -1)
        return vec, self.prop, scal, self.ckpt, _stack([self.n, self.turning, self.diverging], -1)

    @classmethod
    def unpack(cls, carry: tuple) -> _Subtree:
        vec, prop, scal, ckpt, flags = carry
        n, turning, diverging = _split(flags, -1)
        return cls(*_split(vec, -2), prop, ckpt, *_split(scal, -1), n, turning != 0, diverging != 0)


def _stack(fields: list, axis: int) -> jax.Array:
    return jnp.stack([f.astype(jnp.int32) if f.dtype == jnp.bool_ else f for f in fields], axis)


def _split(packed: jax.Array, axis: int) -> list:
    return [
        jax.lax.index_in_dim(packed, i, axis, keepdims=False) for i in range(packed.shape[axis])
    ]


class _Context(NamedTuple):
    """Per-chain constants of a transition (and of the subtree being built)."""

    words: Any  # two uint32: the transition's key
    factor: Any  # (d,), (d, d) or a metric.LowRankFactor
    h0: jax.Array  # () initial energy
    directions: jax.Array  # () uint32: bit j = direction of doubling j
    step_size: jax.Array  # ()
    depth: jax.Array  # () int32: depth of the subtree being built
    eps: jax.Array  # () signed step size of the subtree


class _Settings(NamedTuple):
    """A transition's static settings (Python values, fixed when it is traced)."""

    vg: Callable  # position -> (log-density, gradient)
    max_depth: int
    threshold: float  # divergence threshold on H - H0
    dim: int
    batched: bool  # a batch of chains along a leading axis (under vmap)
    masked: bool  # test every checkpoint row at once (_masked)

    @property
    def by_branch(self) -> bool:
        """Skip writes with a branch instead of writing to a scratch row."""
        return not (self.batched or self.masked)


def _init(s: _Settings, words, state, step_size, inverse_mass_matrix) -> tuple[_Tree, _Context]:
    """A trajectory of one state, with a fresh momentum."""
    x0, logp0, g0 = state
    factor = metric.factor(inverse_mass_matrix)
    p0 = random.normal(words, _MOMENTUM, s.dim).astype(x0.dtype)
    h0 = -logp0 + 0.5 * _dot(p0, p0)
    end = jnp.stack([x0, p0, g0])
    zero = jnp.zeros((), x0.dtype)
    no = jnp.bool_(False)
    tree = _Tree(
        jnp.stack([end, end]), x0, g0, p0, logp0, h0, zero, zero, *(jnp.int32(0),) * 2, no, no
    )
    directions = random.bits(words, _DIRECTIONS, 0)[0]
    return tree, _Context(words, factor, h0, directions, step_size, jnp.int32(0), step_size)


def _masked(dim: int, batched: bool) -> bool:
    """Whether a step tests every checkpoint row at once (see :data:`_MASKED_MAX_DIM`)."""
    return dim <= (_MASKED_MAX_DIM_BATCHED if batched else _MASKED_MAX_DIM)


def _tree_active(s: _Settings, tree: _Tree) -> jax.Array:
    return (tree.depth < s.max_depth) & ~tree.turning & ~tree.diverging


def _side(tree: _Tree, ctx: _Context) -> jax.Array:
    """The side of the next doubling: 1 right, 0 left."""
    return ((ctx.directions >> tree.depth.astype(jnp.uint32)) & 1).astype(jnp.int32)


def _start(s: _Settings, tree: _Tree, ctx: _Context, ckpt, active) -> tuple[_Subtree, _Context]:
    """An empty subtree at the end of the trajectory on the doubling's side."""
    right = _side(tree, ctx)
    eps = jnp.where(right == 1, ctx.step_size, -ctx.step_size).astype(tree.psum.dtype)
    x, p, g = tree.ends[right]
    ph = p + 0.5 * eps * metric.grad_y(ctx.factor, g)
    zero = jnp.zeros((), x.dtype)
    sub = _Subtree(
        x,
        ph,
        g,
        jnp.zeros_like(x),
        jnp.zeros((2, 2, s.dim), x.dtype),
        ckpt,
        zero,
        zero,
        jnp.asarray(-jnp.inf, x.dtype),
        zero,
        n=jnp.int32(0),
        turning=~active,
        diverging=jnp.bool_(False),
    )  # fmt: skip  (a finished chain builds no leaves: it starts turning)
    return sub, ctx._replace(depth=tree.depth, eps=eps)


def _subtree_active(sub: _Subtree, ctx: _Context) -> jax.Array:
    return (sub.n < jnp.left_shift(1, ctx.depth)) & ~sub.turning & ~sub.diverging


def _write_row(s: _Settings, rows, value, index, write, scratch):
    """``rows`` with ``value`` at ``index`` where ``write``, else unchanged.

    Either by a branch, or by writing to the ``scratch`` row instead: the
    branch costs fewer bytes, the scratch row fewer operations (and is the only
    way under ``vmap``, where a branch becomes both sides and a select).
    """
    if s.by_branch:
        put = lambda a: jax.lax.dynamic_update_index_in_dim(a, value, index, 0)  # noqa: E731
        return jax.lax.cond(write, put, lambda a: a, rows)
    # (an index helper, not dynamic_update_slice with literal zeros: under
    # jax_enable_x64, as PyMC sets it, those are int64 against an int32 slot)
    return jax.lax.dynamic_update_index_in_dim(rows, value, jnp.where(write, index, scratch), 0)


def _turns(s: _Settings, ckpt, p, q, n) -> jax.Array:
    """Whether a sub-trajectory ending at leaf ``n`` turns (docs/architecture.md, "Kernels")."""
    hi = jax.lax.population_count(n >> 1)
    lo = hi - jax.lax.population_count((~n & (n + 1)) - 1) + 1
    if s.masked:  # all rows at once
        rows = jnp.arange(s.max_depth + 1)
        rho = q - ckpt[:, 1]
        turns = (_dot(ckpt[:, 0], rho) <= 0) | (_dot(p, rho) <= 0)
        return jnp.any(turns & (rows >= lo) & (rows <= hi))

    def more(c):  # only the rows that close here, newest first, until one turns
        k, turned = c
        return (k >= lo) & ~turned

    def check(c):
        k, _ = c
        p_a, q_a = jax.lax.dynamic_index_in_dim(ckpt, k, keepdims=False)
        rho = q - q_a
        return k - 1, (_dot(p_a, rho) <= 0) | (_dot(p, rho) <= 0)

    return jax.lax.while_loop(more, check, (hi, jnp.bool_(False)))[1]


def _leaf(s: _Settings, sub: _Subtree, ctx: _Context, active) -> _Subtree:
    """One leapfrog step, its weight, the candidate, and the sub-trajectory checks."""
    half = 0.5 * ctx.eps
    x = jnp.where(active, sub.x + ctx.eps * metric.to_x(ctx.factor, sub.ph), sub.x)
    logp, g = s.vg(x)
    gy = metric.grad_y(ctx.factor, g)
    p = sub.ph + half * gy
    ph = jnp.where(active, p + half * gy, sub.ph)
    energy = -logp + 0.5 * _dot(p, p)
    delta = energy - ctx.h0
    delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)
    log_w = jnp.logaddexp(sub.log_w, -delta)
    u = random.uniform(ctx.words, _LEAF, jnp.left_shift(1, ctx.depth) + sub.n)
    take = active & (jnp.log(u) < -delta - log_w)  # progressive sampling
    psum = sub.psum + jnp.where(active, p, 0.0)
    q = psum - 0.5 * p
    push = active & ((sub.n & 1) == 0)  # even leaves push a checkpoint
    ckpt = _write_row(
        s, sub.ckpt, jnp.stack([p, q]), jax.lax.population_count(sub.n), push, s.max_depth
    )
    return _Subtree(
        x=x,
        ph=ph,
        g=g,
        psum=psum,
        prop=_write_row(s, sub.prop, jnp.stack([x, g]), 0, take, 1),
        ckpt=ckpt,
        logp=jnp.where(take, logp, sub.logp),
        energy=jnp.where(take, energy, sub.energy),
        log_w=jnp.where(active, log_w, sub.log_w),
        accept_sum=sub.accept_sum + jnp.where(active, jnp.minimum(1.0, jnp.exp(-delta)), 0.0),
        n=sub.n + active.astype(jnp.int32),
        turning=sub.turning | (active & _turns(s, ckpt, p, q, sub.n)),
        diverging=sub.diverging | (active & (delta > s.threshold)),
    )


def _merge(tree: _Tree, sub: _Subtree, ctx: _Context, active) -> _Tree:
    """Add an integrated subtree to the trajectory and test the whole trajectory."""
    right = _side(tree, ctx)
    valid = active & ~sub.turning & ~sub.diverging
    u = random.uniform(ctx.words, _MERGE, tree.depth)
    take = valid & (jnp.log(u) < sub.log_w - tree.log_w)  # biased progressive sampling
    p_end = sub.ph - 0.5 * ctx.eps * metric.grad_y(ctx.factor, sub.g)
    end = jnp.where(active, jnp.stack([sub.x, p_end, sub.g]), tree.ends[right])
    ends = tree.ends.at[right].set(end)
    psum = tree.psum + jnp.where(active, sub.psum, 0.0)
    p_left, p_right = ends[0, 1], ends[1, 1]
    rho = psum - 0.5 * (p_left + p_right)
    turning = (_dot(p_left, rho) <= 0) | (_dot(p_right, rho) <= 0)
    return _Tree(
        ends=ends,
        x=jnp.where(take, sub.prop[0, 0], tree.x),
        g=jnp.where(take, sub.prop[0, 1], tree.g),
        psum=psum,
        logp=jnp.where(take, sub.logp, tree.logp),
        energy=jnp.where(take, sub.energy, tree.energy),
        log_w=jnp.where(active, jnp.logaddexp(tree.log_w, sub.log_w), tree.log_w),
        accept_sum=tree.accept_sum + jnp.where(active, sub.accept_sum, 0.0),
        depth=tree.depth + active.astype(jnp.int32),
        n_steps=tree.n_steps + sub.n,
        turning=tree.turning | (active & (sub.turning | turning)),
        diverging=tree.diverging | (active & sub.diverging),
    )


def _nuts(s: _Settings, words, state, step_size, inverse_mass_matrix):
    """One transition of one chain, or of a batch of chains (``s.batched``: leading axis)."""
    vm = jax.vmap if s.batched else (lambda f: f)
    anyone = jnp.any if s.batched else (lambda b: b)
    tree, ctx = vm(functools.partial(_init, s))(words, state, step_size, inverse_mass_matrix)
    ckpt = jnp.zeros((*state[0].shape[:-1], s.max_depth + 1, 2, s.dim), state[0].dtype)

    def double(carry):
        tree, ckpt = _Tree.unpack(carry[0]), carry[1]
        active = vm(functools.partial(_tree_active, s))(tree)
        sub, sub_ctx = vm(functools.partial(_start, s))(tree, ctx, ckpt, active)

        def building(packed):
            return anyone(vm(_subtree_active)(_Subtree.unpack(packed), sub_ctx))

        def step(packed):
            sub = _Subtree.unpack(packed)
            if s.batched:
                still = vm(_subtree_active)(sub, sub_ctx)
                return vm(functools.partial(_leaf, s))(sub, sub_ctx, still).pack()
            return _leaf(s, sub, sub_ctx, jnp.bool_(True)).pack()  # the loop runs only while active

        sub = _Subtree.unpack(jax.lax.while_loop(building, step, sub.pack()))
        return vm(_merge)(tree, sub, sub_ctx, active).pack(), sub.ckpt

    def doubling(carry):
        return anyone(vm(functools.partial(_tree_active, s))(_Tree.unpack(carry[0])))

    packed, _ = jax.lax.while_loop(doubling, double, (tree.pack(), ckpt))
    tree = _Tree.unpack(packed)
    info = {
        "acceptance_rate": tree.accept_sum / tree.n_steps,
        "tree_depth": tree.depth,
        "n_steps": tree.n_steps,
        "diverging": tree.diverging,
        "energy": tree.energy,
    }
    return (tree.x, tree.logp, tree.g), info


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
    """One NUTS transition of one chain (docs/architecture.md, "Kernels", gives the algorithm).

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
    dim = state[0].shape[-1]

    def settings(consts, batched):
        vg_fn = functools.partial(vg, consts)
        threshold = float(divergence_threshold)
        return _Settings(vg_fn, max_tree_depth, threshold, dim, batched, _masked(dim, batched))

    def one(key, state, step_size, imm, consts):
        return _nuts(settings(consts, False), random.key_words(key), state, step_size, imm)

    def many(keys, state, step_size, imm, consts):
        words = jax.vmap(random.key_words)(keys)
        return _nuts(settings(consts, True), words, state, step_size, imm)

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
