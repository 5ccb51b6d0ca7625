"""``rollouts trace``: timelines from pods, history, rules and Events; CollaSet summaries; output."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lifecycle.history import HISTORY_ANNOTATION, History, Hold, OperationRecord, Outcome, format_history
from lifecycle.labels import (
    CONTROL,
    CONTROL_VALUE,
    OPERATE,
    OPERATING,
    OPERATION_TYPE,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    SERVICE_AVAILABLE,
)
from lifecycle.states import OperationPhase as P
from rollouts.trace_command import TraceError, parse_target
from rollouts.tracing import (
    IN_PROGRESS,
    event_lines,
    explain_hold,
    format_seconds,
    render_collaset,
    render_pod,
    to_json,
    trace_collaset,
    trace_pod,
)

T0 = 1_700_000_000_000  # ms
NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC) + timedelta(seconds=60)


def at(seconds: float) -> int:
    return T0 + int(seconds * 1000)


def stamp(seconds: float) -> str:
    return str(at(seconds) * 1_000_000)


def iso(seconds: float) -> str:
    moment = datetime.fromtimestamp(at(seconds) / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_pod(
    labels: Mapping[str, str] | None = None,
    history: History | None = None,
    name: str = "web-1",
    revision: str = "web-2",
) -> dict[str, Any]:
    annotations = {HISTORY_ANNOTATION: format_history(history)} if history is not None else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {CONTROL: CONTROL_VALUE, "controller-revision-hash": revision, **(labels or {})},
            "annotations": annotations,
            "ownerReferences": [{"controller": True, "kind": "CollaSet", "name": "web", "uid": "cls-uid"}],
        }
    }


def completed(
    op_id: str = "collaset-update", *, seconds: float = 10, holds: tuple[Hold, ...] = ()
) -> OperationRecord:
    return OperationRecord(
        id=op_id,
        type="update",
        entered={
            P.BEGUN: at(0),
            P.PRE_CHECK: at(0),
            P.PRE_CHECKED: at(seconds * 0.5),
            P.OPERATING: at(seconds * 0.6),
            P.COMPLETING: at(seconds * 0.9),
        },
        holds=holds,
        outcome=Outcome.COMPLETED,
        ended_ms=at(seconds),
    )


GATE_HOLD = Hold(by="podtransitionrule gate", phase=P.PRE_CHECK, since_ms=at(0), until_ms=at(5))


def rejected_event(
    ptr: str, rule: str, reason: str, seconds: float, stage: str = "PreCheck"
) -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": "TransitionRuleRejected",
        "message": f"PodTransitionRule {ptr} rule {rule} blocks {stage}: {reason}",
        "lastTimestamp": iso(seconds),
    }


def rule_object(
    name: str, rules: list[dict[str, Any]], details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"rules": rules}, "status": {"details": details or []}}


def test_a_finished_operation_from_the_history() -> None:
    pod = make_pod({SERVICE_AVAILABLE: "x"}, History(done=(completed(holds=(GATE_HOLD,)),)))
    trace = trace_pod(pod, now=NOW)
    (op,) = trace.operations
    assert (op.id, op.type, op.outcome, op.seconds) == ("collaset-update", "update", "Completed", 10.0)
    assert [s.phase for s in op.steps] == ["Begun", "PreCheck", "PreChecked", "Operating", "Completing"]
    assert [s.seconds for s in op.steps] == [0.0, 5.0, 1.0, 3.0, 1.0]
    assert not any(s.ongoing for s in op.steps)
    assert op.holds[0].seconds == 5.0
    assert trace.phase == "ServiceAvailable"
    assert trace.owner == "CollaSet web"


def test_an_operation_under_way_merges_history_and_labels() -> None:
    history = History(
        live=(OperationRecord(id="u", type="update", entered={P.BEGUN: at(0), P.PRE_CHECK: at(1)}),)
    )
    labels = {
        f"{OPERATING}/u": stamp(0),
        f"{OPERATION_TYPE}/u": "update",
        f"{PRE_CHECKED}/u": stamp(20),
        f"{PREPARING}/u": stamp(20),
    }
    trace = trace_pod(make_pod(labels, history), now=NOW)
    (op,) = trace.operations
    assert op.outcome == IN_PROGRESS
    assert [(s.phase, s.seconds) for s in op.steps] == [
        ("Begun", 1.0),
        ("PreCheck", 19.0),
        ("PreChecked", 0.0),
        ("Preparing", 40.0),
    ]
    assert op.steps[-1].ongoing
    assert trace.phase == "Preparing"


def test_labels_alone_give_a_timeline() -> None:
    labels = {f"{OPERATING}/u": stamp(0), f"{OPERATION_TYPE}/u": "restart", f"{OPERATE}/u": stamp(30)}
    (op,) = trace_pod(make_pod(labels), now=NOW).operations
    assert (op.type, [s.phase for s in op.steps], op.seconds) == ("restart", ["Begun", "Operating"], 60.0)


def test_a_new_run_of_an_id_ignores_the_history_of_the_previous_one() -> None:
    history = History(
        live=(OperationRecord(id="u", type="update", entered={P.BEGUN: at(-100), P.COMPLETING: at(-90)}),)
    )
    labels = {f"{OPERATING}/u": stamp(0), f"{OPERATION_TYPE}/u": "update", f"{PRE_CHECK}/u": stamp(0)}
    (op,) = trace_pod(make_pod(labels, history), now=NOW).operations
    assert [s.phase for s in op.steps] == ["Begun", "PreCheck"]


def test_finished_operations_come_first_oldest_first() -> None:
    history = History(done=(completed("first"), completed("second")))
    labels = {f"{OPERATING}/third": stamp(30), f"{OPERATION_TYPE}/third": "update"}
    trace = trace_pod(make_pod(labels, history), now=NOW)
    assert [op.id for op in trace.operations] == ["first", "second", "third"]


def test_a_malformed_label_is_reported_not_raised() -> None:
    trace = trace_pod(make_pod({PRE_CHECK: "1"}), now=NOW)
    assert trace.operations == ()
    assert trace.phase == "Unknown"
    assert trace.problems and "invalid label" in trace.problems[0]


CHECK_RULE = {"name": "check", "stage": "PreCheck", "labelCheck": {"requires": {}}}
BUDGET_RULE = {"name": "budget", "stage": "PreCheck", "availablePolicy": {"maxUnavailableValue": 1}}


@pytest.mark.parametrize(
    ("hold", "events", "rules", "expected"),
    [
        pytest.param(
            Hold(by="podtransitionrule gate", phase=P.PRE_CHECK, since_ms=at(0), reason="rule check: known"),
            [rejected_event("gate", "check", "from the event", 1)],
            [],
            "rule check: known",
            id="history-names-it",
        ),
        pytest.param(
            GATE_HOLD,
            [rejected_event("gate", "check", "old", 1), rejected_event("gate", "budget", "latest", 2)],
            [],
            "rule budget: latest",
            id="last-rejection-event-before-the-end",
        ),
        pytest.param(
            GATE_HOLD,
            [rejected_event("gate", "check", "in time", 1), rejected_event("gate", "budget", "too late", 9)],
            [],
            "rule check: in time",
            id="events-after-the-hold-ignored",
        ),
        pytest.param(
            GATE_HOLD,
            [
                rejected_event("other", "check", "not this rule object", 1),
                rejected_event("gate", "x", "wrong stage", 1, stage="PostCheck"),
            ],
            [
                rule_object(
                    "gate",
                    [CHECK_RULE, BUDGET_RULE],
                    [
                        {
                            "name": "web-1",
                            "stage": "PreCheck",
                            "passed": False,
                            "rejectInfo": [{"ruleName": "budget", "reason": "2 unavailable"}],
                        }
                    ],
                )
            ],
            "rule budget: 2 unavailable",
            id="current-status-when-no-event",
        ),
        pytest.param(
            GATE_HOLD, [], [rule_object("gate", [CHECK_RULE])], "rule check", id="only-rule-of-the-stage"
        ),
        pytest.param(
            GATE_HOLD, [], [rule_object("gate", [CHECK_RULE, BUDGET_RULE])], "", id="several-rules-unknown"
        ),
        pytest.param(
            Hold(
                by="finalizer prot.podopslifecycle.kusionstack.io/traffic", phase=P.PREPARING, since_ms=at(0)
            ),
            [],
            [],
            "",
            id="finalizers-need-no-reason",
        ),
    ],
)
def test_explain_hold(
    hold: Hold, events: list[dict[str, Any]], rules: list[dict[str, Any]], expected: str
) -> None:
    trace = trace_pod(make_pod(), rules=rules, now=NOW)
    assert explain_hold(hold, events=event_lines(events), rules=rules, states=trace.rules) == expected


def test_the_pod_trace_names_the_blocking_rule_and_lists_events_in_order() -> None:
    pod = make_pod(history=History(done=(completed(holds=(GATE_HOLD,)),)))
    events = [
        {"type": "Normal", "reason": "TransitionRulePassed", "message": "passed", "lastTimestamp": iso(5)},
        rejected_event("gate", "check", "label missing", 1),
    ]
    rules = [rule_object("gate", [CHECK_RULE], [{"name": "web-1", "stage": "PreCheck", "passed": True}])]
    trace = trace_pod(pod, events=events, rules=rules, now=NOW)
    assert [e.reason for e in trace.events] == ["TransitionRuleRejected", "TransitionRulePassed"]
    text = render_pod(trace)
    assert "held by podtransitionrule gate (rule check: label missing) for 5.0s" in text
    assert text.index("Begun") < text.index("PreCheck  ") < text.index("Completing")
    assert "gate (PreCheck): passed" in text
    document = json.loads(json.dumps(to_json(trace)))
    assert document["kind"] == "PodTrace"
    assert document["operations"][0]["holds"][0]["reason"] == "rule check: label missing"
    assert document["operations"][0]["steps"][0]["entered"].endswith("Z")


def job(
    name: str, hook: str, *, outcome: str | None, start: float, end: float | None = None
) -> dict[str, Any]:
    conditions = []
    status: dict[str, Any] = {"startTime": iso(start)}
    if outcome == "Complete":
        conditions.append({"type": "Complete", "status": "True", "lastTransitionTime": iso(end or start)})
        status["completionTime"] = iso(end or start)
    elif outcome == "Failed":
        conditions.append({"type": "Failed", "status": "True", "lastTransitionTime": iso(end or start)})
    status["conditions"] = conditions
    return {
        "metadata": {
            "name": name,
            "labels": {"rollouts.kusionstack.io/hook": hook, "controller-revision-hash": "web-2"},
        },
        "status": status,
    }


def collaset(hooks: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "cls-uid"},
        "spec": {
            "replicas": 3,
            "lifecycleHooks": [
                {"name": h, "trigger": {"progressAvailableParams": {"progressPoint": p}}} for h, p in hooks
            ],
        },
        "status": {
            "currentRevision": "web-1",
            "updatedRevision": "web-2",
            "hookPhase": "Running smoke",
            "hooks": records,
            "conditions": [
                {"type": "Update", "status": "False", "reason": "WaitingForHook", "message": "smoke"}
            ],
        },
    }


def test_the_collaset_trace_lists_points_hooks_jobs_and_pods_slowest_first() -> None:
    obj = collaset(
        [("pre", 0), ("smoke", "50%"), ("end", "100%")],
        [
            {
                "name": "pre",
                "revision": "web-2",
                "point": 0,
                "phase": "Succeeded",
                "jobName": "j-pre",
                "startTime": iso(0),
                "finishTime": iso(4),
            },
            {
                "name": "smoke",
                "revision": "web-2",
                "point": 2,
                "phase": "Running",
                "jobName": "j-smoke",
                "startTime": iso(30),
            },
        ],
    )
    pods = [
        make_pod(name="fast", history=History(done=(completed(seconds=4),))),
        make_pod(name="slow", history=History(done=(completed(seconds=20, holds=(GATE_HOLD,)),))),
        make_pod(name="idle", revision="web-1"),
    ]
    jobs = [
        job("j-smoke", "smoke", outcome=None, start=30),
        job("j-pre", "pre", outcome="Complete", start=0, end=4),
    ]
    trace = trace_collaset(obj, pods=pods, jobs=jobs, now=NOW)
    assert [p.name for p in trace.pods] == ["slow", "fast", "idle"]
    slow = trace.pods[0]
    assert slow.phases == {
        "PreCheck": 10.0,
        "Preparing": 2.0,
        "Operating": 6.0,
        "PostCheck": 0.0,
        "Completing": 2.0,
    }
    assert slow.held_by == ("podtransitionrule gate 5.0s",)
    assert [(h.name, h.progress_point, h.point, h.phase) for h in trace.hooks] == [
        ("pre", "0", 0, "Succeeded"),
        ("smoke", "50%", 2, "Running"),
        ("end", "100%", None, "NotRun"),
    ]
    assert trace.hooks[0].seconds == 4.0
    assert trace.hooks[1].seconds == 30.0  # running: so far
    assert [(j.name, j.outcome, j.seconds) for j in trace.jobs] == [
        ("j-pre", "Succeeded", 4.0),
        ("j-smoke", "Running", 30.0),
    ]
    text = render_collaset(trace)
    assert "revision web-1 -> web-2" in text
    assert "condition Update=False WaitingForHook: smoke" in text
    assert text.index("slow") < text.index("fast") < text.index("idle")
    assert json.loads(json.dumps(to_json(trace)))["kind"] == "CollaSetTrace"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "-", id="unknown"),
        pytest.param(0.04, "0.0s", id="sub-second"),
        pytest.param(12.345, "12.3s", id="seconds"),
        pytest.param(125, "2m05s", id="minutes"),
        pytest.param(3725, "1h02m", id="hours"),
    ],
)
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        pytest.param("pod/web-1", ("pod", "web-1"), id="pod"),
        pytest.param("po/web-1", ("pod", "web-1"), id="po"),
        pytest.param("cls/web", ("collaset", "web"), id="cls"),
        pytest.param("collasets.apps.kusionstack.io/web", ("collaset", "web"), id="full-resource"),
    ],
)
def test_parse_target(target: str, expected: tuple[str, str]) -> None:
    assert parse_target(target) == expected


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param("web-1", "pod/NAME or cls/NAME", id="no-kind"),
        pytest.param("deploy/web", "cannot trace a deploy", id="other-kind"),
        pytest.param("pod/", "pod/NAME or cls/NAME", id="no-name"),
    ],
)
def test_parse_target_refuses(target: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_target(target)


def test_the_same_event_posted_again_is_shown_once_with_its_count() -> None:
    same = {"type": "Normal", "reason": "ServiceReady", "message": "Set ReadinessGate service-ready to true"}
    lines = event_lines(
        [
            {**same, "lastTimestamp": iso(2)},
            {**same, "lastTimestamp": iso(1), "count": 2},
            {**same, "lastTimestamp": iso(1)},
        ]
    )
    assert [(line.time, line.count) for line in lines] == [
        (datetime.fromtimestamp(at(1) // 1000, tz=UTC), 3),
        (datetime.fromtimestamp(at(2) // 1000, tz=UTC), 1),
    ]
