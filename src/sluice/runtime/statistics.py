"""A run's streaming statistics on the host side: start, merge over chains, finalize.

These run outside the chunk, through the compile cache (:mod:`sluice._jax.compile`)
under keys made of the statistic's :attr:`~sluice.stats.Statistic.cache_key`;
:func:`lowered` traces them and :func:`fill` compiles them, in the session's background
threads (:meth:`~sluice.runtime.compiling.Compiler.precompile_statistics`). An
element-wise statistic (:class:`~sluice.stats.base.Blocks`) is merged and finalized
:data:`ELEMENT_BLOCK` elements at a time, one program serving every block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax import compile as programs
from sluice.model import FlatModel
from sluice.stats.base import Statistic

__all__ = [
    "ELEMENT_BLOCK",
    "compiled",
    "fill",
    "finalize",
    "has_diagnostics",
    "lowered",
    "merge_chains",
    "start_example",
    "start_program",
    "summarize",
]

# elements merged and finalized at once: for the default summary a chain's block is 25 MB
# (merge_chains holds ~log2(chains) + 2 of them) and the finalize's temporaries a few
# times that: a fraction of a 250,000-element model's states, which the run holds beside
ELEMENT_BLOCK = 16384
# Small merge and finalize programs compile for a quick compile (programs.FAST_COMPILE_OPTIONS):
# a run reads its summary once or a few times. One that reads it at every chunk (`until`,
# sluice.runtime.plan.Plan.repeated_readout) compiles them with XLA's classic emitters
# instead: on the CPU the default summary's finalize of 1,000 elements then runs in ~10 ms
# rather than ~55 ms, for ~0.7 s more compile (docs/architecture.md).
REPEATED_OPTIONS = programs.CLASSIC_EMITTER_OPTIONS


def start_program(
    flat: FlatModel, statistic: Statistic, slots: int, sharding: Any = None
) -> tuple[tuple, Callable]:
    """``(key, start)`` with ``start(consts, example)`` every slot's initial state: all
    slots start from the same example, the position of chain 0 (constrained here) or,
    for a statistic with a pilot, the pooled pilot draws (already constrained). With
    ``sharding`` the program writes each device's slots in place."""

    def start(consts: Any, example: Any) -> Any:
        if statistic.pilot:
            state = statistic.init(example)
        else:
            state = statistic.init(flat.draws_fn(consts, example))
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (slots, *x.shape)), state)

    key = ("statistics.start", flat.fingerprint, statistic.cache_key, slots)
    if sharding is None:
        return key, start
    devices = tuple(d.id for d in sharding.mesh.devices.flat)
    return (*key, devices), jax.jit(start, out_shardings=sharding)


def start_example(flat: FlatModel, statistic: Statistic, chains: int) -> Any:
    """The shapes of the example that :func:`start_program`'s ``start`` takes: one
    unconstrained position, or the ``chains`` chains' pooled pilot draws."""
    if not statistic.pilot:
        return jax.ShapeDtypeStruct((flat.dim,), flat.dtype)
    rows = chains * statistic.pilot
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct((rows, *s.shape), s.dtype), flat.draw_shapes()
    )


def _key(program: str, statistic: Statistic, repeated: bool = False) -> tuple:
    return (f"statistic.{program}", statistic.cache_key, *(("repeated",) if repeated else ()))


def _small(repeated: bool) -> dict[str, Any] | None:
    """The options of a small readout program (``programs.fill``'s ``small``): XLA's
    classic emitters for a reading that repeats (:data:`REPEATED_OPTIONS`), else the
    fast-compile ones."""
    return dict(REPEATED_OPTIONS) if repeated else None


def _for_speed(statistic: Statistic, one: Any, repeated: bool) -> bool:
    """Whether the readout programs of states shaped like ``one`` compile for speed:
    readings that repeat (``repeated``), and those of a block of elements, which run
    once per block. The choice is in their keys (:func:`_key`)."""
    return repeated or _blocked(statistic, one)


def _call(program: str, statistic: Statistic, fn: Callable, *args: Any,
          repeated: bool = False) -> Any:  # fmt: skip
    return programs.call(_key(program, statistic, repeated), fn, *args, small=_small(repeated))


def merge_chains(statistic: Statistic, states: Iterable[Any], repeated: bool = False) -> Any:
    """The chains' states merged by a pairwise tree of ``merge`` calls, taken from
    ``states`` as the tree needs them (an iterator: made as they come). Two partial
    results of one size are merged as soon as both exist, so at most one per level of
    the tree is held, ~log2(chains) states beside the inputs, where merging a whole
    level at once held half the chains' states again. ``repeated``: see
    :func:`summarize`."""
    stack: list[tuple[int, Any]] = []  # (how many chains, their merged state), sizes falling
    for state in states:
        size = 1
        while stack and stack[-1][0] == size:
            _, other = stack.pop()
            state = _call("merge", statistic, statistic.merge, other, state, repeated=repeated)
            del other
            size *= 2
        stack.append((size, state))
        del state
    if not stack:
        raise ValueError("merge_chains needs at least one chain's state")
    _, merged = stack.pop()
    while stack:  # the smaller trees, last first: (a + b) + c keeps the chains' order
        _, other = stack.pop()
        merged = _call("merge", statistic, statistic.merge, other, merged, repeated=repeated)
        del other
    return merged


def finalize(statistic: Statistic, state: Any, repeated: bool = False) -> Any:
    """``statistic.finalize(state)`` through the cache, as host arrays."""
    out = _call("finalize", statistic, statistic.finalize, state, repeated=repeated)
    return jax.device_get(out)


def _blocked(statistic: Statistic, state: Any) -> bool:
    blocks = statistic.blocks
    return blocks is not None and blocks.size(state) > ELEMENT_BLOCK


def has_diagnostics(statistic: Statistic) -> bool:
    """Whether ``statistic`` reads its convergence diagnostics alone
    (:attr:`~sluice.stats.base.Blocks.diagnostics`)."""
    return statistic.blocks is not None and statistic.blocks.diagnostics is not None


def summarize(statistic: Statistic, states: list[Any], repeated: bool = False,
              diagnostics: bool = False) -> Any:  # fmt: skip
    """``finalize`` of the chains' ``states`` merged (host arrays), a block of
    elements at a time where the statistic allows it and the states are large.

    ``repeated``: the run reads its statistics at every chunk (``until``), so their
    small merge and finalize programs compile for speed (:data:`REPEATED_OPTIONS`)
    rather than for a quick compile (programs of their own in the cache).
    ``diagnostics``: only the convergence diagnostics, where the statistic reads them
    alone (:func:`has_diagnostics`; else the whole ``finalize``)."""
    if not states:
        raise ValueError("summarize needs at least one chain's state")
    diagnostics = diagnostics and has_diagnostics(statistic)
    blocks = statistic.blocks
    if not _blocked(statistic, states[0]):
        merged = merge_chains(statistic, states, repeated)
        if not diagnostics:
            return finalize(statistic, merged, repeated)
        values = _call("diagnostics", statistic, blocks.diagnostics, merged, repeated=repeated)
        return jax.device_get(blocks.assemble(merged, values))
    d = blocks.size(states[0])
    repeated = _for_speed(statistic, states[0], repeated)
    name, fn = ("diagnostics-block", blocks.diagnostics) if diagnostics else (
        "finalize-block", blocks.finalize)  # fmt: skip
    parts: list[dict[str, Any]] = []
    for start in range(0, d, ELEMENT_BLOCK):
        stop = min(start + ELEMENT_BLOCK, d)
        block = (blocks.take(s, start, stop, ELEMENT_BLOCK) for s in states)  # as merged
        merged = merge_chains(statistic, block, repeated)
        values = _call(name, statistic, fn, merged, repeated=repeated)
        del merged
        parts.append(jax.tree.map(lambda v, n=stop - start: np.asarray(v)[:n], values))
    flat = jax.tree.map(lambda *vs: np.concatenate(vs), *parts)
    return jax.device_get(blocks.assemble(states[0], flat))


def _readout_programs(
    statistic: Statistic, one: Any, repeated: bool = False
) -> tuple[tuple, tuple, Any]:
    """``(merge_key, finalize_key, one)``: the keys of the merge and finalize programs
    that :func:`summarize` runs on states shaped like ``one``, and the shapes they take
    (a block of elements where the statistic is merged and finalized in blocks)."""
    repeated = _for_speed(statistic, one, repeated)
    merge_key = _key("merge", statistic, repeated)
    if _blocked(statistic, one):
        n = ELEMENT_BLOCK
        one = jax.eval_shape(lambda s: statistic.blocks.take(s, 0, n, n), one)
        return merge_key, _key("finalize-block", statistic, repeated), one
    return merge_key, _key("finalize", statistic, repeated), one


def compiled(statistic: Statistic, one: Any, repeated: bool = False) -> bool:
    """Whether :func:`summarize` of states shaped like ``one`` (arrays or
    ``jax.ShapeDtypeStruct``) would find its programs compiled (none compiles here)."""
    merge_key, finalize_key, one = _readout_programs(statistic, one, repeated)
    specs = jax.tree.map(programs.spec, one)
    return (
        programs.ready(merge_key, (specs, specs)) is not None
        and programs.ready(finalize_key, (specs,)) is not None
    )


def lowered(
    statistics: dict[str, Statistic],
    states: Any,
    start: tuple | None = None,
    repeated: bool = False,
    diagnostics: bool = False,
) -> list[programs.Pending]:
    """Trace and lower the statistics' ``merge`` and ``finalize`` for ``states``
    (``{name: state}`` with a leading slot axis), first, with ``start = (key, fn,
    args)``, the start program that makes them, for :func:`fill` to compile (with the
    same ``repeated``, see :func:`summarize`); with ``diagnostics``, also the
    diagnostics alone of those that read them (the readings of ``until``), before
    ``finalize``. Programs another caller claimed, or that fail to lower (the
    foreground call raises), are left out."""
    pendings: list[programs.Pending] = []

    def shapes(key: tuple, fn: Callable, args: tuple) -> Any:
        future, pending = programs.lower(key, fn, args)
        if pending is None:
            return future.result().out_info
        pendings.append(pending)
        return pending.out_info

    if start is not None:
        key, fn, args = start
        specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), args)
        try:
            states = shapes(key, fn, specs)
        except Exception:
            return pendings
    for name, statistic in statistics.items():
        with contextlib.suppress(Exception):  # one statistic's failure spares the others
            one = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), states[name])
            blocked = _blocked(statistic, one)  # then the programs of one block of elements
            speed = _for_speed(statistic, one, repeated)
            merge_key, finalize_key, one = _readout_programs(statistic, one, repeated)
            merged = shapes(merge_key, statistic.merge, (one, one))
            if diagnostics and has_diagnostics(statistic):
                name = "diagnostics-block" if blocked else "diagnostics"
                shapes(_key(name, statistic, speed), statistic.blocks.diagnostics, (merged,))
            finalize_fn = statistic.blocks.finalize if blocked else statistic.finalize
            shapes(finalize_key, finalize_fn, (merged,))
    return pendings


def fill(pendings: list[programs.Pending]) -> None:
    """Compile :func:`lowered`'s programs, where small with the fast options, or for speed
    where their key says so (:func:`_for_speed`), two at a time when both are small (else
    their memory would stack); a failure is left for the foreground call, which compiles
    again and raises."""

    def one(pending: programs.Pending) -> None:
        speed = pending.entry[0][-1] == "repeated"  # (_key)
        with contextlib.suppress(Exception):
            programs.fill(pending, fast_if_small=True, small=_small(speed))

    def small(pending: programs.Pending) -> bool:
        return programs.compile_options(pending.args, pending.out_info) is not None

    queue = list(pendings)
    while queue:
        pending, side = queue.pop(0), None
        if queue and small(pending) and small(queue[0]):
            side = threading.Thread(target=one, args=(queue.pop(0),), name="sluice-precompile-2")
            side.start()
        one(pending)
        if side is not None:
            side.join()
