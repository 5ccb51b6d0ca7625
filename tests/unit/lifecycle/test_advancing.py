"""One :func:`advance` step: the mutating-webhook scenarios (ref. §2.4) and the controller ones (§2.6).

Each row: the pod's labels and facts before, the labels after applying the patch, and
the desired ``service-ready`` condition (``None`` = leave it).
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.advancing import LifecyclePatch, PodFacts, advance, ready_to_operate, settle
from lifecycle.labels import (
    AVAILABLE_CONDITIONS,
    COMPLETING,
    CONTROL,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    SERVICE_AVAILABLE,
    SERVICE_READY,
    STAY_OFFLINE,
    UNDO_OPERATION_TYPE,
)
from lifecycle.states import InvalidLifecycleLabel

from .lifecycle_builders import EXPECT_TRAFFIC, NOW, OLD, TRAFFIC_FINALIZER, T, applied, facts, op, perm, pod

BEGUN = (OPERATING, OPERATION_TYPE)
FINISHED = (OPERATION_TYPE, PRE_CHECKED, OPERATE)  # operated on, operator called finish
DONE = (OPERATED, DONE_OPERATION_TYPE)
SA_OLD = {SERVICE_AVAILABLE: OLD}
GATE_TRUE: dict[str, Any] = {"has_readiness_gate": True, "service_ready": True}
GATE_FALSE: dict[str, Any] = {"has_readiness_gate": True, "service_ready": False}

WEBHOOK_CASES = [
    pytest.param(
        pod(op("a", *BEGUN)),
        GATE_TRUE,
        pod(op("a", *BEGUN), op("a", PRE_CHECK, value=T)),
        None,
        id="pre-check-added",
    ),
    pytest.param(
        pod(op("a", *BEGUN), op("b", *BEGUN)),
        GATE_TRUE,
        pod(op("a", *BEGUN), op("b", *BEGUN), op("a", PRE_CHECK, value=T), op("b", PRE_CHECK, value=T)),
        None,
        id="pre-check-added-two-ids",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECK, PRE_CHECKED), perm("update"), SA_OLD),
        GATE_TRUE,
        pod(op("a", *BEGUN, PRE_CHECKED), perm("update"), op("a", PREPARING, value=T)),
        False,
        id="pre-checked-not-ready-preparing",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        GATE_FALSE,
        pod(op("a", *BEGUN, PRE_CHECKED), perm("update"), op("a", OPERATE, value=T)),
        None,
        id="preparing-ready-operate",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        {**GATE_FALSE, "finalizers": frozenset({TRAFFIC_FINALIZER})},
        pod(op("a", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        None,
        id="preparing-held-by-protection-finalizer",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECKED), perm("update"), SA_OLD),
        {},
        pod(op("a", *BEGUN, PRE_CHECKED), perm("update"), op("a", OPERATE, value=T)),
        None,
        id="no-condition-operate-at-once",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECK, PRE_CHECKED, UNDO_OPERATION_TYPE), perm("update")),
        GATE_FALSE,
        pod(),
        True,
        id="undo-wipes-id-and-permission",
    ),
    pytest.param(
        pod(
            op("a", *BEGUN, PRE_CHECK, PRE_CHECKED, UNDO_OPERATION_TYPE, t="upgrade"),
            perm("upgrade"),
            op("b", *BEGUN, PRE_CHECK, PRE_CHECKED, t="replace"),
            perm("replace"),
        ),
        GATE_TRUE,
        pod(op("b", *BEGUN, PRE_CHECKED, t="replace"), perm("replace"), op("b", PREPARING, value=T)),
        False,
        id="undo-one-id-other-type-continues",
    ),
    pytest.param(
        pod(
            op("a", *BEGUN, PRE_CHECKED, UNDO_OPERATION_TYPE),
            op("b", *BEGUN, PRE_CHECKED, PREPARING),
            perm("update"),
        ),
        GATE_TRUE,
        pod(op("b", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        False,
        id="undo-keeps-permission-held-by-same-type",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECKED, UNDO_OPERATION_TYPE), op("b", *BEGUN), perm("update")),
        GATE_TRUE,
        pod(op("b", *BEGUN), op("b", PRE_CHECK, value=T)),
        None,
        id="undo-drops-permission-not-held-by-pre-checked-same-type",
    ),
    pytest.param(
        pod(op("a", UNDO_OPERATION_TYPE), SA_OLD),
        {**GATE_TRUE, "ready": True},
        pod(SA_OLD),
        None,
        id="undo-only-id-cleaned-up",
    ),
    pytest.param(
        pod(op("a", OPERATION_TYPE, PRE_CHECK)),
        GATE_TRUE,
        pod(),
        None,
        id="abandoned-id-cleaned-up",
    ),
    pytest.param(
        pod(op("a", OPERATION_TYPE, PRE_CHECKED, PREPARING), perm("update"), op("b", *BEGUN, PRE_CHECK)),
        GATE_FALSE,
        pod(op("b", *BEGUN, PRE_CHECK)),
        None,
        id="abandoned-after-pre-checked-releases-permission",
    ),
    pytest.param(
        pod(
            op("a", *BEGUN, PRE_CHECK, PRE_CHECKED, t="upgrade"),
            perm("upgrade"),
            op("b", *BEGUN, t="replace"),
        ),
        GATE_TRUE,
        pod(
            op("a", *BEGUN, PRE_CHECKED, t="upgrade"),
            perm("upgrade"),
            op("a", PREPARING, value=T),
            op("b", *BEGUN, t="replace"),
            op("b", PRE_CHECK, value=T),
        ),
        False,
        id="mixed-pre-checked-and-fresh-id",
    ),
    pytest.param(
        pod(
            op("a", *BEGUN, PRE_CHECKED, PREPARING),
            op("b", *BEGUN, PRE_CHECKED, PREPARING, t="delete"),
            perm("update", "delete"),
        ),
        GATE_FALSE,
        pod(
            op("a", *BEGUN, PRE_CHECKED),
            op("b", *BEGUN, PRE_CHECKED, t="delete"),
            perm("update", "delete"),
            op("a", OPERATE, value=T),
            op("b", OPERATE, value=T),
        ),
        None,
        id="both-ids-operate-when-ready",
    ),
    pytest.param(
        pod(op("a", *FINISHED), perm("update")),
        GATE_FALSE,
        pod(op("a", *DONE, POST_CHECK, value=T)),
        None,
        id="operated-transition",
    ),
    pytest.param(
        pod(op("a", *FINISHED), op("b", *FINISHED, t="delete"), perm("update", "delete")),
        GATE_FALSE,
        pod(op("a", *DONE, POST_CHECK, value=T), op("b", *DONE, POST_CHECK, value=T, t="delete")),
        None,
        id="operated-transition-two-types",
    ),
    pytest.param(
        pod(op("a", *FINISHED), op("b", OPERATING, *FINISHED), perm("update")),
        GATE_FALSE,
        pod(op("a", *FINISHED), op("b", OPERATING, *FINISHED), perm("update")),
        None,
        id="operated-waits-while-another-id-operating",
    ),
    pytest.param(
        pod(op("a", *FINISHED), op("b", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        {**GATE_FALSE, "finalizers": frozenset({TRAFFIC_FINALIZER})},
        pod(op("a", *FINISHED), op("b", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
        None,
        id="operated-waits-for-preparing-id",
    ),
    pytest.param(
        pod(op("a", *DONE), op("b", *DONE, POST_CHECK)),
        GATE_FALSE,
        pod(op("a", *DONE), op("b", *DONE, POST_CHECK), op("a", POST_CHECK, value=T)),
        None,
        id="post-check-for-all-operated",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECK, POST_CHECKED)),
        GATE_FALSE,
        pod(op("a", *DONE, POST_CHECKED), op("a", COMPLETING, value=T)),
        True,
        id="completing",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING), op("b", *DONE, POST_CHECKED, COMPLETING)),
        {
            **GATE_TRUE,
            "ready": True,
            "annotations": EXPECT_TRAFFIC,
            "finalizers": frozenset({TRAFFIC_FINALIZER}),
        },
        pod({SERVICE_AVAILABLE: T}),
        None,
        id="cleanup-expected-finalizers-satisfied",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING)),
        GATE_TRUE,
        pod(),
        None,
        id="cleanup-no-expected-finalizers",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING)),
        {**GATE_TRUE, "ready": True, "annotations": EXPECT_TRAFFIC},
        pod(op("a", *DONE, POST_CHECKED, COMPLETING)),
        None,
        id="no-cleanup-expected-finalizer-missing",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING)),
        {**GATE_TRUE, "ready": True, "annotations": {AVAILABLE_CONDITIONS: "{"}},
        pod(op("a", *DONE, POST_CHECKED, COMPLETING)),
        None,
        id="no-cleanup-invalid-available-conditions",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING), op("b", *BEGUN, PRE_CHECK)),
        GATE_TRUE,
        pod(op("a", *DONE, POST_CHECKED, COMPLETING), op("b", *BEGUN, PRE_CHECK)),
        None,
        id="no-cleanup-while-another-id-runs",
    ),
    pytest.param(
        pod(op("a", PRE_CHECKED, OPERATE), perm("update")),
        {**GATE_FALSE, "previous_labels": pod(op("a", *BEGUN, PRE_CHECKED, OPERATE), perm("update"))},
        pod(op("a", *DONE, POST_CHECK, value=T)),
        None,
        id="type-from-previous-pod-when-operator-removed-it",
    ),
    pytest.param(
        pod(op("a", PRE_CHECKED, OPERATE), perm("update")),
        GATE_FALSE,
        pod(op("a", PRE_CHECKED, OPERATE), perm("update")),
        None,
        id="unknown-type-holds-operated-barrier",
    ),
]


@pytest.mark.parametrize(("labels", "kwargs", "expected", "service_ready"), WEBHOOK_CASES)
def test_webhook_step(
    labels: dict[str, str], kwargs: dict[str, Any], expected: dict[str, str], service_ready: bool | None
) -> None:
    patch = advance(facts(labels, **kwargs), now_ns=NOW)
    assert applied(labels, patch) == expected
    assert patch.service_ready is service_ready
    assert not patch.add_readiness_gate


CONTROLLER_CASES = [
    pytest.param(pod(), {"has_readiness_gate": True}, pod(), True, id="new-pod-service-ready-true"),
    pytest.param(pod(), GATE_TRUE, pod(), None, id="idle-pod-already-true"),
    pytest.param(pod(), {"service_ready": False}, pod(), None, id="no-gate-no-condition"),
    pytest.param(
        pod({STAY_OFFLINE: "true"}),
        {"has_readiness_gate": True, "ready": True},
        pod({STAY_OFFLINE: "true"}),
        None,
        id="stay-offline-no-label-no-condition",
    ),
    pytest.param(
        pod(op("a", OPERATING, PREPARING)),
        GATE_TRUE,
        pod(op("a", OPERATING, PREPARING), op("a", PRE_CHECK, value=T)),
        False,
        id="operating-and-preparing-false",
    ),
    pytest.param(
        pod(op("a", OPERATE, COMPLETING)), GATE_FALSE, pod(), True, id="operate-and-completing-true"
    ),
    pytest.param(
        pod(op("a", OPERATE, DONE_OPERATION_TYPE, COMPLETING), op("b", *BEGUN, PREPARING)),
        GATE_TRUE,
        pod(
            op("a", OPERATE, DONE_OPERATION_TYPE, COMPLETING),
            op("b", *BEGUN, PREPARING),
            op("b", PRE_CHECK, value=T),
        ),
        False,
        id="completing-and-preparing-false",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECKED, COMPLETING), op("b", *BEGUN, PRE_CHECKED, OPERATE), perm("update")),
        GATE_FALSE,
        pod(op("a", *DONE, POST_CHECKED, COMPLETING), op("b", *BEGUN, PRE_CHECKED, OPERATE), perm("update")),
        None,
        id="completing-but-late-id-operating-stays-false",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECK, t="abc"), op("b", *BEGUN, PRE_CHECK, t="def")),
        {**GATE_TRUE, "pre_check_passed": True},
        pod(
            op("a", *BEGUN, PRE_CHECK, t="abc"),
            op("b", *BEGUN, PRE_CHECK, t="def"),
            op("a", PRE_CHECKED, value=T),
            op("b", PRE_CHECKED, value=T),
            perm("abc", "def", value=T),
        ),
        None,
        id="pre-check-passed-two-ids-two-types-four-labels",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECK), op("b", *BEGUN)),
        {**GATE_TRUE, "pre_check_passed": True},
        pod(
            op("a", *BEGUN, PRE_CHECK),
            op("b", *BEGUN),
            op("b", PRE_CHECK, value=T),
            op("a", PRE_CHECKED, value=T),
            op("b", PRE_CHECKED, value=T),
            perm("update", value=T),
        ),
        None,
        id="pre-check-approval-is-per-pod",
    ),
    pytest.param(
        pod(op("a", *BEGUN, PRE_CHECK)),
        {**GATE_TRUE, "pre_check_passed": False, "post_check_passed": True},
        pod(op("a", *BEGUN, PRE_CHECK)),
        None,
        id="pre-check-not-passed",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECK), op("b", *DONE, POST_CHECK)),
        {**GATE_FALSE, "post_check_passed": True},
        pod(
            op("a", *DONE, POST_CHECK),
            op("b", *DONE, POST_CHECK),
            op("a", POST_CHECKED, value=T),
            op("b", POST_CHECKED, value=T),
        ),
        None,
        id="post-check-passed-two-ids",
    ),
    pytest.param(
        pod(op("a", *DONE, POST_CHECK), op("b", *BEGUN, PRE_CHECK)),
        {**GATE_FALSE, "post_check_passed": True},
        pod(op("a", *DONE, POST_CHECK), op("b", *BEGUN, PRE_CHECK)),
        None,
        id="post-check-verdict-ignored-in-pre-check-stage",
    ),
    pytest.param(
        pod(op("a", *BEGUN)),
        {**GATE_TRUE, "pre_check_passed": True},
        pod(op("a", *BEGUN), op("a", PRE_CHECK, value=T)),
        None,
        id="verdict-ignored-when-pod-was-not-in-stage",
    ),
    pytest.param(pod(), {**GATE_TRUE, "ready": True}, pod({SERVICE_AVAILABLE: T}), None, id="ready-gets-sa"),
    pytest.param(
        pod(),
        {**GATE_TRUE, "ready": True, "annotations": EXPECT_TRAFFIC},
        pod(),
        None,
        id="ready-but-expected-finalizer-missing",
    ),
    pytest.param(
        pod(),
        {
            **GATE_TRUE,
            "ready": True,
            "annotations": EXPECT_TRAFFIC,
            "finalizers": frozenset({TRAFFIC_FINALIZER}),
        },
        pod({SERVICE_AVAILABLE: T}),
        None,
        id="ready-and-expected-finalizer-present",
    ),
    pytest.param(pod(SA_OLD), GATE_TRUE, pod(), None, id="not-ready-loses-sa"),
    pytest.param(
        pod(SA_OLD, op("a", *BEGUN, PRE_CHECK)),
        GATE_TRUE,
        pod(op("a", *BEGUN, PRE_CHECK)),
        None,
        id="not-ready-ids",
    ),
    pytest.param(
        pod(SA_OLD, op("a", *BEGUN)),
        {**GATE_TRUE, "ready": True},
        pod(SA_OLD, op("a", *BEGUN), op("a", PRE_CHECK, value=T)),
        None,
        id="ready-keeps-sa-until-preparing",
    ),
    pytest.param(
        pod(SA_OLD), {**GATE_TRUE, "ready": True}, pod(SA_OLD), None, id="service-available-fixed-point"
    ),
]


@pytest.mark.parametrize(("labels", "kwargs", "expected", "service_ready"), CONTROLLER_CASES)
def test_controller_step(
    labels: dict[str, str], kwargs: dict[str, Any], expected: dict[str, str], service_ready: bool | None
) -> None:
    patch = advance(facts(labels, **kwargs), now_ns=NOW)
    assert applied(labels, patch) == expected
    assert patch.service_ready is service_ready


@pytest.mark.parametrize(
    ("finalizers", "service_ready", "expected"),
    [
        pytest.param(frozenset(), None, True, id="no-condition"),
        pytest.param(frozenset({TRAFFIC_FINALIZER}), None, True, id="no-condition-finalizer-irrelevant"),
        pytest.param(frozenset(), True, False, id="condition-true"),
        pytest.param(frozenset(), False, True, id="condition-false"),
        pytest.param(frozenset({TRAFFIC_FINALIZER}), False, False, id="protection-finalizer"),
        pytest.param(frozenset({"example.io/other"}), False, True, id="other-finalizer"),
    ],
)
def test_ready_to_operate(finalizers: frozenset[str], service_ready: bool | None, expected: bool) -> None:
    assert ready_to_operate(finalizers=finalizers, service_ready=service_ready) is expected


def test_creating_pod_declares_gate_and_condition() -> None:
    patch = advance(facts(pod(), creating=True), now_ns=NOW)
    assert patch.add_readiness_gate
    assert patch.service_ready is True
    assert not patch.labels.is_empty or patch.to_merge_patch() == {}
    again = advance(facts(pod(), creating=True, has_readiness_gate=True), now_ns=NOW)
    assert not again.add_readiness_gate


def test_uncontrolled_pod_is_left_alone() -> None:
    labels = op("a", *BEGUN, UNDO_OPERATION_TYPE)
    patch = advance(PodFacts(labels=labels, has_readiness_gate=True, ready=True), now_ns=NOW)
    assert patch.is_empty
    assert settle(PodFacts(labels=labels), now_ns=NOW).is_empty
    assert "not controlled" in patch.reasons[0]
    assert advance(facts({CONTROL: "True"}), now_ns=NOW).is_empty


def test_invalid_label_raises() -> None:
    with pytest.raises(InvalidLifecycleLabel, match=f"invalid label {OPERATING}$"):
        advance(facts(pod({OPERATING: OLD})), now_ns=NOW)


def test_reasons_explain_waiting() -> None:
    patch = advance(
        facts(
            pod(op("a", *BEGUN, PRE_CHECKED, PREPARING), perm("update")),
            has_readiness_gate=True,
            service_ready=False,
            finalizers=frozenset({TRAFFIC_FINALIZER}),
        ),
        now_ns=NOW,
    )
    assert patch.is_empty
    assert any(TRAFFIC_FINALIZER in r for r in patch.reasons)


def test_patch_outputs() -> None:
    labels = pod(op("a", *BEGUN, PRE_CHECK, PRE_CHECKED), perm("update"), SA_OLD)
    patch = advance(facts(labels, **GATE_TRUE), now_ns=NOW)
    assert patch.to_merge_patch(resource_version="7") == {
        "metadata": {
            "labels": {
                f"{PRE_CHECK}/a": None,
                SERVICE_AVAILABLE: None,
                f"{PREPARING}/a": T,
            },
            "resourceVersion": "7",
        }
    }
    assert patch.service_ready_condition(now_ns=NOW) == {
        "type": SERVICE_READY,
        "status": "False",
        "lastTransitionTime": "2024-06-04T12:58:05Z",
        "message": "updated by PodOpsLifecycle",
    }
    assert LifecyclePatch().service_ready_condition(now_ns=NOW) is None
