"""Call-and-reply pairs: where one fragment sends a value to another and, later in the same
block of its program, receives that fragment's answer.

Under ``single_learner_fine`` the learner sends ``actor.act`` to the env fragment and, in the
same loop iteration, receives ``env.step`` from it; the env receives ``actor.act`` and then runs
and sends ``env.step``.  A transport may carry such a pair as one call whose reply is the answer,
instead of two one-way messages.  This module only finds the pairs in the programs (pure graph
analysis); whether and how a transport uses them is its own business.

The k-th send of ``send`` and the k-th receive of ``reply`` belong together when both run once
per execution of the same block (the same loop region, or both outside loops), the send comes
first, and no other receive from the callee lies between them.  The callee then receives the
k-th ``send`` before it runs the k-th ``reply``, since every program follows the graph's global
order: the answer is always sent after the call has arrived.
"""

from __future__ import annotations

from dataclasses import dataclass

from fragments._fdg import FragmentedGraph
from fragments._program import FragmentProgram, LoopBlock, Recv, build_program
from msrl.core import Node


@dataclass(frozen=True)
class ReplyPair:
    """``caller`` sends ``send`` to ``callee`` and then, in the same block, receives ``reply`` from it."""

    caller: str
    callee: str
    send: str
    reply: str


def _blocks(program: FragmentProgram) -> list[list[Node | Recv]]:
    """The program's top-level steps (loops left out) and each loop's body, each run as one block."""
    top: list[Node | Recv] = [step for step in program.steps if not isinstance(step, LoopBlock)]
    return [top] + [step.body for step in program.steps if isinstance(step, LoopBlock)]


def program_pairs(program: FragmentProgram) -> list[ReplyPair]:
    """The call-and-reply pairs ``program`` is the caller of, in program order.

    Per callee, a receive from it pairs with the one send to it since the last receive from it
    (or the block's start); two sends to it there, or none, and that receive pairs with nothing.
    """
    pairs: list[ReplyPair] = []
    for block in _blocks(program):
        since: dict[str, list[str]] = {}  # callee -> the nodes sent to it since the last receive from it
        for step in block:
            if isinstance(step, Node):
                for callee in {i.dst for i in program.sends.get(step.name, []) if i.dst != program.fragment}:
                    since.setdefault(callee, []).append(step.name)
                continue
            callees = {i.src for i in step.interfaces}
            if len(callees) != 1:
                continue
            (callee,) = callees
            sent = since.pop(callee, [])
            if len(sent) == 1:
                pairs.append(ReplyPair(program.fragment, callee, sent[0], step.name))
    return pairs


def reply_pairs(fdg: FragmentedGraph) -> list[ReplyPair]:
    """Every call-and-reply pair of ``fdg``'s fragment programs, caller by caller in fragment order."""
    return [pair for name in fdg.fragments for pair in program_pairs(build_program(fdg, name))]
