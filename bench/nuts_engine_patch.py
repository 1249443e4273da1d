"""The engine change proposed by issue 8, applied in-process for benchmarks (not a library module).

Two edits the kernel work needs in code it does not own:

* ``chunk.py``: the adaptation receives the kernel state (position *and*
  gradient) instead of the position, so that the diagonal metric is the
  Fisher-divergence estimator (``sluice.adaptation``)::

      -        astate = adapt.init(position, self.kernel.initial_step_size)
      +        astate = adapt.init(kstate, self.kernel.initial_step_size)
      -                carry.adaptation, i, schedule, kstate.position, stats["acceptance_rate"]
      +                carry.adaptation, i, schedule, kstate, stats["acceptance_rate"]

* ``engine.py`` (``Plan.build``), ``chain_method="auto"``::

      -            chain_method = "sequential" if topology.devices[0].platform == "cpu" else "vectorized"
      +            chain_method = choose_chain_method(
      +                flat, kernel, topology.devices, topology.num_slots // len(topology.devices)
      +            )

  (with ``from sluice.kernels import choose_chain_method``).

:func:`apply` makes exactly these textual edits to the methods' source and
re-defines them in their modules, so a benchmark can measure the proposal
before the engine adopts it.
"""

from __future__ import annotations

import inspect
import textwrap

CHUNK_EDITS = [
    (
        "astate = adapt.init(position, self.kernel.initial_step_size)",
        "astate = adapt.init(kstate, self.kernel.initial_step_size)",
    ),
    (
        'carry.adaptation, i, schedule, kstate.position, stats["acceptance_rate"]',
        'carry.adaptation, i, schedule, kstate, stats["acceptance_rate"]',
    ),
]
ENGINE_EDITS = [
    (
        'chain_method = "sequential" if topology.devices[0].platform == "cpu" else "vectorized"',
        "chain_method = choose_chain_method(flat, kernel, topology.devices, "
        "topology.num_slots // len(topology.devices))",
    ),
]


def _redefine(owner, name, module, edits, extra_globals=None):
    function = inspect.unwrap(
        getattr(owner, name).__func__ if name == "build" else getattr(owner, name)
    )
    source = textwrap.dedent(inspect.getsource(function))
    for old, new in edits:
        if old not in source:
            raise RuntimeError(f"{owner.__name__}.{name} no longer contains {old!r}")
        source = source.replace(old, new)
    if name == "build":
        source = source.replace("@classmethod\n", "")
    namespace = dict(vars(module), **(extra_globals or {}))
    exec(compile(source, inspect.getsourcefile(function), "exec"), namespace)
    new = namespace[name]
    setattr(owner, name, classmethod(new) if name == "build" else new)


def apply() -> None:
    """Apply the proposed engine change to the imported sluice (idempotent)."""
    from sluice import chunk, engine
    from sluice.kernels import choose_chain_method

    if getattr(chunk.ChunkProgram, "_issue8_patch", False):
        return
    _redefine(chunk.ChunkProgram, "_init_one", chunk, CHUNK_EDITS[:1])
    _redefine(chunk.ChunkProgram, "_advance_one", chunk, CHUNK_EDITS[1:])
    _redefine(
        engine.Plan, "build", engine, ENGINE_EDITS, {"choose_chain_method": choose_chain_method}
    )
    chunk.ChunkProgram._issue8_patch = True
