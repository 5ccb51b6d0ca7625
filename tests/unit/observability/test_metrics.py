"""Metrics derived from watch events: lifecycle transitions and phase times, hook runs, rollouts, rules.

The families are process-wide, so every test reads the change of a sample it caused.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import REGISTRY, generate_latest

from lifecycle.history import HISTORY_ANNOTATION, History, OperationRecord, Outcome, format_history
from lifecycle.labels import (
    CONTROL,
    CONTROL_VALUE,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_TYPE,
    PRE_CHECK,
    PRE_CHECKED,
    SERVICE_AVAILABLE,
)
from lifecycle.rules.evaluating import StageVerdicts, Verdict
from lifecycle.rules.models import PodTransitionRule, Stage
from lifecycle.states import OperationPhase as P
from rollouts.apicalls import ApiCalls, CallKey
from rollouts.operator import metrics

T0 = 1_700_000_000_000  # ms


def stamp(seconds: float) -> str:
    return str((T0 + int(seconds * 1000)) * 1_000_000)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@contextmanager
def change(name: str, **labels: str) -> Iterator[Callable[[], float]]:
    """``with change(sample) as delta: ...; delta()`` is how much the sample grew in the block."""
    before = value(name, **labels)
    yield lambda: value(name, **labels) - before


def pod(labels: Mapping[str, str], history: History | None = None, uid: str = "u1") -> dict[str, Any]:
    annotations = {HISTORY_ANNOTATION: format_history(history)} if history is not None else {}
    return {
        "metadata": {
            "uid": uid,
            "labels": {CONTROL: CONTROL_VALUE, **labels},
            "annotations": annotations,
        }
    }


def begun(op_type: str) -> dict[str, str]:
    return {f"{OPERATING}/x": stamp(0), f"{OPERATION_TYPE}/x": op_type}


def test_the_initial_listing_is_a_baseline_then_new_phases_count() -> None:
    observer = metrics.LifecycleObserver()
    first = pod({**begun("t-baseline"), f"{PRE_CHECK}/x": stamp(1)})
    second = pod({**begun("t-baseline"), f"{PRE_CHECKED}/x": stamp(4), f"{OPERATE}/x": stamp(6)})
    transitions = "rollouts_lifecycle_transitions_total"
    with (
        change(transitions, phase="PreCheck", type="t-baseline") as pre_check,
        change(transitions, phase="Operating", type="t-baseline") as operating,
        change(transitions, phase="PreChecked", type="t-baseline") as pre_checked,
        change(
            "rollouts_lifecycle_phase_duration_seconds_sum", phase="PreCheck", type="t-baseline"
        ) as pre_time,
        change(
            "rollouts_lifecycle_phase_duration_seconds_count", phase="PreChecked", type="t-baseline"
        ) as timed,
    ):
        observer.observe(kind=None, pod=first)
        assert pre_check() == 0, "what the listing shows happened before this run"
        observer.observe(kind="MODIFIED", pod=second)
        observer.observe(kind="MODIFIED", pod=second)
    assert (pre_checked(), operating()) == (1, 1)
    assert pre_check() == 0
    # PreCheck (from 1 s, known from the listing) ended at 4 s; PreChecked lasted 4 -> 6 s.
    assert pre_time() == pytest.approx(3.0)
    assert timed() == 1


def test_an_operation_ending_counts_its_outcome_and_times_its_last_phase() -> None:
    observer = metrics.LifecycleObserver()
    live = pod({f"{DONE_OPERATION_TYPE}/x": "t-end", f"{OPERATED}/x": stamp(10), f"{OPERATING}/x": stamp(0)})
    record = OperationRecord(
        id="x",
        type="t-end",
        entered={P.BEGUN: T0, P.OPERATED: T0 + 10_000, P.COMPLETING: T0 + 12_000},
        outcome=Outcome.COMPLETED,
        ended_ms=T0 + 15_000,
    )
    finished = pod({SERVICE_AVAILABLE: "1"}, History(done=(record,)))
    with (
        change("rollouts_lifecycle_transitions_total", phase="Completed", type="t-end") as completed,
        change("rollouts_lifecycle_transitions_total", phase="Completing", type="t-end") as completing,
        change("rollouts_lifecycle_phase_duration_seconds_sum", phase="Completing", type="t-end") as last,
        change("rollouts_lifecycle_phase_duration_seconds_sum", phase="Operated", type="t-end") as operated,
    ):
        observer.observe(kind=None, pod=live)
        observer.observe(kind="MODIFIED", pod=finished)
        observer.observe(kind="MODIFIED", pod=finished)
    assert (completed(), completing()) == (1, 1)
    assert last() == pytest.approx(3.0)
    assert operated() == pytest.approx(2.0)


def test_finishing_without_history_is_the_same_run() -> None:
    observer = metrics.LifecycleObserver()
    operating = pod({**begun("t-finish"), f"{OPERATE}/x": stamp(2)})
    finished = pod({f"{OPERATION_TYPE}/x": "t-finish", f"{OPERATE}/x": stamp(2)})  # operating/x dropped
    with change("rollouts_lifecycle_transitions_total", phase="Operating", type="t-finish") as delta:
        observer.observe(kind="ADDED", pod=operating)
        observer.observe(kind="MODIFIED", pod=finished)
    assert delta() == 1


def test_pods_per_phase_follow_the_watch() -> None:
    observer = metrics.LifecycleObserver()
    observer.observe(kind=None, pod=pod({SERVICE_AVAILABLE: "1"}, uid="a"))
    observer.observe(kind=None, pod=pod(begun("update"), uid="b"))
    observer.observe(kind="ADDED", pod=pod({}, uid="c"))
    assert observer.phases() == {"ServiceAvailable": 1, "PreCheck": 1, "NotAvailable": 1}
    observer.observe(kind="DELETED", pod=pod({}, uid="c"))
    observer.observe(kind="MODIFIED", pod=pod({PRE_CHECK: "broken"}, uid="a"))  # malformed: kept as it was
    assert observer.phases() == {"ServiceAvailable": 1, "PreCheck": 1}


def hook_record(
    name: str, phase: str, *, revision: str = "r2", seconds: float | None = None
) -> dict[str, Any]:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    record: dict[str, Any] = {
        "name": name,
        "revision": revision,
        "phase": phase,
        "startTime": start.isoformat(),
    }
    if seconds is not None:
        record["finishTime"] = (start + timedelta(seconds=seconds)).isoformat()
    return record


def collaset(
    *,
    current: str,
    updated: str,
    hooks: list[dict[str, Any]] | None = None,
    failed: bool = False,
    uid: str = "c1",
) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True" if failed else "False"}]
    return {
        "metadata": {"uid": uid},
        "status": {
            "currentRevision": current,
            "updatedRevision": updated,
            "hooks": hooks or [],
            "conditions": conditions,
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_hook_runs_count_once_by_outcome_and_the_listing_is_a_baseline() -> None:
    observer = metrics.RolloutObserver()
    with (
        change("rollouts_hook_runs_total", outcome="Succeeded") as succeeded,
        change("rollouts_hook_runs_total", outcome="Failed") as failed,
        change("rollouts_hook_duration_seconds_sum", outcome="Succeeded") as seconds,
    ):
        observer.observe(
            kind=None,
            collaset=collaset(current="r1", updated="r2", hooks=[hook_record("old", "Succeeded", seconds=1)]),
        )
        running = [hook_record("old", "Succeeded", seconds=1), hook_record("smoke", "Running")]
        observer.observe(kind="MODIFIED", collaset=collaset(current="r1", updated="r2", hooks=running))
        done = [hook_record("old", "Succeeded", seconds=1), hook_record("smoke", "Succeeded", seconds=7)]
        observer.observe(kind="MODIFIED", collaset=collaset(current="r1", updated="r2", hooks=done))
        observer.observe(kind="MODIFIED", collaset=collaset(current="r2", updated="r2", hooks=done))
        bad = [*done, hook_record("end", "Failed", seconds=2)]
        observer.observe(kind="MODIFIED", collaset=collaset(current="r2", updated="r2", hooks=bad))
    assert (succeeded(), failed()) == (1, 1)
    assert seconds() == pytest.approx(7.0)


@pytest.mark.parametrize(
    ("statuses", "outcome", "seconds"),
    [
        pytest.param(
            [("r1", "r1", False), ("r1", "r2", False), ("r1", "r2", False), ("r2", "r2", False)],
            "Completed",
            20.0,
            id="completed",
        ),
        pytest.param(
            [("r1", "r1", False), ("r1", "r2", False), ("r1", "r2", True), ("r1", "r2", True)],
            "Failed",
            10.0,
            id="failed",
        ),
        pytest.param(
            [("r1", "r1", False), ("r1", "r2", False), ("r1", "r3", False), ("r3", "r3", False)],
            "Superseded",
            10.0,
            id="superseded",
        ),
    ],
)
def test_rollout_duration(statuses: list[tuple[str, str, bool]], outcome: str, seconds: float) -> None:
    clock = Clock()
    observer = metrics.RolloutObserver(clock=clock)
    with (
        change("rollouts_rollout_duration_seconds_sum", outcome=outcome) as total,
        change("rollouts_rollout_duration_seconds_count", outcome=outcome) as count,
    ):
        for index, (current, updated, failed) in enumerate(statuses):
            clock.now = 1000.0 + 10 * index
            observer.observe(
                kind=None if index == 0 else "MODIFIED",
                collaset=collaset(current=current, updated=updated, failed=failed),
            )
    assert (count(), total()) == (1, pytest.approx(seconds))


def test_a_rollout_under_way_at_start_is_not_timed() -> None:
    clock = Clock()
    observer = metrics.RolloutObserver(clock=clock)
    with change("rollouts_rollout_duration_seconds_count", outcome="Completed") as count:
        observer.observe(kind=None, collaset=collaset(current="r1", updated="r2", uid="late"))
        observer.observe(kind="MODIFIED", collaset=collaset(current="r2", updated="r2", uid="late"))
    assert count() == 0


def test_rule_verdicts_by_kind_stage_and_outcome() -> None:
    rule_obj = PodTransitionRule.model_validate(
        {
            "metadata": {"name": "gate", "namespace": "ns"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "rules": [
                    {"name": "budget", "availablePolicy": {"maxUnavailableValue": 1}},
                    {"name": "labels", "labelCheck": {"requires": {"matchLabels": {"ok": "1"}}}},
                ],
            },
        }
    )
    stages = [
        StageVerdicts(
            stage=Stage.PRE_CHECK,
            verdict=Verdict(),
            rules={
                "budget": Verdict(passed=frozenset({"a", "b"}), rejected={"c": "over budget"}),
                "labels": Verdict(rejected={"a": "no", "b": "no"}),
                "gone": Verdict(passed=frozenset({"a"})),
            },
            details=(),
            rule_states=(),
        )
    ]
    name = "rollouts_rule_verdicts_total"
    with (
        change(name, kind="availablePolicy", stage="PreCheck", outcome="passed") as budget_passed,
        change(name, kind="availablePolicy", stage="PreCheck", outcome="rejected") as budget_rejected,
        change(name, kind="labelCheck", stage="PreCheck", outcome="rejected") as labels_rejected,
    ):
        metrics.count_verdicts(rule_obj, stages)
    assert (budget_passed(), budget_rejected(), labels_rejected()) == (2, 1, 2)


@pytest.fixture
async def rule_server() -> AsyncIterator[str]:
    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"success": True})

    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="down")

    app = web.Application()
    app.router.add_post("/ok", ok)
    app.router.add_get("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_webhook_calls_are_timed_and_failures_counted(rule_server: str) -> None:
    with (
        change("rollouts_rule_webhook_request_duration_seconds_count", call="request") as requests,
        change("rollouts_rule_webhook_request_duration_seconds_count", call="poll") as polls,
        change("rollouts_rule_webhook_errors_total", call="poll", kind="status") as status_errors,
        change("rollouts_rule_webhook_errors_total", call="request", kind="transport") as transport_errors,
    ):
        async with aiohttp.ClientSession(trace_configs=[metrics.webhook_trace_config()]) as session:
            async with session.post(f"{rule_server}/ok", json={}) as answer:
                assert answer.status == 200
            async with session.get(f"{rule_server}/broken") as answer:
                assert answer.status == 500
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.post(f"http://127.0.0.1:{closed_port()}/x", json={})
    assert (requests(), polls(), status_errors(), transport_errors()) == (2, 1, 1, 1)


def test_the_scrape_shows_every_family_with_api_requests_and_queues() -> None:
    calls = ApiCalls()
    calls.record(CallKey(verb="patch", group="", resource="pods", code="200"))
    calls.record(CallKey(verb="patch", group="", resource="pods", code="200"))
    collector = metrics._StateCollector(calls)

    def pod_phases(families: dict[str, Any]) -> dict[str, float]:
        return {s.labels["phase"]: s.value for s in families["rollouts_lifecycle_pods"].samples}

    # The gauges sum every registered source: an operator run earlier in this process (the
    # integration tier) may still have its own, so the test's source is compared as a delta.
    before = pod_phases({family.name: family for family in collector.collect()})
    metrics.QUEUES.set("test-queue", lambda: {"": 3})
    metrics.POD_PHASES.set("test-pods", lambda: {"Preparing": 2})
    try:
        families = {family.name: family for family in collector.collect()}
    finally:
        metrics.QUEUES.clear("test-queue")
        metrics.POD_PHASES.clear("test-pods")
    (request,) = families["rollouts_api_requests"].samples
    assert (request.labels, request.value) == (
        {"verb": "patch", "group": "", "resource": "pods", "code": "200"},
        2,
    )
    queues = {s.labels["controller"]: s.value for s in families["rollouts_reconcile_queue_depth"].samples}
    assert queues["test-queue"] == 3
    pods = pod_phases(families)
    assert pods["Preparing"] - before["Preparing"] == 2
    assert pods["ServiceAvailable"] == before["ServiceAvailable"]

    text = generate_latest(REGISTRY).decode()
    for family in (
        "rollouts_lifecycle_transitions_total",
        "rollouts_lifecycle_phase_duration_seconds",
        "rollouts_lifecycle_pods",
        "rollouts_rule_verdicts_total",
        "rollouts_rule_webhook_request_duration_seconds",
        "rollouts_rule_webhook_errors_total",
        "rollouts_hook_runs_total",
        "rollouts_hook_duration_seconds",
        "rollouts_rollout_duration_seconds",
        "rollouts_reconcile_duration_seconds",
        "rollouts_reconcile_queue_depth",
        "rollouts_api_requests_total",
    ):
        assert f"# TYPE {family} " in text, family


async def test_reconciling_times_errors_too() -> None:
    with change("rollouts_reconcile_duration_seconds_count", controller="test") as count:
        with metrics.reconciling("test"):
            await asyncio.sleep(0)
        with pytest.raises(RuntimeError), metrics.reconciling("test"):
            raise RuntimeError("boom")
    assert count() == 2
