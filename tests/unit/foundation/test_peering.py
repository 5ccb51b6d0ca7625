"""Peering of the operator's replicas: kopf's rule as we read it, priorities, the webhook gate."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollouts.operator import health, peering
from rollouts.operator.peering import GatedWebhookServer, Standby, StandbyReadiness, priority_at, works

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ME, PRIORITY = "rollouts-operator-a", -100


def peer(priority: int, *, seconds_ago: float = 1, lifetime: int | None = 30) -> dict[str, Any]:
    info: dict[str, Any] = {
        "priority": priority,
        "lastseen": (NOW - timedelta(seconds=seconds_ago)).isoformat(),
    }
    if lifetime is not None:
        info["lifetime"] = lifetime
    return info


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(None, False, id="no-peering-object"),
        pytest.param({}, True, id="alone"),
        pytest.param({ME: peer(PRIORITY)}, True, id="only-self"),
        pytest.param({ME: peer(PRIORITY), "b": peer(PRIORITY - 1)}, True, id="younger-peer"),
        pytest.param({ME: peer(PRIORITY), "b": peer(PRIORITY + 1)}, False, id="older-peer"),
        pytest.param({ME: peer(PRIORITY), "b": peer(PRIORITY)}, False, id="tie-pauses-both"),
        pytest.param({"b": peer(PRIORITY + 1, seconds_ago=31)}, True, id="older-peer-dead"),
        pytest.param({"b": peer(PRIORITY + 1, seconds_ago=29)}, False, id="older-peer-alive"),
        pytest.param(
            {"b": peer(PRIORITY + 1, seconds_ago=59, lifetime=None)}, False, id="default-lifetime-60"
        ),
        pytest.param(
            {"b": peer(PRIORITY + 1, seconds_ago=61, lifetime=None)}, True, id="default-lifetime-over"
        ),
        pytest.param({"b": {"priority": PRIORITY + 1}}, False, id="no-lastseen-is-alive"),
        pytest.param({"b": peer(PRIORITY + 1, lifetime=0)}, True, id="left-cleanly"),
        pytest.param({"b": None}, True, id="removed-entry"),
    ],
)
def test_works_follows_kopfs_rule(status: dict[str, Any] | None, expected: bool) -> None:
    assert works(status, identity=ME, priority=PRIORITY, now=NOW) is expected


@pytest.mark.parametrize(
    ("older", "younger"),
    [
        pytest.param((1_000_000_000, 999), (1_001_000_000, 0), id="a-millisecond-later"),
        pytest.param((1_000_000_000, 5), (1_000_000_000, 6), id="same-millisecond-tail-decides"),
    ],
)
def test_the_oldest_replica_has_the_highest_priority(
    older: tuple[int, int], younger: tuple[int, int]
) -> None:
    assert priority_at(*older) > priority_at(*younger)


def standby() -> Standby:
    return Standby(name="rollouts", namespace=None, identity=ME, priority=PRIORITY)


@pytest.mark.parametrize(
    ("steps", "serves"),
    [
        pytest.param([], False, id="at-start"),
        pytest.param(["alone"], False, id="working-but-no-event-yet"),
        pytest.param(["event"], False, id="event-while-standing-by"),
        pytest.param(["alone", "event"], True, id="working-and-event"),
        pytest.param(["event", "alone"], False, id="event-before-working"),
        pytest.param(["alone", "event", "older-peer"], False, id="paused-again"),
        pytest.param(["alone", "event", "older-peer", "alone"], False, id="resumed-waits-for-an-event"),
        pytest.param(["alone", "event", "older-peer", "alone", "event"], True, id="resumed-and-event"),
        pytest.param(["alone", "event", "unreadable"], False, id="object-gone"),
    ],
)
def test_gate_opens_once_working_and_a_peering_event_was_handled(steps: list[str], serves: bool) -> None:
    statuses: dict[str, dict[str, Any] | None] = {
        "alone": {ME: peer(PRIORITY)},
        "older-peer": {ME: peer(PRIORITY), "b": peer(PRIORITY + 1)},
        "unreadable": None,
    }
    s = standby()
    for step in steps:
        if step == "event":
            s.peering_event_handled()
        else:
            s.observe(statuses[step], now=NOW)
    assert s.serves_indexed_webhooks is serves


class FakeServer:
    """A kopf webhook server: hands out the function it is given."""

    def __init__(self) -> None:
        self.fn: Any = None

    def __call__(self, fn: Any) -> str:
        self.fn = fn
        return "iterator"


async def answered(request: dict[str, Any], *, webhook: str | None = None, **_: Any) -> dict[str, Any]:
    return {"answered-by": "kopf", "webhook": webhook}


REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1"}}


@pytest.mark.parametrize(
    ("webhook", "working", "by_kopf"),
    [
        pytest.param("podopslifecycle-mutate", False, False, id="indexed-standby"),
        pytest.param("podopslifecycle-mutate-status", False, False, id="indexed-status-standby"),
        pytest.param("podopslifecycle-mutate", True, True, id="indexed-working"),
        pytest.param("podopslifecycle-validate", False, True, id="pure-standby"),
        pytest.param("validate-collaset", False, True, id="crd-standby"),
        pytest.param("default-collaset", False, True, id="defaults-standby"),
    ],
)
async def test_standby_admits_unchanged_only_on_indexed_webhooks(
    webhook: str, working: bool, by_kopf: bool
) -> None:
    s = standby()
    if working:
        s.observe({}, now=NOW)
        s.peering_event_handled()
    inner = FakeServer()
    assert GatedWebhookServer(inner, s)(answered) == "iterator"
    answer = await inner.fn(REVIEW, webhook=webhook, headers={})
    if by_kopf:
        assert answer == {"answered-by": "kopf", "webhook": webhook}
    else:
        assert answer == {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "u-1", "allowed": True},
        }


def test_gated_webhooks_exist_and_are_the_pod_mutating_ones() -> None:
    from rollouts.operator.handlers import build_registry
    from rollouts.operator.running import OperatorConfig

    registry = build_registry(OperatorConfig())
    mutating_pods = {
        h.id
        for h in registry._webhooks.get_all_handlers()
        if h.reason.value == "mutating" and h.selector is not None and h.selector.any_name == "pods"
    }
    assert mutating_pods == peering.INDEXED_WEBHOOKS


async def test_a_standby_is_ready_without_listings_the_working_replica_is_not() -> None:
    started = asyncio.Event()
    started.set()
    working = health.Readiness(
        kopf_ready=started, resources=[health.Resource(group="", resource="pods")], webhook=None
    )
    s = standby()
    readiness = StandbyReadiness(working, s)
    assert await readiness.problems() == []
    s.observe({}, now=NOW)
    assert await readiness.problems() == await working.problems() != []
