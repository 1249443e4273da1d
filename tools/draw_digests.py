"""Print SHA-256 digests of the draws and statistics of fixed runs.

Run it at two commits to check that a change moves no number:

    python tools/draw_digests.py > before.txt     # at the old commit
    python tools/draw_digests.py > after.txt      # at the new one
    diff before.txt after.txt

It uses only the public API (``sluice.sample``, ``sluice.resume``,
``sluice.ZarrSink``, ``sluice.vi.fit``, the ``sluice launch`` command), so the
same script runs on either side of a re-layout. The runs: chunk invariance
(chunk = draws, draws/4, 7; sequential and vectorized chains), 6 chains on 1
and on 4 devices, 2 processes of 2 devices, a Zarr run stopped and resumed,
the default streaming statistics with ``sink=None``, and a VI fit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = dict(chains=6, warmup=60, draws=48, seed=3)


def _model():
    import jax.numpy as jnp

    import sluice

    scales = jnp.array([1.0, 2.0, 0.5])
    return sluice.Model(
        lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2) - 0.5 * p["s"] ** 2,
        init={"x": jnp.zeros(3), "s": jnp.zeros(())},
        transform=lambda p: {"x": p["x"], "sigma": jnp.exp(p["s"])},
        log_likelihood=lambda p: {"obs": -0.5 * p["x"] ** 2},
    )


def _digest(tree) -> str:
    import numpy as np

    h = hashlib.sha256()

    def walk(prefix, x):
        if isinstance(x, dict):
            for k in sorted(x):
                walk(f"{prefix}/{k}", x[k])
        elif isinstance(x, list | tuple):
            for i, v in enumerate(x):
                walk(f"{prefix}/{i}", v)
        else:
            a = np.ascontiguousarray(np.asarray(x))
            h.update(f"{prefix}:{a.dtype}{a.shape}".encode())
            h.update(a.tobytes())

    walk("", tree)
    return h.hexdigest()[:16]


def _groups(run) -> dict:
    return {"posterior": run.draws, "sample_stats": run.sample_stats, "ll": run.log_likelihood}


def single_process() -> None:
    import jax
    import numpy as np

    import sluice

    model = _model()
    for method in ("sequential", "vectorized"):
        for chunk in (48, 12, 7):
            run = sluice.sample(
                model,
                chunk_size=chunk,
                chain_method=method,
                devices=jax.devices()[:1],
                progress=False,
                **SETTINGS,
            )
            print(f"chunks {method:10s} chunk={chunk:2d} devices=1  {_digest(_groups(run))}")
        run = sluice.sample(model, chunk_size=12, chain_method=method, progress=False, **SETTINGS)
        n = run.info.num_devices
        print(f"devices {method:10s} chunk=12 devices={n}  {_digest(_groups(run))}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.zarr"

        class Stop(Exception):
            pass

        class StopAfterTwo(sluice.ZarrSink):
            writes = 0

            def write(self, start, chunk):
                super().write(start, chunk)
                StopAfterTwo.writes += 1
                if StopAfterTwo.writes == 2:
                    raise Stop

        try:
            sluice.sample(
                model,
                chunk_size=12,
                chain_method="sequential",
                devices=jax.devices()[:1],
                sink=StopAfterTwo(path),
                progress=False,
                **SETTINGS,
            )
        except Stop:
            pass
        sluice.resume(path, model, progress=False, devices=jax.devices()[:1])
        idata = sluice.open(path)
        stored = {
            "posterior": {k: np.asarray(v) for k, v in idata.posterior.data_vars.items()},
            "sample_stats": {k: np.asarray(v) for k, v in idata.sample_stats.data_vars.items()},
        }
        print(f"zarr resumed            chunk=12 devices=1  {_digest(stored)}")

    run = sluice.sample(
        model,
        chunk_size=12,
        chain_method="sequential",
        devices=jax.devices()[:1],
        sink=None,
        progress=False,
        **SETTINGS,
    )
    summary = run.stats["summary"]
    print(f"stats sink=None          chunk=12 devices=1  {_digest(summary)}")
    table = run.summary(round_to="none")
    print(f"stats summary table      chunk=12 devices=1  {_digest(table.to_numpy())}")

    fit = sluice.vi.fit(model, family="meanfield", particles=16, steps=60, seed=1, progress=False)
    params = [np.asarray(leaf) for leaf in jax.tree.leaves(fit.params)]
    print(f"vi meanfield             steps=60            {_digest([params, fit.elbo])}")


def worker(out: str) -> None:
    import jax
    import numpy as np

    import sluice

    sluice.runtime.distributed.initialize()
    run = sluice.sample(
        _model(), chunk_size=12, chain_method="sequential", progress=False, **SETTINGS
    )
    np.savez(
        os.path.join(out, f"p{jax.process_index()}.npz"),
        **{f"{g}/{k}": v for g, names in _groups(run).items() for k, v in names.items()},
    )


def multi_process() -> None:
    import numpy as np

    sluice_cmd = shutil.which("sluice") or str(Path(sys.executable).with_name("sluice"))
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [sluice_cmd, "launch", "-n", "2", "--devices-per-process", "2", "--",
             sys.executable, __file__, "--worker", tmp],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )  # fmt: skip
        if result.returncode != 0:
            print(result.stdout, result.stderr, file=sys.stderr)
            raise SystemExit("multi-process run failed")
        parts = [np.load(Path(tmp) / f"p{i}.npz") for i in range(2)]
        groups: dict = {}
        chains = SETTINGS["chains"]
        for key in parts[0].files:
            g, k = key.split("/")
            if parts[0][key].shape[0] == chains:  # every process holds every chain
                assert np.array_equal(parts[0][key], parts[1][key]), key
                groups.setdefault(g, {})[k] = parts[0][key]
            else:  # each process holds its own block
                groups.setdefault(g, {})[k] = np.concatenate([p[key] for p in parts])
        print(f"processes sequential     chunk=12 2x2        {_digest(groups)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == ["--single"]:
        single_process()
    else:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "4",
               "SLUICE_BACKGROUND_COMPILE": "0"}  # fmt: skip
        subprocess.run([sys.executable, __file__, "--single"], env=env, check=True)
        multi_process()
