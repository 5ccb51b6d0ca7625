"""Properties over generated states and random actor schedules (seeded, so failures replay).

* fixed point: from any label combination, :func:`advance` applied to its own output
  reaches an empty patch, and :func:`settle` lands on such a fixed point;
* liveness and safety: whatever operators, rules, readiness and finalizers do, every
  intermediate state validates, traffic is never on while an operation may operate,
  and once everybody behaves the pod returns to ServiceAvailable with no lifecycle
  labels.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from lifecycle.advancing import PodFacts, advance, settle
from lifecycle.labels import (
    AVAILABLE_CONDITIONS,
    DONE_OPERATION_TYPE,
    ID_PREFIXES,
    OPERATION_TYPE,
    SERVICE_AVAILABLE,
    STAY_OFFLINE,
    UNDO_OPERATION_TYPE,
    id_key,
    permission_key,
)
from lifecycle.states import PodPhase, parse_state

from .lifecycle_builders import CONTROLLED, EXPECT_TRAFFIC, NOW, OLD, TRAFFIC_FINALIZER
from .lifecycle_world import Operator, World, drain

TYPES = ("update", "scale-in", "restart")
_TYPED = (OPERATION_TYPE, DONE_OPERATION_TYPE, UNDO_OPERATION_TYPE)
SEED_GROUPS = 20
PER_GROUP = 30


def random_facts(rng: random.Random) -> PodFacts:
    labels = dict(CONTROLLED)
    for n in range(rng.randint(0, 3)):
        op_type = rng.choice(TYPES)
        density = rng.random()
        for prefix in ID_PREFIXES:
            if rng.random() < density * 0.6:
                labels[id_key(prefix, f"id-{n}")] = op_type if prefix in _TYPED else OLD
    for op_type in TYPES:
        if rng.random() < 0.2:
            labels[permission_key(op_type)] = OLD
    if rng.random() < 0.4:
        labels[SERVICE_AVAILABLE] = OLD
    if rng.random() < 0.1:
        labels[STAY_OFFLINE] = "true"
    return PodFacts(
        labels=labels,
        finalizers=frozenset(f for f in (TRAFFIC_FINALIZER, "example.io/other") if rng.random() < 0.4),
        annotations=rng.choice([{}, EXPECT_TRAFFIC, {AVAILABLE_CONDITIONS: "{oops"}]),
        has_readiness_gate=rng.random() < 0.8,
        service_ready=rng.choice([None, True, False]),
        ready=rng.random() < 0.6,
        creating=rng.random() < 0.1,
        pre_check_passed=rng.random() < 0.6,
        post_check_passed=rng.random() < 0.6,
    )


@pytest.mark.parametrize("group", [pytest.param(g, id=f"seeds-{g * PER_GROUP}") for g in range(SEED_GROUPS)])
def test_advance_reaches_a_fixed_point(group: int) -> None:
    for seed in range(group * PER_GROUP, (group + 1) * PER_GROUP):
        rng = random.Random(seed)
        start = random_facts(rng)
        for apply_condition in (True, False):
            pod = start
            for _ in range(12):
                patch = advance(pod, now_ns=NOW)
                done = patch.labels.is_empty and not patch.add_readiness_gate
                if done and (patch.service_ready is None or not apply_condition):
                    break
                pod = patch.apply_to(pod, apply_condition=apply_condition)
            else:
                pytest.fail(f"seed {seed}: no fixed point from {dict(start.labels)}")


@pytest.mark.parametrize("group", [pytest.param(g, id=f"seeds-{g * PER_GROUP}") for g in range(SEED_GROUPS)])
@pytest.mark.parametrize(
    "apply_condition", [pytest.param(False, id="condition-pending"), pytest.param(True, id="wrt")]
)
def test_settle_lands_on_a_fixed_point(group: int, apply_condition: bool) -> None:
    for seed in range(group * PER_GROUP, (group + 1) * PER_GROUP):
        start = random_facts(random.Random(seed))
        patch = settle(start, now_ns=NOW, apply_condition=apply_condition)
        assert not any("settle stopped" in r for r in patch.reasons), (seed, patch.reasons)
        settled = replace(
            patch.apply_to(start, apply_condition=apply_condition),
            pre_check_passed=False,
            post_check_passed=False,
        )
        again = advance(settled, now_ns=NOW)
        assert again.labels.is_empty, (seed, dict(start.labels), again)
        assert not again.add_readiness_gate
        if apply_condition:
            assert again.service_ready is None, seed


def _operators() -> list[Operator]:
    return [
        Operator.of("collaset", "update"),
        Operator.of("collaset", "scale-in"),  # same id, other type: must wait
        Operator.of("job-a", "restart"),
        Operator.of("job-b", "restart"),  # shares the restart permission
        Operator.of("pod-delete", "delete", multi=False),
    ]


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(80)])
def test_random_schedules_are_safe_and_return_to_service(seed: int) -> None:
    rng = random.Random(seed)
    traffic = rng.random() < 0.8
    world = World(
        annotations=dict(EXPECT_TRAFFIC) if traffic and rng.random() < 0.7 else {},
        has_gate=rng.random() < 0.9,
        traffic_controller=traffic,
    )
    operators = _operators()
    settled = rng.random() < 0.5
    for _ in range(150):
        roll = rng.random()
        operator = rng.choice(operators)
        if roll < 0.12:
            operator.wants = True
        elif roll < 0.35:
            operator.progress(world)
        elif roll < 0.40:
            operator.cancel(world)
        elif roll < 0.70:
            world.lifecycle(settled=rng.random() < 0.5, pre=rng.random() < 0.7, post=rng.random() < 0.7)
        elif roll < 0.85:
            world.run_traffic_controller()
        elif roll < 0.92:
            world.containers_ready = not world.containers_ready
            world.check()
        else:
            finalizer = TRAFFIC_FINALIZER if traffic and rng.random() < 0.5 else "example.io/other"
            world.finalizers ^= {finalizer}
            world.check()
    drain(world, operators, settled=settled)
    assert world.labels.keys() == {*CONTROLLED, SERVICE_AVAILABLE}, world.labels
    assert world.phase is PodPhase.SERVICE_AVAILABLE
    assert world.service_ready is (True if world.has_gate else None)
    assert not parse_state(world.labels).permissions
    assert not any(o.wants for o in operators)
