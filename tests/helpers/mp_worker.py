"""A worker of the multi-process tests, started by ``sluice.runtime.launch.launch``.

``python -m tests.helpers.mp_worker MODE OUT`` with MODE one of
``draws`` (sample to memory, save this process's draws and summary to OUT/p<i>.npz),
``until`` (sample to the store OUT/run.zarr until converged, save draws and the stop to
OUT/p<i>.npz), ``chees`` (ChEES across the chains of every process, save draws and tuned
parameters to OUT/p<i>.npz), ``store`` (sample to the store OUT; process 1 SIGKILLs itself after writing
its third chunk), ``resume`` (finish the store OUT).
"""

from __future__ import annotations

import os
import signal
import sys

import jax
import jax.numpy as jnp
import numpy as np

import sluice
from sluice.io.store import ZarrSink

SETTINGS = dict(chains=6, warmup=60, draws=48, chunk_size=12, seed=3, chain_method="sequential")
UNTIL = dict(SETTINGS, draws=240, until=sluice.converged(ess_bulk=400, r_hat=1.05))


def model() -> sluice.Model:
    scales = jnp.array([1.0, 2.0, 0.5])
    return sluice.Model(
        lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2),
        init={"x": jnp.zeros(3)},
        log_likelihood=lambda p: {"obs": -0.5 * p["x"] ** 2},
    )


class DiesAfterThirdWrite(ZarrSink):
    writes = 0

    def write(self, start, chunk):
        super().write(start, chunk)
        DiesAfterThirdWrite.writes += 1
        if jax.process_index() == 1 and DiesAfterThirdWrite.writes == 3:
            os.kill(os.getpid(), signal.SIGKILL)


def main(mode: str, out: str) -> None:
    if mode == "draws":
        run = sluice.sample(model(), progress=False, **SETTINGS)
        np.savez(
            os.path.join(out, f"p{jax.process_index()}.npz"),
            x=run.draws["x"],
            summary=run.summary(round_to="none").to_numpy(),
            num_gradients=run.info.num_gradients,
        )
    elif mode == "until":
        run = sluice.sample(
            model(), sink=ZarrSink(os.path.join(out, "run.zarr")), progress=False, **UNTIL
        )
        np.savez(
            os.path.join(out, f"p{jax.process_index()}.npz"),
            x=run.draws["x"][...],
            converged_at=run.info.converged_at,
        )
    elif mode == "chees":  # a warmup across the chains of both processes
        import blackjax

        kernel = sluice.kernels.from_blackjax(blackjax.dynamic_hmc, warmup="chees")
        run = sluice.sample(
            model(), init=lambda key: {"x": jax.random.normal(key, (3,))}, kernel=kernel,
            chains=8, warmup=60, draws=20, chunk_size=20, seed=4, progress=False,
        )  # fmt: skip
        np.savez(
            os.path.join(out, f"p{jax.process_index()}.npz"),
            x=run.draws["x"],
            **{
                k: np.asarray(v)
                for k, v in run.info.params.items()
                if k != "integration_steps_params"
            },
            steps=np.asarray(run.info.params["integration_steps_params"][0]),
        )
    elif mode == "store":
        sluice.sample(model(), sink=DiesAfterThirdWrite(out), progress=False, **SETTINGS)
    elif mode == "resume":
        sluice.resume(out, model(), progress=False)
    print(f"WORKER_OK {jax.process_index()}", flush=True)


if __name__ == "__main__":
    sluice.distributed.initialize()  # before anything touches a device
    main(sys.argv[1], sys.argv[2])
