"""Run settings (sluice.runtime.config.RunConfig): validation, kernels, the JSON a store records."""

import json

import numpy as np
import pytest

import sluice
from sluice.mcmc.kernels import HMC, NUTS
from sluice.runtime.config import RunConfig


@pytest.mark.parametrize(
    ("settings", "error", "named"),
    [
        ({"chains": 0}, ValueError, "chains"),
        ({"chains": -2}, ValueError, "chains"),
        ({"chains": True}, ValueError, "chains"),
        ({"draws": -1}, ValueError, "draws"),
        ({"draws": 0}, ValueError, "draws"),
        ({"warmup": 1.5}, ValueError, "warmup"),
        ({"warmup": -1}, ValueError, "warmup"),
        ({"seed": "a"}, TypeError, "seed"),
        ({"seed": 1.0}, TypeError, "seed"),
        ({"chain_method": "fast"}, ValueError, "chain_method"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"chunk_size": "big"}, ValueError, "chunk_size"),
        ({"num_chunks": 0}, ValueError, "num_chunks"),
        ({"chunk_size": 10, "num_chunks": 3}, ValueError, "num_chunks"),
        ({"default_stats": "yes"}, TypeError, "default_stats"),
        ({"default_stats": 1}, TypeError, "default_stats"),
        ({"kernel": "metropolis"}, ValueError, "kernel"),
    ],
)
def test_bad_settings_raise_naming_the_argument_and_the_value(settings, error, named):
    with pytest.raises(error) as info:
        RunConfig(**settings)
    message = str(info.value)
    assert named in message, message
    for value in settings.values():
        assert repr(value) in message, message


def test_good_settings_are_accepted_and_numpy_integers_become_ints():
    config = RunConfig(
        chains=np.int64(3), warmup=np.int32(0), draws=np.int64(7), seed=np.uint32(5),
        chunk_size="auto", statistics=["b", "a"],
    )  # fmt: skip
    for name, value in (("chains", 3), ("warmup", 0), ("draws", 7), ("seed", 5)):
        assert type(getattr(config, name)) is int and getattr(config, name) == value
    assert config.statistics == ("b", "a")
    assert RunConfig(num_chunks=4).num_chunks == 4
    assert RunConfig(seed=-3).seed == -3


def test_kernel_names_resolve_to_kernel_objects():
    assert RunConfig().kernel == NUTS()
    assert RunConfig(kernel="nuts").kernel == NUTS()
    assert RunConfig(kernel="hmc").kernel == HMC()
    assert isinstance(RunConfig(kernel="hmc").kernel, HMC)
    custom = sluice.nuts(max_tree_depth=5)
    assert RunConfig(kernel=custom).kernel is custom


def test_resolved():
    assert not RunConfig().resolved
    done = RunConfig(chunk_size=50, chain_method="sequential", default_stats=False)
    assert done.resolved
    assert not done.replace(chunk_size="auto").resolved
    assert not done.replace(chain_method="auto").resolved
    assert not done.replace(default_stats="auto").resolved


RESOLVED = [
    RunConfig(
        chains=3,
        warmup=20,
        draws=40,
        chunk_size=10,
        kernel=sluice.hmc(num_integration_steps=4),
        chain_method="vectorized",
        seed=11,
        default_stats=True,
        statistics=("sums", "moments"),
    ),
    RunConfig(
        chains=1,
        warmup=0,
        draws=1,
        chunk_size=1,
        kernel=sluice.nuts(max_tree_depth=3, target_accept=0.9, dense_mass=True),
        chain_method="sequential",
        default_stats=False,
    ),
    RunConfig(
        chains=2,
        warmup=10,
        draws=100,
        chunk_size=10,
        chain_method="sequential",
        default_stats=True,
        until=sluice.converged(ess_bulk=400, r_hat=1.01),
    ),
]


@pytest.mark.parametrize("config", RESOLVED)
def test_json_round_trip_of_a_resolved_config(config):
    stored = config.to_json()
    assert json.loads(json.dumps(stored)) == stored  # JSON as it is
    assert "num_chunks" not in stored
    back = RunConfig.from_json(json.loads(json.dumps(stored)))
    assert back.replace(statistics=tuple(sorted(back.statistics))) == config.replace(
        statistics=tuple(sorted(config.statistics))
    )
    assert back.kernel == config.kernel and type(back.kernel) is type(config.kernel)
    assert back.to_json() == stored


def test_to_json_by_hand():
    config = RESOLVED[0]
    assert config.to_json() == {
        "chains": 3, "warmup": 20, "draws": 40, "chunk_size": 10,
        "kernel": {"name": "hmc", "num_integration_steps": 4, "target_accept": 0.8,
                   "dense_mass": False, "divergence_threshold": 1000.0,
                   "initial_step_size": 1.0, "mass_matrix": "auto", "max_rank": 16,
                   "divergent_target_accept": 0.95},
        "chain_method": "vectorized", "seed": 11, "default_stats": True,
        "statistics": ["moments", "sums"], "until": None, "superchains": None,
    }  # fmt: skip


def test_stores_written_before_until_read_as_no_target():
    stored = {k: v for k, v in RESOLVED[0].to_json().items() if k != "until"}
    assert RunConfig.from_json(stored).until is None


def test_stores_written_before_superchains_read_as_none():
    stored = {k: v for k, v in RESOLVED[0].to_json().items() if k != "superchains"}
    assert RunConfig.from_json(stored).superchains is None


def test_stores_written_before_the_divergent_target_read_as_none():
    stored = RESOLVED[0].to_json()
    kernel = {k: v for k, v in stored["kernel"].items() if k != "divergent_target_accept"}
    assert RunConfig.from_json({**stored, "kernel": kernel}).kernel.divergent_target_accept is None
    assert RunConfig.from_json(stored).kernel.divergent_target_accept == 0.95
    off = RunConfig.from_json({**stored, "kernel": {**kernel, "divergent_target_accept": None}})
    assert off.kernel.divergent_target_accept is None


def test_unknown_json_keys_raise_naming_them():
    stored = RESOLVED[0].to_json()
    with pytest.raises(ValueError, match=r"\['thinning', 'zeta'\]"):
        RunConfig.from_json({**stored, "zeta": 1, "thinning": 2})


@pytest.mark.parametrize("config", RESOLVED)
def test_jsonable_is_what_to_json_stores(config):
    config = config.replace(statistics=tuple(sorted(config.statistics)))  # as the plan sets them
    stored = config.to_json()
    for name, value in stored.items():
        assert RunConfig.jsonable(name, getattr(config, name)) == value, name
    assert RunConfig.jsonable("kernel", "nuts") == sluice.nuts().to_config()
    assert RunConfig.jsonable("kernel", "hmc") == RunConfig(kernel="hmc").to_json()["kernel"]


def test_jsonable_statistics_in_any_order_match_the_stored_ones():
    stored = RunConfig(statistics=("sums", "moments")).to_json()
    assert RunConfig.jsonable("statistics", ("sums", "moments")) == stored["statistics"]
