"""The core without extras: ``pip install sluice`` (no [vi], [plot], [numpyro], ...).

Run by CI in a fresh environment made with ``pip install -e .``: sampling,
streaming statistics, summaries, InferenceData, a Zarr store interrupted and
resumed, and the errors that name a missing extra.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

EXTRAS = ("optax", "numpyro", "pymc", "blackjax")


def main() -> None:
    present = [m for m in EXTRAS if importlib.util.find_spec(m) is not None]
    assert not present, f"not a core-only environment: {present} are installed"

    import jax.numpy as jnp
    import numpy as np

    import sluice

    def log_joint(params):
        return -0.5 * jnp.sum((params["beta"] - 1.0) ** 2)

    settings = dict(chains=2, warmup=100, draws=60, chunk_size=20, progress=False)
    run = sluice.sample(log_joint, init={"beta": jnp.zeros(3)}, **settings)
    table = run.summary()
    assert list(table.index) == ["beta[0]", "beta[1]", "beta[2]"], table
    assert abs(float(table["mean"].mean()) - 1.0) < 0.5, table
    assert run.to_arviz().posterior["beta"].shape == (2, 60, 3)

    streamed = sluice.sample(log_joint, init={"beta": jnp.zeros(3)}, sink=None, **settings)
    assert np.all(np.isfinite(streamed.summary()["r_hat"]))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.zarr"

        class Stop(sluice.ZarrSink):
            def write(self, start, chunk):
                super().write(start, chunk)
                if start == 20:
                    raise KeyboardInterrupt

        try:
            sluice.sample(log_joint, init={"beta": jnp.zeros(3)}, sink=Stop(path), **settings)
        except KeyboardInterrupt:
            pass
        resumed = sluice.resume(path, sluice.Model(log_joint, {"beta": jnp.zeros(3)}),
                                progress=False)  # fmt: skip
        assert resumed.info.draws == 60
        assert sluice.open(path).posterior["beta"].shape == (2, 60, 3)

    try:
        sluice.vi.fit(log_joint, init={"beta": jnp.zeros(3)}, steps=10, progress=False)
    except ImportError as error:
        assert "sluice[vi]" in str(error), error
    else:
        raise AssertionError("vi.fit ran without optax")

    cli = Path(sys.executable).with_name("sluice")
    out = subprocess.run([str(cli), "demo", "vi", "--quiet"], capture_output=True, text=True)
    assert out.returncode == 2 and "sluice[vi]" in out.stderr, out.stderr
    print("core without extras: OK")


if __name__ == "__main__":
    main()
