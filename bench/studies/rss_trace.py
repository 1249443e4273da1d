"""Resident memory over one Zarr run, sampled every 50 ms, with the run's phases marked.

The run is ``bench/store.py``'s big model (a Gaussian of ``--dim`` elements,
4 chains, ``ZarrSink``, default statistics, chunks of ``--chunk-size``). The
report gives, for each interval between two events (compiles of the chunk
program and of the statistics' start/merge/finalize, the start of the
statistics, the end of the run), the largest and the last RSS seen in it,
then a timeline every 2 s. Events are marked by wrapping the compile cache
(``sluice._jax.compile``: ``lower`` and ``fill`` mark every program actually
compiled, from its lowering to the end of its XLA compile, in whichever thread
compiles it; ``compiled`` marks a statistics program that the caller waited
for, more than 50 ms, while another thread compiled it) and
``Session._start_statistics``.

Run: ``PYTHONPATH=src python bench/studies/rss_trace.py --draws 1000``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=50_000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--chunk-size", type=int, default=100)
    args = parser.parse_args()

    process = psutil.Process()
    trace: list[tuple[float, int]] = []
    marks: list[tuple[float, str]] = []

    def monitor() -> None:
        while True:
            trace.append((time.perf_counter(), process.memory_info().rss))
            time.sleep(0.05)

    threading.Thread(target=monitor, daemon=True).start()
    t_start = time.perf_counter()

    from store import gaussian

    import sluice
    from sluice._jax import compile as programs
    from sluice.runtime.session import Session

    def label(key) -> str:
        """``init`` / ``advance`` / ... for the chunk program, ``statistics merge`` / ... for
        the statistics' programs (``statistics.start``, ``statistic.merge``, ...)."""
        head = key[0] if isinstance(key, tuple) and key else key
        if head == "mcmc.chunk":
            return str(key[1])
        if isinstance(head, str) and head.startswith("statistic"):
            return f"statistics {head.rpartition('.')[2]}"
        return str(head)

    lowering: dict[int, float] = {}  # id(pending) -> when its lowering started
    compiling = threading.local()  # this thread compiled inside its current compiled() call

    def wrap_lower(lower):
        def wrapped(key, fn, a):
            t0 = time.perf_counter()
            future, pending = lower(key, fn, a)
            if pending is not None:  # this caller compiles it
                lowering[id(pending)] = t0
            return future, pending

        return wrapped

    def wrap_fill(fill):
        def wrapped(pending, **kw):
            t0 = lowering.pop(id(pending), time.perf_counter())
            result = fill(pending, **kw)
            t1 = time.perf_counter()
            name = label(pending.entry[0])
            marks.append((t0, f"compile {name} start"))
            marks.append((t1, f"compile {name} end ({t1 - t0:.1f} s)"))
            compiling.done = True
            return result

        return wrapped

    def wrap_compiled(compiled):
        def wrapped(key, fn, a, **kw):
            compiling.done = False
            t0 = time.perf_counter()
            result = compiled(key, fn, a, **kw)
            seconds = time.perf_counter() - t0
            name = label(key)
            if name.startswith("statistics") and seconds > 0.05 and not compiling.done:
                marks.append((t0, f"wait for {name} compile start"))
                marks.append((t0 + seconds, f"wait for {name} compile end ({seconds:.1f} s)"))
            return result

        return wrapped

    start_statistics = Session._start_statistics

    def started(self):
        marks.append((time.perf_counter(), "statistics start (sampling begins)"))
        return start_statistics(self)

    programs.lower = wrap_lower(programs.lower)
    programs.fill = wrap_fill(programs.fill)
    programs.compiled = wrap_compiled(programs.compiled)
    Session._start_statistics = started

    model = gaussian(args.dim)
    marks.append((time.perf_counter(), "sample() called"))
    with tempfile.TemporaryDirectory() as tmp:
        run = sluice.sample(
            model,
            chains=4,
            warmup=args.warmup,
            draws=args.draws,
            chunk_size=args.chunk_size,
            seed=2,
            sink=sluice.ZarrSink(os.path.join(tmp, "run.zarr")),
            progress=False,
        )
        marks.append((time.perf_counter(), "sample() returned"))
        time.sleep(0.1)
    info = run.info
    print(f"dim={args.dim} draws={args.draws} warmup={args.warmup} chunk={args.chunk_size}")
    print(f"compile {info.compile_seconds:.1f} s, warmup {info.warmup_seconds:.1f} s, "
          f"sampling {info.sampling_seconds:.1f} s")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"peak RSS (getrusage): {peak / 1e6:.0f} MB")
    events = sorted(marks)
    bounds = [t_start] + [t for t, _ in events] + [time.perf_counter()]
    labels = ["import"] + [label for _, label in events]
    for (a, b), label in zip(itertools.pairwise(bounds), labels, strict=True):
        seen = [r for t, r in trace if a <= t < b]
        if seen:
            print(f"after '{label}' ({b - a:.1f} s): max {max(seen) / 1e6:.0f} MB, "
                  f"last {seen[-1] / 1e6:.0f} MB")  # fmt: skip
    every = max(1, int(2 / 0.05))
    print(
        "timeline (s:MB):", " ".join(f"{t - t_start:.0f}:{r / 1e6:.0f}" for t, r in trace[::every])
    )


if __name__ == "__main__":
    main()
