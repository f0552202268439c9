"""Property-based tests of bad input (with hypothesis): whatever config mapping, ``--set``
override, YAML text, distribution policy or checkpoint bytes a user hands msrl, it is either accepted
or refused with an ``msrl.MsrlError`` whose message is one line -- never another exception (a
traceback for the CLI), a hang or a blow-up.  The CLI prints such an error as ``msrl: error: ...``
with exit code 2 (``tests/e2e/test_cli.py``), so these cover what it prints too."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from msrl import MsrlError
from msrl.app import load_checkpoint, load_config
from msrl.core import parse_yaml
from policies import load_policy, preset_names

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"
FAST = settings(deadline=2000, suppress_health_check=[HealthCheck.too_slow])
"""Examples per property and whether they are derandomised come from the hypothesis profile that
``tests/conftest.py`` loads: a fixed set by default and in CI, ``HYPOTHESIS_PROFILE=explore`` to search."""

RUN_KEYS = [
    "name",
    "algorithm",
    "seed",
    "total_env_steps",
    "policy",
    "checkpoint_every",
    "eval_episodes",
    "runs_dir",
    "progress",
    "max_restarts",
    "liveness_timeout_s",
    "on_checkpoint_error",
    "algo",
]
ALGO_KEYS = [
    "env_id",
    "num_envs",
    "num_steps",
    "learning_rate",
    "gamma",
    "gae_lambda",
    "update_epochs",
    "num_minibatches",
    "clip_coef",
    "hidden_size",
    "ent_coef",
    "norm_adv",
    "compile",
]
POLICY_KEYS = [
    "preset",
    "actors",
    "envs",
    "learners",
    "cpus",
    "actor_cpus",
    "learner_cpus",
    "learner_gpus",
    "gpus",
    "executor",
    "learner_executor",
    "device",
    "placement",
    "fragments",
    "mode",
]

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.5, 1e308, -0.0, 2**32, 2**63, math.nan, math.inf, -math.inf]),
)
scalars = st.one_of(
    numbers,
    st.booleans(),
    st.none(),
    st.text(max_size=40),
    st.sampled_from(
        [
            "ppo",
            "dqn",
            "local",
            "PACK",
            "cpu",
            "cuda",
            "CartPole-v1",
            "nope:Nothing",
            "os.path:join",
            "../../etc",
            "a\x00b",
            "x" * 300,
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)


def one_line_error(action) -> None:
    """``action()`` succeeds or raises an MsrlError of one non-empty line."""
    try:
        action()
    except MsrlError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)


@st.composite
def configs(draw) -> dict:
    raw = draw(st.dictionaries(st.sampled_from(RUN_KEYS) | st.text(max_size=10), values, max_size=6))
    if draw(st.booleans()):
        raw["algo"] = draw(st.dictionaries(st.sampled_from(ALGO_KEYS) | st.text(max_size=10), values, max_size=5))
    if draw(st.booleans()):
        raw["policy"] = draw(policies())
    return raw


@st.composite
def policies(draw) -> dict:
    spec = draw(st.dictionaries(st.sampled_from(POLICY_KEYS), values, max_size=4))
    if draw(st.booleans()):
        spec["preset"] = draw(st.sampled_from(preset_names()))
    return spec


@FAST
@given(configs())
@example({"algo": {"gamma": math.nan}})
@example({"seed": math.inf, "total_env_steps": -1})
@example({"policy": {"preset": "multi_learner", "learners": 2**63}})
def test_any_config_mapping_is_accepted_or_one_line(raw: dict) -> None:
    one_line_error(lambda: load_config(None, [], base=raw))


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(RUN_KEYS + [f"algo.{k}" for k in ALGO_KEYS] + [f"policy.{k}" for k in POLICY_KEYS])
            | st.text(max_size=20),
            st.text(max_size=30),
        ).map(lambda kv: f"{kv[0]}={kv[1]}")
        | st.text(max_size=30),
        max_size=4,
    )
)
@example(["algo.learning_rate=nan"])
@example(["total_env_steps=inf", "seed=-1"])
def test_any_override_is_accepted_or_one_line(overrides: list[str]) -> None:
    one_line_error(lambda: load_config(str(CONFIG), overrides))


@FAST
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_yaml_text_is_a_value_or_one_line(text: str) -> None:
    one_line_error(lambda: parse_yaml(text))


@FAST
@given(policies() | values)
def test_any_policy_is_accepted_or_one_line(spec) -> None:
    one_line_error(lambda: load_policy(spec))


@settings(
    max_examples=max(60, settings().max_examples // 3),
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.binary(max_size=2000))
def test_any_bytes_as_a_checkpoint_are_refused_in_one_line(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("ck") / "checkpoint.pt"
    path.write_bytes(data)
    with pytest.raises(MsrlError) as caught:
        load_checkpoint(str(path))
    assert "\n" not in str(caught.value)


def test_the_generators_reach_both_outcomes() -> None:
    """The properties above would pass vacuously if every example were refused for the same reason:
    a valid override set is accepted, and non-finite numbers are among those generated."""
    assert load_config(str(CONFIG), ["seed=3", "algo.gamma=0.5"]).run.seed == 3
    found = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(numbers)
    def collect(number) -> None:
        if isinstance(number, float) and not math.isfinite(number):
            found.append(number)

    collect()
    assert found
