"""Run configuration: YAML + ``--set`` overrides, validated against typed
dataclasses, every mistake a ConfigError naming the key and valid choices."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from algorithms.ppo import PPOConfig
from msrl import ConfigError
from msrl.app import RunConfig, algorithm_names, config_fields, get_algorithm, load_config
from msrl.core import apply_overrides, read_yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_YAML = os.path.join(REPO, "configs", "ppo_cartpole.yaml")
BASE = {"algorithm": "ppo", "policy": "local"}
RUN_KEYS = [f.name for f in dataclasses.fields(RunConfig)]
ALGO_KEYS = [f.name for f in dataclasses.fields(PPOConfig)]


def error_of(overrides, base=BASE) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides, base=base)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- the shipped config ------------------------------------------------------------------------------
def test_shipped_config_loads():
    raw = read_yaml(PPO_YAML)
    config = load_config(PPO_YAML)
    assert config.raw == raw
    assert config.run.name == "ppo_cartpole" and config.run.algorithm == "ppo" and config.run.policy == "local"
    for key, value in raw.items():
        if key != "algo":
            assert getattr(config.run, key) == value, key
    assert isinstance(config.algo, PPOConfig)
    for key, value in raw["algo"].items():
        assert getattr(config.algo, key) == value, key
        assert type(getattr(config.algo, key)) is type(PPOConfig.__dataclass_fields__[key].default), key


def test_overrides_apply_on_top_of_the_file():
    raw = read_yaml(PPO_YAML)
    config = load_config(PPO_YAML, ["algo.num_envs=8", "seed=7", "name=mine"])
    assert (config.algo.num_envs, config.run.seed, config.run.name) == (8, 7, "mine")
    assert config.algo.num_steps == raw["algo"]["num_steps"]  # untouched keys keep the file's value
    assert config.run.total_env_steps == raw["total_env_steps"]
    assert config.raw["algo"] == {**raw["algo"], "num_envs": 8}


# -- apply_overrides ------------------------------------------------------------------------------------
def test_apply_overrides_parses_yaml_scalars_and_nests():
    raw = {"a": 1, "algo": {"gamma": 0.9}}
    out = apply_overrides(
        raw, ["x.y.z=3", "flag=true", "items=[1, 2]", "none=null", "empty=", "algo.gamma=0.5", "s=hello"]
    )
    assert out == {
        "a": 1,
        "algo": {"gamma": 0.5},
        "x": {"y": {"z": 3}},
        "flag": True,
        "items": [1, 2],
        "none": None,
        "empty": "",
        "s": "hello",
    }
    assert raw == {"a": 1, "algo": {"gamma": 0.9}}  # the input is not modified
    assert apply_overrides({}, ["k=1", "k=2"]) == {"k": 2}  # the last one wins


def test_policy_override_on_a_string_policy():
    raw = apply_overrides({"policy": "local"}, ["policy.executor=cpu", "policy.cpus=2"])
    assert raw["policy"] == {"preset": "local", "executor": "cpu", "cpus": 2}
    config = load_config(None, ["policy.executor=cpu"], base=BASE)
    assert config.run.policy == {"preset": "local", "executor": "cpu"}
    assert config.policy.fragments[0].executor == "cpu" and config.policy.name == "local"
    assert "unknown parameter 'bogus' for policy 'local'" in error_of(["policy.bogus=1"])


def test_learning_rate_string_is_coerced_to_float():
    config = load_config(None, ["algo.learning_rate=1e-3"], base=BASE)
    assert config.raw["algo"]["learning_rate"] == "1e-3"  # YAML 1.1 reads it as a string...
    assert config.algo.learning_rate == 0.001 and type(config.algo.learning_rate) is float  # ...the config does not
    assert type(load_config(None, ["algo.learning_rate=1"], base=BASE).algo.learning_rate) is float
    assert "algo.learning_rate must be float, got 'fast'" in error_of(["algo.learning_rate=fast"])


def test_integral_float_is_accepted_for_int():
    config = load_config(None, ["algo.num_envs=4.0"], base=BASE)
    assert config.algo.num_envs == 4 and type(config.algo.num_envs) is int


@pytest.mark.parametrize("item", ["seed", "=3"])
def test_malformed_set(item):
    assert f"--set expects key=value, got {item!r}" in error_of([item])


def test_set_below_a_non_mapping():
    with pytest.raises(ConfigError, match=r"cannot set 'seed.x': seed is not a mapping"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


def test_base_is_not_modified():
    base = {"algorithm": "ppo", "policy": "local", "algo": {"num_envs": 4}}
    load_config(None, ["algo.num_envs=8", "policy.cpus=2"], base=base)
    assert base == {"algorithm": "ppo", "policy": "local", "algo": {"num_envs": 4}}


# -- validation errors ---------------------------------------------------------------------------------
def test_unknown_top_level_key_lists_valid_keys():
    message = error_of(["bogus=1"])
    assert "unknown config key 'bogus'" in message
    assert "valid choices: " + ", ".join(RUN_KEYS) in message


def test_unknown_algo_key_lists_valid_keys():
    message = error_of(["algo.bogus=1"])
    assert "unknown config key" in message and "bogus" in message
    assert "valid choices: " + ", ".join("algo." + k for k in ALGO_KEYS) in message


@pytest.mark.parametrize(
    "override, nearest",
    [("algo.learing_rate=1e-3", "algo.learning_rate"), ("total_env_step=10", "total_env_steps"), ("sed=3", "seed")],
)
def test_a_misspelt_key_is_answered_with_the_nearest_one(override: str, nearest: str) -> None:
    message = error_of([override])
    assert f"unknown config key {override.split('=')[0]!r}; did you mean {nearest!r}? valid choices: " in message


def test_a_key_near_no_valid_one_gets_the_choices_alone() -> None:
    assert "unknown config key 'algo.zzz'; valid choices: algo.env_id, " in error_of(["algo.zzz=1"])


@pytest.mark.parametrize(
    "overrides, name",
    [
        (["algo.env_id=Acrobot-v1"], "ppo_cartpole_Acrobot-v1"),
        (["algo.env_id=ALE/Pong-v5"], "ppo_cartpole_ALE_Pong-v5"),
        (["algo.env_id=pettingzoo:mpe2.simple_spread_v3"], "ppo_cartpole_pettingzoo_mpe2.simple_spread_v3"),
        (["algo.env_id=Acrobot-v1", "name=mine"], "mine"),
        (["algo.env_id=CartPole-v1"], "ppo_cartpole"),
        (["seed=3"], "ppo_cartpole"),
    ],
)
def test_a_run_on_another_environment_is_named_after_it(overrides: list[str], name: str) -> None:
    config = load_config(PPO_YAML, overrides)
    assert config.run.name == name and config.raw["name"] == name  # config.yaml says it too


def test_a_run_named_after_a_long_environment_id_keeps_within_the_name_limit() -> None:
    config = load_config(PPO_YAML, ["algo.env_id=" + "E" * 200])
    assert len(config.run.name) == 100 and config.run.name.startswith("ppo_cartpole_EEE")


@pytest.mark.parametrize("name", algorithm_names())
def test_algo_keys_read_from_the_source_are_the_config_fields(name: str) -> None:
    """The ``algo`` keys checked before an algorithm is imported are its Config's fields, in order."""
    assert config_fields(name) == [f.name for f in dataclasses.fields(get_algorithm(name).Config)]


def test_algo_keys_of_a_user_algorithm_are_left_to_its_config() -> None:
    assert config_fields("tests.some_module:SomeAlgorithm") is None


@pytest.mark.parametrize(
    "override, expected",
    [
        ("seed=abc", "seed must be int, got 'abc'"),
        ("total_env_steps=1.5", "total_env_steps must be int, got 1.5"),
        ("progress=3", "progress must be bool, got 3"),
        ("eval_episodes=true", "eval_episodes must be int, got True"),
        ("algo.num_envs=true", "algo.num_envs must be int, got True"),
        ("algo.anneal_lr=sometimes", "algo.anneal_lr must be bool, got 'sometimes'"),
        ("algo.env_id=3", "algo.env_id must be str, got 3"),
        ("algo=3", "algo must be dict, got 3"),
    ],
)
def test_wrong_type(override, expected):
    assert expected in error_of([override])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("total_env_steps=0", "total_env_steps must be in [1, 1e+15], got 0"),
        ("checkpoint_every=-1", "checkpoint_every must be >= 0, got -1"),
        ("name=a/b", "without '/' or a leading '.', got 'a/b'"),
        ("name=.hidden", "name must be a plain directory name"),
        ("algo.num_envs=0", "algo.num_envs must be >= 1, got 0"),
        ("algo.learning_rate=-1", "algo.learning_rate must be > 0"),
        ("algo.activation=gelu", "algo.activation must be one of: tanh, relu; got 'gelu'"),
        ("algo.compile=maybe", "algo.compile must be one of: auto, true, false; got 'maybe'"),
    ],
)
def test_out_of_range(override, expected):
    assert expected in error_of(override.split())


def test_unknown_algorithm():
    message = error_of(["algorithm=sacc"])
    choices = (
        "a2c, a3c, ac, apex_dqn, awac, cql, ddpg, dqn, gail, impala, ippo, iql, maddpg, mappo, pg, ppo, qmix, sac, "
        "td3, vdn"
    )
    assert f"unknown algorithm 'sacc'; valid choices: {choices}" in message
    assert "cannot load algorithm 'nosuchmodule:X'" in error_of(["algorithm=nosuchmodule:X"])
    assert "is not an msrl.Algorithm subclass" in error_of(["algorithm=algorithms.ppo:PPOConfig"])


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' not found"):
        load_config(path)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nseed: 1\nalgo: {num_envs: 4\n")
    with pytest.raises(ConfigError, match=r"config file '.*bad\.yaml' is not valid YAML at line \d+"):
        load_config(str(path))
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping of keys, got list"):
        load_config(str(listed))


def test_an_empty_mapping_means_defaults():
    """An empty file is refused (test_unreadable_or_empty_config_files_are_one_line); an explicit
    empty mapping, as from Python, is the defaults."""
    config = load_config(None, [], base={})
    assert config.run == RunConfig() and config.algo == PPOConfig()


def test_num_minibatches_must_divide_the_batch():
    message = error_of(["algo.num_envs=4", "algo.num_steps=4", "algo.num_minibatches=3"])
    assert "algo.num_minibatches (3) must divide num_envs*num_steps (16)" in message
    config = load_config(None, ["algo.num_envs=4", "algo.num_steps=4", "algo.num_minibatches=8"], base=BASE)
    assert config.algo.minibatch_size == 2


def test_bad_policy_is_a_config_error():
    assert "unknown policy 'ring'; valid choices: async_single_learner, gpu_only, local" in error_of(["policy=ring"])


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    """Aliases are how a few hundred bytes of YAML become gigabytes ("billion laughs")."""
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb.write_text("\n".join(lines) + "\nalgo: *a9\n")
    with pytest.raises(ConfigError, match=r"YAML aliases are not allowed in configs \(alias \*a0 at line 2\)"):
        read_yaml(str(bomb))
    with pytest.raises(ConfigError, match="YAML aliases are not allowed"):
        apply_overrides({}, ["algo=&x [1, *x]"])


def test_an_oversized_config_file_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match=r"is 2,000,008 bytes; a config is at most 1,048,576"):
        read_yaml(str(big))


@pytest.mark.parametrize(
    "override, message",
    [
        ("algo.learning_rate=.inf", "algo.learning_rate must be a finite number, got inf"),
        ("algo.learning_rate=-.inf", "algo.learning_rate must be a finite number"),
        ("algo.gamma=.nan", "algo.gamma must be a finite number, got nan"),
        ("algo.clip_coef=nan", "algo.clip_coef must be a finite number"),
        ("algo.gamma=1.5", "algo.gamma must be in [0, 1], got 1.5"),
        ("algo.gae_lambda=-0.1", "algo.gae_lambda must be in [0, 1], got -0.1"),
        ("seed=-5", "seed must be in [0, 4294967295], got -5"),
        ("seed=4294967296", "seed must be in [0, 4294967295]"),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_refused(override: str, message: str) -> None:
    """Values that would train to the end with every loss nan (lr=inf, gamma=nan) or crash in numpy
    (a negative seed) are one ConfigError naming the key and the valid range."""
    base = read_yaml(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "ppo_cartpole.yaml"))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override], base=base)


@pytest.mark.parametrize(
    "algorithm, field",
    [
        ("a2c", "gamma"),
        ("dqn", "gamma"),
        ("sac", "gamma"),
        ("impala", "gamma"),
        ("mappo", "gae_lambda"),
        ("ppo", "gae_lambda"),
    ],
)
def test_every_algorithm_checks_its_discount_and_lambda(algorithm: str, field: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"algo.{field} must be in [0, 1], got 2.0")):
        load_config(None, [f"algorithm={algorithm}", f"algo.{field}=2.0"], base={})


@pytest.mark.parametrize(
    "content, message",
    [
        (bytes(range(128, 256)), "is not UTF-8 text"),
        (b"", "is empty"),
        (b"# only a comment\n", "is empty"),
    ],
)
def test_unreadable_or_empty_config_files_are_one_line(content: bytes, message: str, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_config(str(path))


@pytest.mark.parametrize(
    "override, message",
    [
        ("name=" + "x" * 101, "at most 100 printable characters"),
        ("name=a\tb", "at most 100 printable characters"),
    ],
)
def test_names_the_file_system_cannot_take_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override], base={})


def test_a_runs_dir_that_is_a_file_is_refused(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        load_config(None, [f"runs_dir={tmp_path / 'file'}"], base={})


def test_python_tags_are_refused_and_run_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.yaml"
    path.write_text(f'name: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(ConfigError, match="python/object/apply:os.system"):
        read_yaml(str(path))
    assert not marker.exists()


@pytest.mark.parametrize(
    "override, words",
    [
        ("max_restarts=-1", "max_restarts must be in [0, 1000], got -1"),
        ("max_restarts=1001", "max_restarts must be in [0, 1000], got 1001"),
        ("liveness_timeout_s=0.5", "liveness_timeout_s must be in [1, 86400] seconds, got 0.5"),
        ("on_checkpoint_error=ignore", "on_checkpoint_error must be one of stop, continue, got 'ignore'"),
    ],
)
def test_fault_tolerance_settings_are_range_checked(override, words):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override], base={})
    assert str(caught.value) == words
