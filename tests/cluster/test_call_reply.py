"""The transport's call-and-reply route between nodes (``cluster._callreply``), with stand-in peer
handles that record what is sent: the fine learner calls a remote env replica with its actions and
keeps the call's ref, while a same-node replica still gets them over its socket; the env hands its
answer to the waiting call, with the sequence number the learner's receive expects, and delivers
what no call waits for; the learner's receive takes the answer from the ref, and a call that brings
none (its callee closed or failed) leaves it waiting as for a message that never comes, until its
own worker closes.  The same training with and without calls, across nodes, is in
test_placement_cluster.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
import yaml

ray = pytest.importorskip("ray")
from cluster import Mailbox, MailboxClosed, RayTransport, ReplySlots, call_routes  # noqa: E402
from fragments import ReplicaId, build_program  # noqa: E402
from msrl.app import load_config, plan  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_cartpole.yaml"

HALF = 4  # envs per env replica (8 envs, 2 replicas)


class Peer:
    """Stands in for a fragment worker's actor handle: records every call, answers a call with
    ``answer(args)`` as its ref."""

    def __init__(self, answer=lambda args: None) -> None:
        self.delivered: list[tuple] = []
        self.called: list[tuple] = []
        self.answer = answer
        peer = self

        class Deliver:
            @staticmethod
            def remote(*args) -> None:
                peer.delivered.append(args)

        class Call:
            def options(self, **options):
                assert options == {"concurrency_group": "reply"}  # never the default group: no starving
                return self

            def remote(self, *args):
                peer.called.append(args)
                return peer.answer(args)

        self.deliver = Deliver()
        self.deliver_and_await = Call()


class Socket:
    def __init__(self) -> None:
        self.delivered: list[tuple] = []

    def deliver(self, *args) -> None:
        self.delivered.append(args)


@pytest.fixture(scope="module")
def fine():
    overrides = ["algo.num_envs=8", "algo.num_steps=4", "policy=single_learner_fine", "policy.envs=2"]
    return plan(load_config(None, overrides, base=yaml.safe_load(CONFIG.read_text()))).fdg


def learner(fine, envs: list[Peer], socket: Socket | None = None, mailbox: Mailbox | None = None) -> RayTransport:
    return RayTransport(
        fine,
        build_program(fine, "learner"),
        0,
        mailbox or Mailbox(),
        {"env": envs, "learner": [Peer()]},
        direct={ReplicaId("env", 0): socket} if socket else None,
        calls=call_routes(fine, {})["learner"],
    )


def step_value(first: float) -> tuple:
    return tuple(torch.full((HALF,), first + i) for i in range(4))


def test_actions_go_to_a_remote_env_as_a_call_and_to_a_same_node_one_over_its_socket(fine) -> None:
    socket, envs = Socket(), [Peer(), Peer()]
    transport = learner(fine, envs, socket)
    for _ in range(2):
        transport.send("actor.act", (torch.arange(2 * HALF),))
    assert [args[:3] for args in socket.delivered] == [("actor.act", 0, 0), ("actor.act", 0, 1)]
    assert [(args[:3], args[4:]) for args in envs[1].called] == [
        (("actor.act", 0, 0), ("env.step", "learner")),
        (("actor.act", 0, 1), ("env.step", "learner")),
    ]
    assert torch.equal(envs[1].called[0][3][0], torch.arange(HALF, 2 * HALF))  # replica 1's half
    assert envs[0].called == envs[1].delivered == []
    assert transport.counts == {"socket": 2, "call": 2}
    assert [len(refs) for refs in transport.awaiting.values()] == [2]  # one per call, for (env.step, replica 1)


def test_without_calls_the_actions_are_delivered_one_way(fine) -> None:
    envs = [Peer(), Peer()]
    transport = RayTransport(fine, build_program(fine, "learner"), 0, Mailbox(), {"env": envs})
    transport.send("actor.act", (torch.arange(2 * HALF),))
    assert [len(env.delivered) for env in envs] == [1, 1] and envs[1].called == []


def test_the_env_answers_the_waiting_call_with_its_sequence_number_and_delivers_the_rest(fine) -> None:
    replies, caller = ReplySlots(), Peer()
    env = RayTransport(fine, build_program(fine, "env"), 1, Mailbox(), {"learner": [caller]}, replies=replies)
    env.send("env.observe", (torch.zeros(HALF),))  # before any call: delivered
    slot = replies.open("env.step", "learner", 0)  # what deliver_and_await does before the mailbox gets the actions
    answered = threading.Thread(target=lambda: slot.append(replies.wait(slot)))  # type: ignore[arg-type]
    answered.start()
    env.send("env.step", step_value(1.0))
    answered.join(5)
    seq, payload = slot[0]
    assert seq == 0 and torch.equal(payload[3], torch.full((HALF,), 4.0))
    env.send("env.step", step_value(5.0))  # no call waits for this one: delivered, the next number
    assert [args[:3] for args in caller.delivered] == [("env.observe", 1, 0), ("env.step", 1, 1)]
    assert env.counts == {"deliver": 2, "reply": 1}


def test_a_slot_of_a_closing_worker_answers_none() -> None:
    replies = ReplySlots()
    slot = replies.open("env.step", "learner", 0)
    threading.Timer(0.1, replies.close).start()
    assert replies.wait(slot) is None
    assert not replies.answer("env.step", "learner", 1, 0, ())  # nothing waits for replica 1


def test_the_learner_receives_the_answer_from_the_call_and_the_socket_part_from_its_mailbox(fine, shared_ray) -> None:
    envs = [Peer(), Peer(lambda args: ray.put((args[2], step_value(10.0 * args[2]))))]
    mailbox = Mailbox()
    transport = learner(fine, envs, Socket(), mailbox)
    recv = next(r for r in transport.program.recvs() if r.name == "env.step")
    for seq in range(2):
        transport.send("actor.act", (torch.arange(2 * HALF),))
        mailbox.put("env.step", 0, seq, step_value(-1.0))  # replica 0's part, over the socket
        obs, *_ = transport.recv(recv)
        assert obs.tolist() == [-1.0] * HALF + [10.0 * seq] * HALF
    assert not any(transport.awaiting.values()) and mailbox.messages == {}


@pytest.mark.parametrize("answer", ["closed", "failed"])
def test_a_call_that_brings_no_answer_waits_until_the_worker_closes(fine, shared_ray, answer: str) -> None:
    @ray.remote(num_cpus=0)
    def fail() -> None:
        raise RuntimeError("the callee failed")

    none = ray.put(None) if answer == "closed" else fail.remote()
    ray.wait([none])  # the answer is in (or the failure) before the receive waits on it
    envs = [Peer(), Peer(lambda args: none)]
    mailbox = Mailbox()
    transport = learner(fine, envs, Socket(), mailbox)
    recv = next(r for r in transport.program.recvs() if r.name == "env.step")
    transport.send("actor.act", (torch.arange(2 * HALF),))
    mailbox.put("env.step", 0, 0, step_value(0.0))
    closer = threading.Timer(0.5, mailbox.close)
    closer.start()
    with pytest.raises(MailboxClosed):
        transport.recv(recv)
    assert closer.finished.is_set()  # it waited for the close, it did not fail on its own
