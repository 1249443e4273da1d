"""A resume continues the run that wrote the store, with the model that started it.

The store's description (:meth:`sluice.io.store.ZarrSink.description`) records the
run's settings and its model's identity: the number and dtype of its parameters,
the recorded quantities, a fingerprint of its traced program and a hash of its data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.io.checkpoint import StoreError


def check_same_run(
    path: Path, stored: dict[str, Any], description: dict[str, Any], *, allow_model_change: bool
) -> None:
    """Raise :class:`StoreError` naming the first setting or model property that differs.

    The model must have the same program fingerprint (its traced log-density,
    transform and log-likelihood) and data hash (the bytes of the arrays it closes
    over), unless ``allow_model_change`` (see :func:`sluice.resume`); a store that
    records no fingerprint is refused without it.
    """
    what_shape = {
        "dim": "the model's number of parameters",
        "dtype": "the model's parameter dtype",
        "draws": "the names or shapes of the recorded quantities",
    }
    checks = [("config", key, f"the setting {key!r}") for key in sorted(stored["config"])]
    checks += [("model", key, what) for key, what in what_shape.items()]
    for section, key, what in checks:
        old = stored[section].get(key)
        new = json.loads(json.dumps(description[section].get(key)))
        if old != new:
            raise StoreError(
                f"cannot resume {path}: {what} differs from the run that wrote it "
                f"(stored {old!r}, now {new!r})"
            )
    if allow_model_change:
        return
    old_model, new_model = stored["model"], description["model"]
    override = (
        f"If the change is intended, resume with sluice.resume({str(path)!r}, model, "
        "allow_model_change=True) (CLI: sluice resume --allow-model-change): the store "
        "then holds draws of both models"
    )
    if "program" not in old_model or "data" not in old_model:
        raise StoreError(
            f"cannot resume {path}: the store records no fingerprint of its model, "
            f"so this model cannot be checked against it. {override}"
        )
    differs = [
        what
        for key, what in (
            ("program", "its program (the traced log-density, transform or log-likelihood)"),
            ("data", "its data (the values of the arrays it closes over)"),
            ("name", f"its name ({old_model.get('name')!r}, now {new_model.get('name')!r})"),
        )
        if old_model.get(key) != new_model.get(key)
    ]
    if not differs:
        return
    jax_then, jax_now = old_model.get("jax"), new_model.get("jax")
    cause = ""
    if old_model["program"] != new_model["program"] and jax_then and jax_then != jax_now:
        cause = (
            f" The store was written under JAX {jax_then} and this is JAX {jax_now}, "
            "which may trace the same model into another program."
        )
    raise StoreError(
        f"cannot resume {path}: the model differs from the one that started the "
        f"run: {' and '.join(differs)}.{cause} {override}"
    )
