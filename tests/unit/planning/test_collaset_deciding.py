"""rollouts.operator.collasets_deciding: one reconcile's decision from raw observed objects."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from collaset_builders import NOW, nanos, template

from lifecycle import labels as lc
from rollouts.api.collasets import REVISION_LABEL
from rollouts.operator.collasets_deciding import (
    CreateRule,
    Decision,
    Observed,
    decide,
    render_pod,
)
from rollouts.planning.revisions import (
    BumpRevision,
    CreateRevision,
    hash_revision,
    make_revision_data,
    name_revision,
)
from rollouts.planning.updating import SCALE_IN_ID, UPDATE_ID, BeginOperation, CreatePod

V1 = template("nginx:1.0")
V2 = template("nginx:2.0")


def revision_name(pod_template: dict[str, Any]) -> str:
    return name_revision(collaset="web", revision_hash=hash_revision(make_revision_data(pod_template)))


R1, R2 = revision_name(V1), revision_name(V2)


def collaset(
    replicas: int = 4,
    *,
    pod_template: dict[str, Any] = V2,
    status: dict[str, Any] | None = None,
    generation: int = 2,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "CollaSet",
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "uid": "uid-web",
            "generation": generation,
            "resourceVersion": "10",
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template,
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def revision(pod_template: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "metadata": {"name": revision_name(pod_template), "uid": f"uid-r{number}"},
        "data": make_revision_data(pod_template),
        "revision": number,
    }


def pod_obj(name: str, on: str, *, labels: dict[str, str] | None = None, age: int = 100) -> dict[str, Any]:
    image = "nginx:2.0" if on == R2 else "nginx:1.0"
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "5",
            "creationTimestamp": (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {
                "app": "web",
                REVISION_LABEL: on,
                lc.CONTROL: lc.CONTROL_VALUE,
                lc.SERVICE_AVAILABLE: nanos(NOW),
                **(labels or {}),
            },
        },
        "spec": {"containers": [{"name": "app", "image": image}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "image": image, "imageID": "sha256:x"}],
        },
    }


def observed(
    body: dict[str, Any], pods: list[dict[str, Any]], *, revisions: list[Any] | None = None
) -> Observed:
    return Observed(
        collaset=body,
        pods=pods,
        revisions=revisions if revisions is not None else [revision(V1, 1), revision(V2, 2)],
        jobs=[],
    )


def summary(decision: Decision) -> list[tuple[str, str]]:
    assert decision.plan is not None
    out = []
    for action in decision.plan.actions:
        if isinstance(action, CreatePod):
            out.append(("create", action.revision))
        elif isinstance(action, BeginOperation):
            out.append((f"begin:{'scale-in' if action.op_id == SCALE_IN_ID else 'update'}", action.pod))
        else:
            out.append((type(action).__name__, getattr(action, "pod", "")))
    return sorted(out)


def conditions(decision: Decision) -> dict[str, tuple[str, str]]:
    assert decision.status is not None
    return {c["type"]: (c["status"], c["reason"]) for c in decision.status["conditions"]}


OLD_PODS = [pod_obj(f"web-{i}", R1) for i in range(4)]
ROLLING = {"currentRevision": R1, "updatedRevision": R2}


@pytest.mark.parametrize(
    ("body", "pods", "actions", "expected_conditions"),
    [
        pytest.param(
            collaset(3, status={"currentRevision": R2}),
            [],
            [("create", R2)] * 3,
            {"Scale": ("False", "ScalingOut"), "Update": ("False", "Updating")},
            id="scale-out-from-0",
        ),
        pytest.param(
            collaset(1, status={"currentRevision": R2}),
            [pod_obj(f"web-{i}", R2, age=100 - i) for i in range(3)],
            [("begin:scale-in", "web-1"), ("begin:scale-in", "web-2")],
            {"Scale": ("False", "ScalingIn"), "Update": ("True", "Updated")},
            id="scale-in-newest-first",
        ),
        pytest.param(
            collaset(status=ROLLING, updateStrategy={"rollingUpdate": {"byPartition": {"partition": 2}}}),
            OLD_PODS,
            [("begin:update", "web-0"), ("begin:update", "web-1")],
            {"Scale": ("True", "Scaled"), "Update": ("False", "Updating")},
            id="update-with-partition-2",
        ),
        pytest.param(
            collaset(status=ROLLING),
            OLD_PODS,
            [("begin:update", f"web-{i}") for i in range(4)],
            {"Scale": ("True", "Scaled"), "Update": ("False", "Updating")},
            id="update-all",
        ),
        pytest.param(
            collaset(status=ROLLING, paused=True),
            OLD_PODS,
            [],
            {"Scale": ("True", "Scaled"), "Update": ("False", "Paused")},
            id="paused-begins-nothing",
        ),
        pytest.param(
            collaset(status=ROLLING, updateStrategy={"rollingUpdate": {"byPartition": {"partition": 4}}}),
            OLD_PODS,
            [],
            {"Scale": ("True", "Scaled"), "Update": ("False", "Partitioned")},
            id="partition-keeps-all",
        ),
        pytest.param(
            collaset(status={"currentRevision": R2}),
            [pod_obj(f"web-{i}", R2) for i in range(4)],
            [],
            {"Scale": ("True", "Scaled"), "Update": ("True", "Updated")},
            id="settled",
        ),
    ],
)
def test_decide_on_snapshots(
    body: dict[str, Any],
    pods: list[dict[str, Any]],
    actions: list[tuple[str, str]],
    expected_conditions: dict[str, tuple[str, str]],
) -> None:
    decision = decide(observed(body, pods), now=NOW)
    assert decision.updated_revision == R2
    assert decision.revision_actions == ()
    assert summary(decision) == actions
    got = conditions(decision)
    assert {k: got[k] for k in expected_conditions} == expected_conditions
    assert "Progressing" not in got, "no Progressing condition without progressDeadlineSeconds"


@pytest.mark.parametrize(
    ("body", "revisions", "expected"),
    [
        pytest.param(collaset(), [revision(V1, 1)], CreateRevision, id="new-template-creates"),
        pytest.param(
            collaset(pod_template=V1, status={"currentRevision": R2}),
            [revision(V1, 1), revision(V2, 2)],
            BumpRevision,
            id="rollback-bumps",
        ),
    ],
)
def test_nothing_but_the_revision_while_it_has_to_show(
    body: dict[str, Any], revisions: list[Any], expected: type
) -> None:
    decision = decide(observed(body, OLD_PODS, revisions=revisions), now=NOW)
    assert decision.waits_for_revision and decision.plan is None and decision.status is None
    assert [type(a) for a in decision.revision_actions] == [expected]


def test_status_unchanged_is_none() -> None:
    first = decide(observed(collaset(status=ROLLING), OLD_PODS), now=NOW)
    assert first.status is not None
    stored = collaset(status=first.status)
    again = decide(observed(stored, OLD_PODS), now=NOW + timedelta(seconds=30))
    assert again.status is None
    assert again.events == ()


def test_status_counts_and_revisions() -> None:
    pods = [pod_obj("web-0", R2), pod_obj("web-1", R1, labels=_in_pre_check())]
    decision = decide(observed(collaset(2, status=ROLLING), pods), now=NOW)
    status = decision.status
    assert status is not None
    assert {k: status[k] for k in ("currentRevision", "updatedRevision", "replicas", "updatedReplicas")} == {
        "currentRevision": R1,
        "updatedRevision": R2,
        "replicas": 2,
        "updatedReplicas": 1,
    }
    assert status["operatingReplicas"] == 1
    assert status["observedGeneration"] == 2
    assert status["lastProgressTime"] == "2024-05-01T12:00:00Z"


def test_default_rule_is_created_before_any_pod_is_touched() -> None:
    body = collaset(status=ROLLING, updateStrategy={"rollingUpdate": {"maxUnavailable": 1}})
    decision = decide(observed(body, OLD_PODS), now=NOW)
    assert [type(a) for a in decision.rule_actions] == [CreateRule]
    assert decision.waits_for_revision and decision.plan is None


def test_rejections_of_the_namespace_rules_reach_the_message() -> None:
    rule = {
        "metadata": {"name": "web-budget", "generation": 1},
        "status": {
            "observedGeneration": 1,
            "details": [
                {
                    "name": "web-1",
                    "stage": "PreCheck",
                    "passed": False,
                    "rejectInfo": [
                        {"ruleName": "budget", "reason": "[budget] blocked by max unavailable policy"}
                    ],
                }
            ],
        },
    }
    begun = {
        lc.id_key(lc.OPERATING, UPDATE_ID): "1",
        lc.id_key(lc.OPERATION_TYPE, UPDATE_ID): lc.UPDATE,
        lc.id_key(lc.PRE_CHECK, UPDATE_ID): "1",
    }
    pods = [pod_obj("web-0", R1), pod_obj("web-1", R1, labels=begun)]
    body = collaset(2, status=ROLLING, updateStrategy={"rollingUpdate": {"byPartition": {"partition": 1}}})
    decision = decide(
        Observed(
            collaset=body, pods=pods, revisions=[revision(V1, 1), revision(V2, 2)], jobs=[], rules=[rule]
        ),
        now=NOW,
    )
    assert decision.status is not None
    (update,) = [c for c in decision.status["conditions"] if c["type"] == "Update"]
    assert update["message"] == (
        "0/2 updated, waiting for pod web-1 to pass PreCheck: [ptr web-budget] [budget] blocked by max "
        "unavailable policy"
    )


def test_progress_deadline_is_noticed_by_the_requeue_and_posts_an_event_once() -> None:
    body = collaset(status=ROLLING, progressDeadlineSeconds=60)
    first = decide(observed(body, OLD_PODS), now=NOW)
    assert first.status is not None
    assert conditions(first)["Progressing"] == ("True", "Progressing")
    pods = [pod_obj(f"web-{i}", R1, labels=_in_pre_check()) for i in range(4)]
    stored = collaset(status=first.status, progressDeadlineSeconds=60)
    # the pods began their update (no progress by the counts): the status changes, the clock does not
    later = decide(observed(stored, pods), now=NOW + timedelta(seconds=20))
    assert later.status is not None and later.status["lastProgressTime"] == "2024-05-01T12:00:00Z"
    assert later.requeue_after == pytest.approx(41.0)
    stored = collaset(status=later.status, progressDeadlineSeconds=60)
    stuck = decide(observed(stored, pods), now=NOW + timedelta(seconds=61))
    assert stuck.status is not None
    assert conditions(stuck)["Progressing"] == ("False", "ProgressDeadlineExceeded")
    assert [(e.type, e.reason) for e in stuck.events] == [("Warning", "ProgressDeadlineExceeded")]
    stored = collaset(status=stuck.status, progressDeadlineSeconds=60)
    still = decide(observed(stored, pods), now=NOW + timedelta(seconds=90))
    assert still.status is None and still.events == ()


def _in_pre_check() -> dict[str, str]:
    return {
        lc.id_key(lc.OPERATING, UPDATE_ID): "1",
        lc.id_key(lc.OPERATION_TYPE, UPDATE_ID): lc.UPDATE,
        lc.id_key(lc.PRE_CHECK, UPDATE_ID): "1",
    }


def test_render_pod_adds_control_label_owner_and_readiness_gate() -> None:
    manifest = render_pod(
        collaset="web", namespace="ns", collaset_uid="uid-web", revision=R2, template=copy.deepcopy(V2)
    )
    assert manifest["metadata"]["generateName"] == "web-"
    assert manifest["metadata"]["labels"] == {"app": "web", lc.CONTROL: lc.CONTROL_VALUE, REVISION_LABEL: R2}
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-web"
    assert manifest["spec"]["readinessGates"] == [{"conditionType": lc.SERVICE_READY}]


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        pytest.param([], [], id="none"),
        pytest.param(
            [("UpdateFinished", "update finished", "web-1")],
            [("UpdateFinished", "pod web-1: update finished")],
            id="one",
        ),
        pytest.param(
            [
                ("BeginUpdate", "update to revision r2 begins", "web-1"),
                ("UpdateFinished", "update finished", "web-3"),
                ("BeginUpdate", "update to revision r2 begins", "web-2"),
            ],
            [
                ("BeginUpdate", "pods web-1, web-2: update to revision r2 begins"),
                ("UpdateFinished", "pod web-3: update finished"),
            ],
            id="grouped-by-reason-in-first-seen-order",
        ),
        pytest.param(
            [("ScaledIn", "deleted (scale in)", f"p{i}") for i in range(23)],
            [
                (
                    "ScaledIn",
                    "pods "
                    + ", ".join(f"p{i}" for i in range(20))
                    + ", ... and 3 more (23): deleted (scale in)",
                )
            ],
            id="names-cut-past-the-limit",
        ),
        pytest.param(
            [
                ("PodRecreating", "deleted to recreate it on revision r1", "a"),
                ("PodRecreating", "deleted to recreate it on revision r2", "b"),
            ],
            [
                ("PodRecreating", "pod a: deleted to recreate it on revision r1"),
                ("PodRecreating", "pod b: deleted to recreate it on revision r2"),
            ],
            id="same-reason-different-words-stay-apart",
        ),
    ],
)
def test_pod_events_are_grouped_per_apply(
    done: list[tuple[str, str, str]], expected: list[tuple[str, str]]
) -> None:
    from rollouts.operator.collasets_applying import group_events

    assert group_events(done) == expected
