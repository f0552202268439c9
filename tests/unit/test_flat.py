"""The one rule for what may cross a cut edge (``fragments.FLAT_RULE``): leaves, tuples of
leaves, flat str -> leaf mappings; anything nested is refused with its path."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
import torch

from fragments import CutEdgeError, check_flat, flat_violation


class Step(NamedTuple):
    obs: torch.Tensor
    reward: np.ndarray


@pytest.mark.parametrize(
    "value",
    [
        torch.zeros(3),
        np.zeros((2, 2)),
        1.5,
        7,
        True,
        np.float32(0.5),
        (torch.zeros(2), np.ones(2), 3),
        Step(torch.zeros(2), np.ones(2)),
        {"net.weight": torch.zeros(2, 2), "net.bias": torch.zeros(2), "updates": 4},
        {},
        (),
    ],
)
def test_flat_values_pass(value):
    assert flat_violation(value) is None


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"net": {"weight": torch.zeros(1)}}, "['net'] (a nested dict)"),
        ((torch.zeros(1), (torch.zeros(1),)), "[1] (a nested tuple)"),
        ((torch.zeros(1), {"a": torch.zeros(1)}), "[1] (a nested dict)"),
        ({"x": [torch.zeros(1)]}, "['x'] (a nested list)"),
        ([torch.zeros(1)], " (a nested list)"),
        ({1: torch.zeros(1)}, "key 1 (a int, not a str)"),
        (None, " (a NoneType)"),
        ("text", " (a str)"),
        ({"note": "text"}, "['note'] (a str)"),
    ],
)
def test_nested_or_foreign_values_are_refused_with_their_path(value, path):
    assert flat_violation(value) == path


def test_check_flat_names_node_fragment_output_and_path():
    outputs = (torch.zeros(2), {"policy": {"weight": torch.zeros(1)}})
    check_flat(outputs, [0], "learner.get_weights", "learner")  # only the carried outputs are checked
    with pytest.raises(CutEdgeError) as caught:
        check_flat(outputs, [0, 1], "learner.get_weights", "learner")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "node learner.get_weights of fragment learner sends a value that is not flat at output 1['policy'] "
        "(a nested dict); what crosses a cut edge must be a tensor, an array or a number"
    )


def test_the_ray_transport_checks_a_nodes_first_value_before_sending_it():
    """The weights the coarse preset's learner broadcasts: nested, refused before anything leaves."""
    from pathlib import Path

    import yaml

    from cluster import Mailbox, RayTransport
    from fragments import build_program
    from msrl.app import load_config, plan

    config = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"
    fdg = plan(
        load_config(None, ["algo.num_envs=8", "policy=single_learner_coarse"], base=yaml.safe_load(config.read_text()))
    ).fdg
    program = build_program(fdg, "learner")
    assert "learner.get_weights" in program.sends
    delivered = []

    class Peer:
        class deliver:  # noqa: N801 - stands in for an actor method
            @staticmethod
            def remote(*message) -> None:
                delivered.append(message)

    peers = {name: [Peer()] * fragment.replicas for name, fragment in fdg.fragments.items()}
    transport = RayTransport(fdg, program, 0, Mailbox(), peers)
    with pytest.raises(CutEdgeError, match=r"node learner.get_weights of fragment learner .* output 0\['net'\]"):
        transport.send("learner.get_weights", ({"net": {"weight": torch.zeros(1)}},))
    assert delivered == []
    transport.send("learner.get_weights", ({"net.weight": torch.zeros(1)},))
    assert [message[:3] for message in delivered] == [("learner.get_weights", 0, 0)] * 2  # both rollout replicas
