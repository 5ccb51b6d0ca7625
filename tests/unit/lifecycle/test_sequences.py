"""Whole lifecycles: the single-id sequence of ref. §2.8, several ids, barriers, undo, late arrivals."""

from __future__ import annotations

import itertools

import pytest

from lifecycle.advancing import settle
from lifecycle.labels import (
    COMPLETING,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_PERMISSION,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    PREPARING_TO_DELETE,
    SERVICE_AVAILABLE,
    OperationId,
)
from lifecycle.operations import POD_DELETE_ADAPTER, allow_ops, begin, finish, is_during_ops
from lifecycle.states import OperationPhase, PodPhase, Stage, parse_state

from .lifecycle_builders import CONTROLLED, EXPECT_TRAFFIC, NOW, TRAFFIC_FINALIZER, op, perm
from .lifecycle_world import Operator, World, drain

SECOND = 1_000_000_000


def serving_world(**kwargs: object) -> World:
    """An idle pod in service: gate True, Ready, traffic finalizer on, service-available."""
    world = World(annotations=dict(EXPECT_TRAFFIC), **kwargs)  # type: ignore[arg-type]
    world.lifecycle()  # condition True
    world.run_traffic_controller()  # finalizer
    world.lifecycle()  # service-available
    assert world.phase is PodPhase.SERVICE_AVAILABLE
    assert world.finalizers == {TRAFFIC_FINALIZER}
    world.trail.clear()
    return world


def at(world: World, step: int) -> str:
    return str(NOW + step * SECOND)


def test_end_to_end_single_id() -> None:
    """Ref. §2.8, one write at a time, every intermediate label set asserted."""
    world = serving_world()
    sa = {SERVICE_AVAILABLE: world.labels[SERVICE_AVAILABLE]}
    collaset = Operator.of("collaset", "update", multi=True)
    c = collaset.adapter
    assert sa[SERVICE_AVAILABLE] == at(world, 2)

    # Begin
    world.tick()
    world.write(begin(c, world.labels, now_ns=world.now))
    t3 = at(world, 3)
    begun = {**CONTROLLED, **sa, f"{OPERATING}/collaset": t3, f"{OPERATION_TYPE}/collaset": "update"}
    assert world.labels == begun
    assert not allow_ops(c, world.labels, now_ns=world.now).allowed

    # webhook adds pre-check
    world.lifecycle()
    assert world.labels == {**begun, f"{PRE_CHECK}/collaset": at(world, 4)}
    assert world.service_ready is True

    # PreCheck rules pass: controller adds permission + pre-checked
    world.lifecycle(pre=True)
    t5 = at(world, 5)
    pre_checked = {**begun, f"{PRE_CHECKED}/collaset": t5, f"{OPERATION_PERMISSION}/update": t5}
    assert world.labels == {**pre_checked, f"{PRE_CHECK}/collaset": at(world, 4)}

    # webhook: -pre-check, -service-available, +preparing; controller: gate False
    world.lifecycle()
    t6 = at(world, 6)
    preparing = {k: v for k, v in pre_checked.items() if k != SERVICE_AVAILABLE}
    assert world.labels == {**preparing, f"{PREPARING}/collaset": t6}
    assert world.service_ready is False
    assert not world.ready

    # the traffic controller turns traffic off and drops its finalizer
    world.run_traffic_controller()
    assert world.finalizers == set()

    # webhook: preparing -> operate
    world.lifecycle()
    t7 = at(world, 7)
    operating = {**preparing, f"{OPERATE}/collaset": t7}
    assert world.labels == operating
    assert allow_ops(c, world.labels, now_ns=world.now).allowed

    # the operator works, then finishes (-operating, type stays)
    world.write(finish(c, world.labels))
    finished = {k: v for k, v in operating.items() if k != f"{OPERATING}/collaset"}
    assert world.labels == finished
    assert not is_during_ops(c, world.labels)

    # webhook: -pre-checked, operate -> operated, -permission, type -> done-type, +post-check
    world.lifecycle()
    t8 = at(world, 8)
    operated = {
        **CONTROLLED,
        f"{OPERATED}/collaset": t8,
        f"{DONE_OPERATION_TYPE}/collaset": "update",
        f"{POST_CHECK}/collaset": t8,
    }
    assert world.labels == operated
    assert parse_state(world.labels).operations["collaset"].phase is OperationPhase.POST_CHECK

    # PostCheck rules not yet passing: nothing moves
    world.lifecycle(post=False)
    assert world.labels == operated

    # PostCheck rules pass: +post-checked
    world.lifecycle(post=True)
    t10 = at(world, 10)
    assert world.labels == {**operated, f"{POST_CHECKED}/collaset": t10}

    # webhook: -post-check, +completing; controller: gate True
    world.lifecycle()
    t11 = at(world, 11)
    completing = {
        **CONTROLLED,
        f"{OPERATED}/collaset": t8,
        f"{DONE_OPERATION_TYPE}/collaset": "update",
        f"{POST_CHECKED}/collaset": t10,
        f"{COMPLETING}/collaset": t11,
    }
    assert world.labels == completing
    assert world.service_ready is True

    # cleanup waits for the expected (traffic) finalizer
    world.lifecycle()
    assert world.labels == completing

    # Ready again: traffic back on, finalizer added
    world.run_traffic_controller()
    assert world.finalizers == {TRAFFIC_FINALIZER}

    # webhook wipes the id's labels; controller adds service-available (pod is Ready)
    world.lifecycle()
    assert world.labels == {**CONTROLLED, SERVICE_AVAILABLE: at(world, 13)}
    assert world.phase is PodPhase.SERVICE_AVAILABLE

    # fixed point
    assert settle(world.facts(pre_check_passed=True, post_check_passed=True), now_ns=world.now).is_empty


def test_settle_carries_several_steps_in_one_write() -> None:
    world = serving_world()
    world.write(begin(Operator.of("a", "update").adapter, world.labels, now_ns=NOW))
    # the verdict is for the stage the pod is in: none yet, so only pre-check is added
    world.lifecycle(settled=True, pre=True)
    assert parse_state(world.labels).operations["a"].phase is OperationPhase.PRE_CHECK
    # in PreCheck with the rules passing: approved, preparing, service-available gone, in one write
    patch = settle(world.facts(pre_check_passed=True), now_ns=NOW)
    after = patch.labels.apply(world.labels)
    assert parse_state(after).operations["a"].phase is OperationPhase.PREPARING
    assert SERVICE_AVAILABLE not in after and f"{PRE_CHECK}/a" not in after
    assert f"{OPERATION_PERMISSION}/update" in after
    assert patch.service_ready is False
    # without applying the condition, settle never moves preparing -> operate
    assert f"{OPERATE}/a" not in after
    # with the condition written first, the same pass reaches operate once traffic is off
    world.finalizers.clear()
    patch = settle(world.facts(pre_check_passed=True), now_ns=NOW, apply_condition=True)
    assert parse_state(patch.labels.apply(world.labels)).operations["a"].phase is OperationPhase.OPERATING
    assert patch.service_ready is False


def test_settle_never_approves_a_stage_reached_while_settling() -> None:
    labels = {**CONTROLLED, **op("a", OPERATION_TYPE, PRE_CHECKED, OPERATE), **perm("update")}
    world = World(labels=labels, service_ready=False)
    patch = settle(world.facts(pre_check_passed=True, post_check_passed=True), now_ns=NOW)
    after = patch.labels.apply(labels)
    assert parse_state(after).operations["a"].phase is OperationPhase.POST_CHECK
    assert f"{POST_CHECKED}/a" not in after


def test_settle_iteration_bound() -> None:
    world = World(labels={**CONTROLLED, **op("a", OPERATING, OPERATION_TYPE)})
    patch = settle(world.facts(), now_ns=NOW, max_iterations=1)
    assert "settle stopped after 1 steps" in patch.reasons[-1]


# -- several ids ----------------------------------------------------------------------------------

FINISH_ORDERS = list(itertools.permutations(range(3)))


@pytest.mark.parametrize(
    "order", [pytest.param(o, id="finish-" + "".join(map(str, o))) for o in FINISH_ORDERS]
)
@pytest.mark.parametrize("settled", [pytest.param(False, id="advance"), pytest.param(True, id="settle")])
def test_three_ids_barrier_waits_for_last_finish(order: tuple[int, ...], settled: bool) -> None:
    world = serving_world()
    operators = [Operator.of("a", "update"), Operator.of("b", "scale-in"), Operator.of("c", "update")]
    for o in operators:
        o.wants = True
        o.progress(world)
    # move everyone to operate, without anybody finishing
    for _ in range(6):
        world.lifecycle(settled=settled)
        world.run_traffic_controller()
    state = parse_state(world.labels)
    assert {o.id: o.phase for o in state} == dict.fromkeys("abc", OperationPhase.OPERATING)
    assert world.labels[f"{OPERATION_PERMISSION}/update"] and world.labels[f"{OPERATION_PERMISSION}/scale-in"]
    for index in order[:-1]:
        operators[index].progress(world)  # allowed -> finish
        world.lifecycle(settled=settled)
        assert not any(op.has(OPERATED) for op in parse_state(world.labels)), "operated before the barrier"
    operators[order[-1]].progress(world)
    world.lifecycle(settled=settled)
    state = parse_state(world.labels)
    assert all(op.has(OPERATED) and op.has(POST_CHECK) for op in state)
    assert [op.done_type for op in state] == ["update", "scale-in", "update"]
    assert not state.permissions
    drain(world, operators, settled=settled)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}


@pytest.mark.parametrize("settled", [pytest.param(False, id="advance"), pytest.param(True, id="settle")])
@pytest.mark.parametrize(
    ("undone_type", "other_type", "permission_kept"),
    [
        pytest.param("update", "scale-in", False, id="other-type"),
        pytest.param("update", "update", True, id="same-type"),
    ],
)
def test_undo_one_id_while_another_continues(
    settled: bool, undone_type: str, other_type: str, permission_kept: bool
) -> None:
    world = serving_world()
    a, b = Operator.of("a", undone_type), Operator.of("b", other_type)
    for o in (a, b):
        o.wants = True
        o.progress(world)
    world.lifecycle(settled=settled)
    world.lifecycle(settled=settled)
    state = parse_state(world.labels)
    assert all(op.has(PRE_CHECKED) for op in state)
    a.cancel(world)
    world.lifecycle(settled=settled)
    state = parse_state(world.labels)
    assert list(state.operations) == ["b"]
    assert (f"{OPERATION_PERMISSION}/{undone_type}" in world.labels) is permission_kept
    drain(world, [a, b], settled=settled)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}


@pytest.mark.parametrize("settled", [pytest.param(False, id="advance"), pytest.param(True, id="settle")])
@pytest.mark.parametrize(
    "first_reaches",
    [
        pytest.param(None, id="first-finished-not-yet-operated"),
        pytest.param(OperationPhase.POST_CHECK, id="first-post-check"),
        pytest.param(OperationPhase.COMPLETING, id="first-completing"),
    ],
)
def test_late_id_does_not_deadlock(settled: bool, first_reaches: OperationPhase | None) -> None:
    """Operating deadlocks when an id begins after another one is operated; we do not."""
    world = serving_world()
    first, late = Operator.of("first", "update"), Operator.of("late", "restart")
    first.wants = True
    for _ in range(20):
        first.progress(world)
        if first_reaches is None and not first.wants:
            break
        world.lifecycle(settled=settled, post=first_reaches is not OperationPhase.POST_CHECK)
        world.run_traffic_controller()
        current = parse_state(world.labels).operations.get(OperationId("first"))
        if current is not None and current.phase is first_reaches:
            break
    else:
        pytest.fail(f"first never reached {first_reaches}: {world.labels}")
    late.wants = True
    late.progress(world)
    assert parse_state(world.labels).stage is not Stage.POST_CHECK
    drain(world, [first, late], settled=settled)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}
    assert world.service_ready is True


def test_allow_multi_type_false_waits_for_the_other_id() -> None:
    world = serving_world()
    a, b = Operator.of("a", "update"), Operator.of("b", "update", multi=False)
    a.wants = b.wants = True
    a.progress(world)
    b.progress(world)
    assert b.conflicts == 1 and "b" not in parse_state(world.labels).operations
    drain(world, [a, b], settled=True)
    assert b.conflicts >= 1 and not b.wants
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}


def test_same_id_another_type_is_refused_until_done() -> None:
    world = serving_world()
    update, scale_in = Operator.of("collaset", "update"), Operator.of("collaset", "scale-in")
    update.wants = scale_in.wants = True
    update.progress(world)
    scale_in.progress(world)
    assert scale_in.conflicts == 1
    assert world.labels[f"{OPERATION_TYPE}/collaset"] == "update"
    drain(world, [update, scale_in], settled=False)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}


def test_no_traffic_controller_no_condition_operates_at_once() -> None:
    world = World(has_gate=False, traffic_controller=False)
    world.lifecycle()
    assert SERVICE_AVAILABLE in world.labels
    a = Operator.of("a", "update")
    a.wants = True
    a.progress(world)
    world.lifecycle()
    world.lifecycle()
    patch = world.lifecycle()  # pre-checked -> operate directly (no condition to wait for)
    assert parse_state(world.labels).operations["a"].phase is OperationPhase.OPERATING, patch.reasons
    assert f"{PREPARING}/a" not in world.labels
    drain(world, [a], settled=False)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}


def test_pod_deletion_through_the_lifecycle() -> None:
    """PodDeletion: to-delete -> begin(pod-delete, delete) -> operate -> the controller may delete the pod."""
    world = serving_world()
    world.write(begin(POD_DELETE_ADAPTER, world.labels, now_ns=world.now))
    assert world.labels[PREPARING_TO_DELETE] == str(world.now)
    for _ in range(6):
        if allow_ops(POD_DELETE_ADAPTER, world.labels, now_ns=world.now).allowed:
            break
        world.lifecycle(settled=True)
        world.run_traffic_controller()
    assert allow_ops(POD_DELETE_ADAPTER, world.labels, now_ns=world.now).allowed
    assert world.service_ready is False and TRAFFIC_FINALIZER not in world.finalizers
    assert SERVICE_AVAILABLE not in world.labels
