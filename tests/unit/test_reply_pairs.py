"""Call-and-reply pairs (``fragments.reply_pairs``): where a fragment sends a value and, in the same
block of its program, receives the receiver's answer; and which of them the Ray runtime carries as
one call (``cluster.call_routes``: exact values only, no more calls per callee than it has threads
for).  Pure graph analysis on the PPO graph's programs: no Ray."""

from __future__ import annotations

import dataclasses

import pytest
from test_fragment_programs import fdg_for

from cluster import REPLY_SLOTS, AsyncSchedule, call_routes
from fragments import LoopBlock, ReplyPair, build_program, program_pairs, reply_pairs


@pytest.fixture(scope="module")
def fine():
    return fdg_for("single_learner_fine", "policy.envs=2")


def test_the_fine_learner_calls_the_envs_with_actions_and_the_observations_are_the_answer(fine) -> None:
    assert reply_pairs(fine) == [ReplyPair("learner", "env", "actor.act", "env.step")]
    # env.observe comes once before the loop, unasked: it answers nothing.
    assert program_pairs(build_program(fine, "env")) == []


def test_the_coarse_rollouts_send_their_trajectories_and_get_the_new_weights_back() -> None:
    fdg = fdg_for("single_learner_coarse")
    assert reply_pairs(fdg) == [ReplyPair("rollout", "learner", "buffer.drain", "learner.get_weights")]


def test_a_receive_before_the_send_in_its_block_answers_nothing(fine) -> None:
    """The learner's loop turned round (receive, then act): the observation it receives answers the
    action of the previous step, not this one, so there is no pair."""
    program = build_program(fine, "learner")
    loop = next(step for step in program.steps if isinstance(step, LoopBlock))
    act, recv, insert = loop.body
    turned = dataclasses.replace(loop, body=[recv, act, insert])
    steps = [turned if step is loop else step for step in program.steps]
    assert program_pairs(dataclasses.replace(program, steps=steps)) == []


def test_two_sends_before_one_answer_pair_with_nothing(fine) -> None:
    """Which of two values sent to the env would the answer belong to?  Neither."""
    program = build_program(fine, "learner")
    loop = next(step for step in program.steps if isinstance(step, LoopBlock))
    act, recv, insert = loop.body
    sends = {**program.sends, "buffer.insert": program.sends["actor.act"]}  # insert "sent" to env too
    doubled = dataclasses.replace(loop, body=[act, insert, recv])
    steps = [doubled if step is loop else step for step in program.steps]
    assert program_pairs(dataclasses.replace(program, steps=steps, sends=sends)) == []


def test_a_send_in_the_loop_and_its_answer_outside_it_are_no_pair(fine) -> None:
    """Sent every step, answered once: calls and answers would not match one to one."""
    program = build_program(fine, "learner")
    loop = next(step for step in program.steps if isinstance(step, LoopBlock))
    act, recv, insert = loop.body
    steps = [dataclasses.replace(loop, body=[act, insert]) if step is loop else step for step in program.steps]
    assert program_pairs(dataclasses.replace(program, steps=[*steps, recv])) == []


def test_the_runtime_carries_the_exact_pairs_as_calls(fine) -> None:
    assert call_routes(fine, {}) == {"learner": {("actor.act", "env"): "env.step"}}
    coarse = fdg_for("single_learner_coarse", "policy.actors=2")
    assert call_routes(coarse, {}) == {"rollout": {("buffer.drain", "learner"): "learner.get_weights"}}


def test_a_stale_ok_answer_keeps_the_one_way_path() -> None:
    """async_single_learner: the rollouts take the weights one update late, so the k-th answer is
    not the one their k-th call waits for."""
    fdg = fdg_for("async_single_learner")
    assert reply_pairs(fdg) == [ReplyPair("rollout", "learner", "buffer.drain", "learner.get_weights")]
    assert call_routes(fdg, AsyncSchedule.stale_ok(fdg, "learner")) == {}
    assert call_routes(fdg, {"learner": {"buffer.drain"}}) == {}  # nor a stale-ok call


def test_a_callee_holds_no_more_waiting_calls_than_it_has_threads_for() -> None:
    """The coarse learner gathers from every rollout replica: each one's call waits on a thread of
    its reply group until the weights are out, and all of them must be in before it learns."""
    coarse = fdg_for("single_learner_coarse", f"policy.actors={REPLY_SLOTS}")
    assert call_routes(coarse, {}) != {}
    assert call_routes(coarse, {}, slots=REPLY_SLOTS - 1) == {}
    over = fdg_for("single_learner_coarse", f"policy.actors={2 * REPLY_SLOTS}", f"algo.num_envs={2 * REPLY_SLOTS}")
    assert call_routes(over, {}) == {}
    # Each env replica of the fine preset answers one learner: one thread each, however many envs.
    many = fdg_for("single_learner_fine", f"policy.envs={2 * REPLY_SLOTS}", f"algo.num_envs={2 * REPLY_SLOTS}")
    assert call_routes(many, {}, slots=1) == {"learner": {("actor.act", "env"): "env.step"}}
