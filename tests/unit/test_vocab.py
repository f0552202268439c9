"""The closed vocabularies (``Op``, ``InterfaceOp``, ``Role``, ``ValueKind``): a member is its string
wherever text is wanted, and an unknown spelling is an error where the value is made."""

from __future__ import annotations

import pickle

import pytest

from fragments import PER_STEP, Interface
from msrl import ConfigError
from msrl.core import DataflowGraph, InterfaceOp, Node, Op, Role, ValueKind, ValueRef
from policies import DistributionPolicy, FragmentSpec


def test_members_read_as_their_strings():
    assert Op.CALL_COMPONENT == "call_component" and f"{InterfaceOp.GATHER}" == "gather"
    assert str(Role.LEARNER) == "learner" and {"env": 1}[Role.ENV] == 1
    assert ValueKind.BATCHED == "batched" and f"{ValueKind.GLOBAL}" == "global"
    assert pickle.loads(pickle.dumps(Role.ACTOR)) is Role.ACTOR  # what crosses to a Ray worker


@pytest.mark.parametrize(
    ("vocabulary", "spelling", "message"),
    [
        (Op, "call_methd", "unknown node op 'call_methd'; valid choices: call_component, call_function, output"),
        (InterfaceOp, "all_reduce", "unknown interface op 'all_reduce'; valid choices: p2p, gather, scatter"),
        (Role, "learners", "unknown role 'learners'; valid choices: env, actor, buffer, learner, component"),
        (Role, 3, "unknown role 3"),
        (ValueKind, "batch", "unknown value kind 'batch'; valid choices: batched, global"),
    ],
)
def test_unknown_spelling_raises_naming_the_valid_ones(vocabulary, spelling, message):
    with pytest.raises(ValueError, match=message):
        vocabulary.parse(spelling)
    assert vocabulary.lookup(spelling) is None


def test_parse_returns_the_member():
    assert Op.parse("output") is Op.OUTPUT
    assert Role.parse(Role.ENV) is Role.ENV


def test_a_node_with_an_unknown_op_is_refused_where_it_is_made():
    with pytest.raises(ValueError, match="unknown node op 'call_comp'; valid choices: call_component"):
        Node("n1", "call_comp", ("env", "step"), (), {}, site="here")
    node = Node("n1", "call_component", ("env", "step"), (), {}, site="here")
    assert node.op is Op.CALL_COMPONENT and node.component == "env"


def test_a_node_with_an_unknown_value_kind_is_refused_where_it_is_made():
    with pytest.raises(ValueError, match="unknown value kind 'batch'; valid choices: batched, global"):
        Node("n1", Op.CALL_COMPONENT, ("env", "step"), (), {}, site="here", output_kinds=("batched", "batch"))
    node = Node("n1", Op.CALL_COMPONENT, ("env", "step"), (), {}, site="here", output_kinds=("batched", "global"))
    assert node.output_kinds == (ValueKind.BATCHED, ValueKind.GLOBAL)
    assert all(type(kind) is ValueKind for kind in node.output_kinds)


def test_an_interface_with_an_unknown_value_kind_is_refused_where_it_is_made():
    with pytest.raises(ValueError, match="unknown value kind 'globl'; valid choices: batched, global"):
        Interface(ValueRef("n1"), "a", "b", InterfaceOp.BROADCAST, PER_STEP, "globl")
    interface = Interface(ValueRef("n1"), "a", "b", "broadcast", PER_STEP, "global")
    assert interface.kind is ValueKind.GLOBAL and interface.op is InterfaceOp.BROADCAST


def test_a_graph_with_an_unknown_role_is_refused_where_it_is_made():
    output = Node("output", Op.OUTPUT, None, (ValueRef("n1"),), {}, site="here")
    call = Node("n1", Op.CALL_COMPONENT, ("env", "step"), (), {}, site="here", output_kinds=("batched",))
    with pytest.raises(ValueError, match="unknown role 'enviroment'"):
        DataflowGraph([call, output], {}, {"env": "enviroment"})
    assert DataflowGraph([call, output], {}, {"env": "env"}).components == {"env": Role.ENV}


def test_a_policy_names_roles_from_the_vocabulary():
    roles = {"env": Role.ENV, "pi": Role.ACTOR, "learner": Role.LEARNER}
    policy = DistributionPolicy("p", [FragmentSpec("a", ["env", "actor"]), FragmentSpec("b", ["*"])])
    assert policy.assign(roles) == {"env": "a", "pi": "a", "learner": "b"}  # 'actor' took the actor 'pi'
    typo = DistributionPolicy("p", [FragmentSpec("a", ["actors"]), FragmentSpec("b", ["*"])])
    with pytest.raises(ConfigError, match="unknown component 'actors'; valid choices: .*actor.*buffer.*component"):
        typo.assign(roles)
