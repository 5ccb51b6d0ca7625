"""rollouts.planning.updating: scale out/in, victim order, partition, byLabel, policies, undo, status."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from collaset_builders import (
    NEW,
    NOW,
    OLD,
    nanos,
    partition,
    pod,
    scaling_in,
    snapshot,
    spec,
    template,
    updating,
)

from hooks.planning import HookDecision, HookReason
from lifecycle import labels as lc
from lifecycle.changes import LabelChange
from rollouts.api.collasets import LAST_POD_STATUS_ANNOTATION, REVISION_LABEL, UPDATE_INCLUDED_LABEL
from rollouts.planning.updating import (
    SCALE_IN_ADAPTER,
    SCALE_IN_ID,
    UPDATE_ID,
    Action,
    BeginOperation,
    CreatePod,
    DeletePod,
    DeleteReason,
    FinishOperation,
    MarkPodToDelete,
    Plan,
    UndoOperation,
    UpdateMethod,
    UpdatePodInPlace,
    compare_templates,
    compute_update_cap,
    plan_collaset,
    view_pod,
)


def kinds(plan: Plan) -> list[tuple[str, str]]:
    """Actions as (kind, pod or revision), sorted, for compact assertions."""
    out: list[tuple[str, str]] = []
    for action in plan.actions:
        kind = type(action).__name__
        if isinstance(action, CreatePod):
            out.append((kind, action.revision))
        elif isinstance(action, BeginOperation | UndoOperation):
            out.append((f"{kind}:{action.op_type}", action.pod))
        elif isinstance(action, DeletePod):
            out.append((f"{kind}:{action.why.value}", action.pod))
        else:
            out.append((kind, action.pod))
    return sorted(out)


def condition(plan: Plan, kind: str) -> tuple[str, str, str]:
    (found,) = [c for c in plan.conditions if c.type == kind]
    return found.status, found.reason, found.message


def of(plan: Plan, kind: type[Action]) -> list[Any]:
    return [a for a in plan.actions if isinstance(a, kind)]


# --- scaling -------------------------------------------------------------------------------------


def test_scale_0_to_5_to_2_to_0() -> None:
    up = plan_collaset(snapshot(spec(5), [], current=None))
    assert kinds(up) == [("CreatePod", NEW)] * 5
    assert condition(up, "Scale") == ("False", "ScalingOut", "0/5 pods, creating 5")

    five = [pod(f"p{i}", NEW, age=100 - i) for i in range(5)]  # p4 newest
    down = plan_collaset(snapshot(spec(2), five, current=NEW))
    assert kinds(down) == [("BeginOperation:scale-in", name) for name in ("p2", "p3", "p4")]
    begin = of(down, BeginOperation)[0]
    assert begin.op_id == SCALE_IN_ID
    assert set(begin.change.set_labels) == {
        lc.id_key(lc.OPERATING, SCALE_IN_ID),
        lc.id_key(lc.OPERATION_TYPE, SCALE_IN_ID),
        lc.PREPARING_TO_DELETE,
    }
    assert condition(down, "Scale")[:2] == ("False", "ScalingIn")

    operating = [
        pod(f"p{i}", NEW, age=100 - i, labels=scaling_in("operate") if i >= 2 else None) for i in range(5)
    ]
    deleting = plan_collaset(snapshot(spec(2), operating, current=NEW))
    assert kinds(deleting) == [("DeletePod:ScaleIn", name) for name in ("p2", "p3", "p4")]

    two = [pod("p0", NEW), pod("p1", NEW), *[pod(f"p{i}", NEW, terminating=True) for i in (2, 3, 4)]]
    settled = plan_collaset(snapshot(spec(2), two, current=NEW))
    assert kinds(settled) == []
    assert condition(settled, "Scale") == ("True", "Scaled", "2 pods")

    zero = plan_collaset(snapshot(spec(0), two[:2], current=NEW))
    assert kinds(zero) == [("BeginOperation:scale-in", "p0"), ("BeginOperation:scale-in", "p1")]


@pytest.mark.parametrize(
    ("pods", "to_delete", "victims"),
    [
        pytest.param(
            [pod("old", age=300), pod("mid", age=200), pod("new", age=100)], [], ["new"], id="newest-first"
        ),
        pytest.param(
            [pod("old", age=300), pod("sick", age=200, ready=False), pod("new", age=100)],
            [],
            ["sick"],
            id="not-ready-before-newest",
        ),
        pytest.param(
            [pod("old", age=300), pod("sick", ready=False), pod("new", age=100)],
            ["old"],
            ["old"],
            id="pod-to-delete-first",
        ),
        pytest.param(
            [pod("old", age=300, labels=scaling_in("begun")), pod("sick", ready=False), pod("new", age=100)],
            [],
            ["old"],
            id="already-scaling-in-stays-victim",
        ),
        pytest.param(
            [pod("a", age=300, labels={lc.TO_DELETE: "1"}), pod("sick", ready=False), pod("new", age=100)],
            [],
            ["a"],
            id="to-delete-label-before-not-ready",
        ),
    ],
)
def test_victim_order(pods: list[Any], to_delete: list[str], victims: list[str]) -> None:
    collaset = spec(len(pods) - len(victims), scaleStrategy={"podToDelete": to_delete})
    plan = plan_collaset(snapshot(collaset, pods, current=OLD, updated=OLD))
    chosen = sorted(a.pod for a in plan.actions if isinstance(a, BeginOperation | DeletePod))
    already = [p.name for p in pods if p.during(SCALE_IN_ADAPTER)]
    assert sorted(chosen + already) == sorted(victims)


def test_scale_in_keeps_the_older_pod_after_1_2_1() -> None:
    pods = [pod("first", OLD, age=500), pod("second", OLD, age=10)]
    plan = plan_collaset(snapshot(spec(1), pods, current=OLD, updated=OLD))
    assert kinds(plan) == [("BeginOperation:scale-in", "second")]


def test_scale_in_undone_when_replicas_raised() -> None:
    pods = [pod("a", OLD), pod("b", OLD, labels=scaling_in("preparing"))]
    plan = plan_collaset(snapshot(spec(2), pods, current=OLD, updated=OLD))
    assert kinds(plan) == [("UndoOperation:scale-in", "b")]
    (undo,) = of(plan, UndoOperation)
    assert undo.change == LabelChange(
        set_labels={lc.id_key(lc.UNDO_OPERATION_TYPE, SCALE_IN_ID): lc.SCALE_IN}
    )


def test_scale_in_waits_for_operation_delay() -> None:
    since = NOW - timedelta(seconds=4)
    pods = [pod("a", OLD), pod("b", OLD, labels=scaling_in("operate", since=since))]
    collaset = spec(1, scaleStrategy={"operationDelaySeconds": 10})
    plan = plan_collaset(snapshot(collaset, pods, current=OLD, updated=OLD))
    assert kinds(plan) == []
    assert plan.requeue_after == pytest.approx(6.0)
    assert "waiting for pod b for operationDelaySeconds (6s left)" in condition(plan, "Scale")[2]


def test_scale_in_waits_for_lifecycle() -> None:
    pods = [pod("a", OLD), pod("b", OLD, labels=scaling_in("begun"))]
    plan = plan_collaset(snapshot(spec(1), pods, current=OLD, updated=OLD))
    assert kinds(plan) == []
    assert condition(plan, "Scale") == (
        "False",
        "ScalingIn",
        "2/1 pods, scaling in 1, waiting for pod b to pass PreCheck",
    )


def test_pod_to_delete_goes_to_pod_deletion_when_not_scaling_in() -> None:
    pods = [pod("a", OLD), pod("b", OLD), pod("c", OLD, labels={lc.TO_DELETE: "1"})]
    collaset = spec(3, scaleStrategy={"podToDelete": ["b", "c", "missing"]})
    plan = plan_collaset(snapshot(collaset, pods, current=OLD, updated=OLD))
    assert kinds(plan) == [("MarkPodToDelete", "b")]
    assert of(plan, MarkPodToDelete)[0].change == LabelChange(set_labels={lc.TO_DELETE: nanos(NOW)})


@pytest.mark.parametrize(
    ("pods", "to_delete", "kept"),
    [
        pytest.param([pod("a", OLD)], [], None, id="empty-list-untouched"),
        pytest.param([pod("a", OLD), pod("b", OLD)], ["a", "b"], None, id="all-still-there"),
        pytest.param([pod("a", OLD)], ["a", "gone"], ("a",), id="deleted-name-dropped"),
        pytest.param([pod("a", OLD)], ["gone", "a", "gone-too"], ("a",), id="order-kept"),
        pytest.param([pod("a", OLD)], ["never-a-pod"], (), id="unknown-name-dropped"),
        pytest.param([pod("a", OLD, terminating=True)], ["a"], None, id="terminating-pod-keeps-its-entry"),
    ],
)
def test_pod_to_delete_drops_names_of_pods_that_are_gone(
    pods: list[Any], to_delete: list[str], kept: tuple[str, ...] | None
) -> None:
    collaset = spec(len(pods), scaleStrategy={"podToDelete": to_delete})
    plan = plan_collaset(snapshot(collaset, pods, current=OLD, updated=OLD))
    assert plan.pod_to_delete == kept


def test_terminating_pods_are_replaced() -> None:
    pods = [pod("a", NEW), pod("b", NEW, terminating=True)]
    plan = plan_collaset(snapshot(spec(2), pods, current=NEW))
    assert kinds(plan) == [("CreatePod", NEW)]


@pytest.mark.parametrize(
    ("pods", "allowed", "created"),
    [
        pytest.param([pod("a", OLD)], 4, [NEW, NEW, NEW], id="under-target-new-revision"),
        pytest.param([pod("a", NEW)], 1, [OLD, OLD, OLD], id="target-reached-old-revision"),
        pytest.param([pod("a", OLD)], 2, [NEW, NEW, OLD], id="fills-target-then-old"),
        pytest.param([], 0, [OLD] * 4, id="hook-at-zero-holds-new-pods"),
    ],
)
def test_scale_out_during_rollout_respects_allowance(
    pods: list[Any], allowed: int, created: list[str]
) -> None:
    hooks = HookDecision(allowed_updated=allowed, reason=HookReason.WAITING_FOR_HOOK, message="x")
    plan = plan_collaset(snapshot(spec(4), pods), hooks=hooks)
    assert sorted(a.revision for a in of(plan, CreatePod)) == sorted(created)


# --- updating ------------------------------------------------------------------------------------


def four_old() -> list[Any]:
    return [pod(f"p{i}", OLD, age=100 - i) for i in range(4)]


@pytest.mark.parametrize(
    ("strategy", "begun"),
    [
        pytest.param({}, ["p0", "p1", "p2", "p3"], id="unset-updates-all"),
        pytest.param(partition(None), ["p0", "p1", "p2", "p3"], id="partition-nil"),
        pytest.param(partition(0), ["p0", "p1", "p2", "p3"], id="partition-0"),
        pytest.param(partition(2), ["p0", "p1"], id="partition-2"),
        pytest.param(partition(4), [], id="partition-all"),
        pytest.param(partition(9), [], id="partition-above-replicas"),
    ],
)
def test_partition_begins_updates(strategy: dict[str, Any], begun: list[str]) -> None:
    plan = plan_collaset(snapshot(spec(4, **strategy), four_old()))
    assert kinds(plan) == [("BeginOperation:update", name) for name in begun]
    for action in of(plan, BeginOperation):
        assert action.op_id == UPDATE_ID
        assert lc.PREPARING_TO_DELETE not in action.change.set_labels  # in place: the pod is not deleted


def test_partition_2_then_0() -> None:
    first = [pod("p0", NEW), pod("p1", NEW), pod("p2", OLD), pod("p3", OLD)]
    held = plan_collaset(snapshot(spec(4, **partition(2)), first))
    assert kinds(held) == []
    assert condition(held, "Update") == (
        "False",
        "Partitioned",
        "2/4 updated, partition keeps 2 on the old revision",
    )
    released = plan_collaset(snapshot(spec(4, **partition(0)), first))
    assert kinds(released) == [("BeginOperation:update", "p2"), ("BeginOperation:update", "p3")]


def test_partition_prefers_pods_whose_update_already_began() -> None:
    pods = [pod("a", OLD), pod("b", OLD, labels=updating("operate")), pod("c", OLD, labels=updating("begun"))]
    plan = plan_collaset(snapshot(spec(3, **partition(1)), pods))
    assert kinds(plan) == [("UpdatePodInPlace", "b")]


def test_raising_partition_undoes_updates_not_yet_operating() -> None:
    pods = [
        pod("a", OLD, labels=updating("operate")),
        pod("b", OLD, labels=updating("preparing")),
        pod("c", OLD, labels=updating("begun")),
        pod("d", OLD),
    ]
    plan = plan_collaset(snapshot(spec(4, **partition(4)), pods))
    # a already operates: it finishes its update; b and c are undone.
    assert kinds(plan) == [
        ("UndoOperation:update", "b"),
        ("UndoOperation:update", "c"),
        ("UpdatePodInPlace", "a"),
    ]
    assert {a.op_id for a in of(plan, UndoOperation)} == {UPDATE_ID}


def test_by_label_updates_only_labelled_pods() -> None:
    pods = [pod("a", OLD, labels={UPDATE_INCLUDED_LABEL: "true"}), pod("b", OLD), pod("c", NEW)]
    collaset = spec(3, updateStrategy={"rollingUpdate": {"byLabel": {}}})
    snap = snapshot(collaset, pods)
    assert compute_update_cap(snap) == 2
    assert kinds(plan_collaset(snap)) == [("BeginOperation:update", "a")]


def test_by_label_undoes_when_label_removed() -> None:
    pods = [pod("a", OLD, labels=updating("begun")), pod("b", OLD)]
    collaset = spec(2, updateStrategy={"rollingUpdate": {"byLabel": {}}})
    assert kinds(plan_collaset(snapshot(collaset, pods))) == [("UndoOperation:update", "a")]


def test_hook_allowance_caps_updates() -> None:
    hooks = HookDecision(
        allowed_updated=1, reason=HookReason.WAITING_FOR_PODS, message="0/1 new pods available"
    )
    plan = plan_collaset(snapshot(spec(4, **partition(0)), four_old()), hooks=hooks)
    assert kinds(plan) == [("BeginOperation:update", "p0")]


def test_hook_failure_stops_new_updates_but_lets_operating_ones_finish() -> None:
    hooks = HookDecision(
        allowed_updated=4, reason=HookReason.HOOK_FAILED, message="pre (0) job x failed", stopped=True
    )
    pods = [pod("a", OLD, labels=updating("operate")), pod("b", OLD), pod("c", OLD)]
    plan = plan_collaset(snapshot(spec(3), pods), hooks=hooks)
    assert kinds(plan) == [("UpdatePodInPlace", "a")]
    assert condition(plan, "Failed") == ("True", "HookFailed", "pre (0) job x failed")
    assert condition(plan, "Update")[1] == "HookFailed"


def test_paused_begins_nothing() -> None:
    plan = plan_collaset(snapshot(spec(4, paused=True), four_old()))
    assert kinds(plan) == []
    assert condition(plan, "Update") == ("False", "Paused", "0/4 updated, paused")


def test_in_place_update_patch() -> None:
    new = template("nginx:2.0", labels={"app": "web", "tier": "front"})
    old = template("nginx:1.0", labels={"app": "web", "legacy": "yes"})
    pods = [pod("a", OLD, labels=updating("operate"), image_id="sha256:one")]
    plan = plan_collaset(snapshot(spec(1), pods, templates={OLD: old, NEW: new}))
    (action,) = of(plan, UpdatePodInPlace)
    assert action.revision == NEW
    assert action.patch["spec"] == {"containers": [{"name": "app", "image": "nginx:2.0"}]}
    assert action.patch["metadata"]["labels"] == {"tier": "front", "legacy": None, REVISION_LABEL: NEW}
    recorded = json.loads(action.patch["metadata"]["annotations"][LAST_POD_STATUS_ANNOTATION])
    assert recorded == {"containerStates": {"app": {"latestImage": "nginx:2.0", "lastImageID": "sha256:one"}}}
    assert action.resource_version == "1"


@pytest.mark.parametrize(
    ("policy", "new_template", "begin_marks_delete", "operate"),
    [
        pytest.param(
            "InPlaceIfPossible", template("nginx:2.0"), False, "UpdatePodInPlace", id="ifpossible-image"
        ),
        pytest.param(
            "InPlaceIfPossible", template("nginx:2.0", env="x"), True, "DeletePod", id="ifpossible-env"
        ),
        pytest.param("InPlaceOnly", template("nginx:2.0"), False, "UpdatePodInPlace", id="only-image"),
        pytest.param("Recreate", template("nginx:2.0"), True, "DeletePod", id="recreate-image"),
    ],
)
def test_update_policy(
    policy: str, new_template: dict[str, Any], begin_marks_delete: bool, operate: str
) -> None:
    templates = {OLD: template("nginx:1.0"), NEW: new_template}
    collaset = spec(2, updateStrategy={"podUpdatePolicy": policy})
    pods = [pod("a", OLD), pod("b", OLD, labels=updating("operate"))]
    plan = plan_collaset(snapshot(collaset, pods, templates=templates))
    (begin,) = of(plan, BeginOperation)
    assert (lc.PREPARING_TO_DELETE in begin.change.set_labels) is begin_marks_delete
    assert [type(a).__name__ for a in plan.actions if not isinstance(a, BeginOperation)] == [operate]
    if operate == "DeletePod":
        assert of(plan, DeletePod)[0].why == DeleteReason.RECREATE


def test_in_place_only_reports_impossible_change() -> None:
    templates = {OLD: template("nginx:1.0"), NEW: template("nginx:2.0", env="x")}
    collaset = spec(2, updateStrategy={"podUpdatePolicy": "InPlaceOnly"})
    pods = [pod("a", OLD), pod("b", OLD, labels=updating("begun"))]
    plan = plan_collaset(snapshot(collaset, pods, templates=templates))
    assert kinds(plan) == [("UndoOperation:update", "b")]
    status, reason, message = condition(plan, "Update")
    assert (status, reason) == ("False", "UpdateFailed")
    assert "InPlaceOnly" in message and "use InPlaceIfPossible or Recreate" in message


def test_unknown_old_template_recreates() -> None:
    pods = [pod("a", "web-pruned", labels=updating("operate"))]
    plan = plan_collaset(snapshot(spec(1), pods))
    assert kinds(plan) == [("DeletePod:RecreateUpdate", "a")]


def test_update_waits_for_operation_delay() -> None:
    pods = [pod("a", OLD, labels=updating("operate", since=NOW - timedelta(seconds=1)))]
    collaset = spec(1, updateStrategy={"operationDelaySeconds": 5})
    plan = plan_collaset(snapshot(collaset, pods))
    assert kinds(plan) == []
    assert plan.requeue_after == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("annotations", "image", "status_image", "image_id", "finished"),
    [
        pytest.param({}, "nginx:2.0", "nginx:1.0", "sha256:old", True, id="no-record"),
        pytest.param(None, "nginx:2.0", "nginx:2.0", "sha256:old", True, id="reported-image"),
        pytest.param(None, "nginx:2.0", "docker.io/nginx:2.0", "sha256:new", True, id="new-image-id"),
        pytest.param(None, "nginx:2.0", "nginx:1.0", "sha256:old", False, id="still-old"),
        pytest.param(None, "nginx:2.0", "docker.io/nginx:1.0", "", False, id="no-image-id-yet"),
        pytest.param(None, "nginx:3.0", "nginx:3.0", "sha256:new", False, id="spec-moved-on"),
    ],
)
def test_finish_in_place_update(
    annotations: dict[str, str] | None, image: str, status_image: str, image_id: str, finished: bool
) -> None:
    record = {"containerStates": {"app": {"latestImage": "nginx:2.0", "lastImageID": "sha256:old"}}}
    notes = {LAST_POD_STATUS_ANNOTATION: json.dumps(record)} if annotations is None else annotations
    labels = {**updating("operate"), UPDATE_INCLUDED_LABEL: "true"}
    pods = [
        pod(
            "a",
            NEW,
            labels=labels,
            annotations=notes,
            image=image,
            status_image=status_image,
            image_id=image_id,
        )
    ]
    plan = plan_collaset(snapshot(spec(1), pods))
    if finished:
        (finish,) = of(plan, FinishOperation)
        assert finish.change == LabelChange(
            remove_labels=frozenset({lc.id_key(lc.OPERATING, UPDATE_ID), UPDATE_INCLUDED_LABEL})
        )
        assert finish.annotations == ({LAST_POD_STATUS_ANNOTATION: None} if notes else {})
    else:
        assert kinds(plan) == []
        assert "waiting for pod a to run the new images" in condition(plan, "Update")[2]


def test_begun_update_on_a_pod_already_on_the_target_is_undone() -> None:
    pods = [pod("a", NEW, labels=updating("begun"))]
    assert kinds(plan_collaset(snapshot(spec(1), pods))) == [("UndoOperation:update", "a")]


def test_scale_in_victims_are_not_updated() -> None:
    pods = [pod("a", OLD, age=300), pod("b", OLD, age=100)]
    plan = plan_collaset(snapshot(spec(1), pods))
    assert kinds(plan) == [("BeginOperation:scale-in", "b"), ("BeginOperation:update", "a")]
    assert set(plan.label_changes()) == {"a", "b"}


def test_update_and_scale_in_ids_are_distinct_on_one_pod() -> None:
    labels = {**updating("begun"), **scaling_in("begun")}
    pods = [pod("a", OLD), pod("b", OLD, age=1, labels=labels)]
    plan = plan_collaset(snapshot(spec(1), pods))
    assert kinds(plan) == [("BeginOperation:update", "a")]  # b scales in; its update labels stay untouched


@pytest.mark.parametrize(
    ("stage", "wait"),
    [
        pytest.param("begun", "to pass PreCheck", id="pre-check"),
        pytest.param("pre-checked", "to enter Preparing", id="pre-checked"),
        pytest.param(
            "preparing", "to finish Preparing (readiness gate off, protection finalizers gone)", id="prep"
        ),
    ],
)
def test_update_condition_says_what_it_waits_for(stage: str, wait: str) -> None:
    pods = [pod(f"web-{i}", NEW) for i in range(3)] + [pod("web-abc", OLD, labels=updating(stage))]
    pods += [pod(f"web-x{i}", OLD) for i in range(6)]
    hooks = HookDecision(
        allowed_updated=4, reason=HookReason.WAITING_FOR_PODS, message="3/4 new pods available"
    )
    plan = plan_collaset(snapshot(spec(10), pods), hooks=hooks)
    assert condition(plan, "Update") == (
        "False",
        "Updating",
        f"3/10 updated, waiting for pod web-abc {wait}; WaitingForPods: 3/4 new pods available",
    )


def test_update_condition_shows_running_hook() -> None:
    pods = [pod("a", NEW), pod("b", NEW), pod("c", OLD), pod("d", OLD)]
    hooks = HookDecision(
        allowed_updated=2, reason=HookReason.WAITING_FOR_HOOK, message="smoke (50%) running job j"
    )
    plan = plan_collaset(snapshot(spec(4), pods), hooks=hooks)
    assert condition(plan, "Update") == ("False", "WaitingForHook", "2/4 updated; smoke (50%) running job j")


# --- status --------------------------------------------------------------------------------------


def test_counts() -> None:
    pods = [
        pod("a", NEW),
        pod("b", NEW, available=False),
        pod("c", NEW, ready=False, available=False),
        pod("d", OLD, labels=updating("begun")),
        pod("e", OLD, labels=scaling_in("begun"), available=False),
        pod("f", OLD, terminating=True),
    ]
    counts = plan_collaset(snapshot(spec(5), pods)).counts
    assert counts.replicas == 5
    assert (counts.ready, counts.available) == (4, 2)
    assert (counts.updated, counts.updated_ready, counts.updated_available) == (3, 2, 1)
    assert counts.operating == 2


@pytest.mark.parametrize(
    ("pods", "hooks_done", "current"),
    [
        pytest.param([pod("a", NEW), pod("b", NEW)], True, NEW, id="all-updated-ready"),
        pytest.param([pod("a", NEW), pod("b", NEW)], False, OLD, id="last-hook-pending"),
        pytest.param([pod("a", NEW), pod("b", NEW, ready=False)], True, OLD, id="not-ready"),
        pytest.param([pod("a", NEW), pod("b", OLD)], True, OLD, id="partition"),
    ],
)
def test_current_revision_moves_only_when_rollout_done(
    pods: list[Any], hooks_done: bool, current: str
) -> None:
    reason = HookReason.HOOKS_SUCCEEDED if hooks_done else HookReason.WAITING_FOR_HOOK
    hooks = HookDecision(allowed_updated=2, reason=reason, message="")
    plan = plan_collaset(snapshot(spec(2, **partition(1)), pods), hooks=hooks)
    assert plan.current_revision == current
    if current == NEW:
        assert condition(plan, "Update") == ("True", "Updated", f"2/2 updated to revision {NEW}")


def test_first_revision_is_current() -> None:
    plan = plan_collaset(snapshot(spec(1), [], current=None))
    assert plan.current_revision == NEW


@pytest.mark.parametrize(
    ("old", "new", "method"),
    [
        pytest.param(template("a"), template("b"), UpdateMethod.IN_PLACE, id="image"),
        pytest.param(
            template(labels={"x": "1"}), template(labels={"x": "2"}), UpdateMethod.IN_PLACE, id="labels"
        ),
        pytest.param(template(env="1"), template(env="2"), UpdateMethod.RECREATE, id="env"),
        pytest.param(
            template(),
            {
                **template(),
                "spec": {"containers": [*template()["spec"]["containers"], {"name": "side", "image": "s"}]},
            },
            UpdateMethod.RECREATE,
            id="container-added",
        ),
        pytest.param(
            template(),
            {**template(), "spec": {**template()["spec"], "nodeSelector": {"a": "b"}}},
            UpdateMethod.RECREATE,
            id="pod-spec-field",
        ),
        pytest.param(
            template(),
            {**template(), "metadata": {**template()["metadata"], "annotations": {"a": "b"}}},
            UpdateMethod.IN_PLACE,
            id="annotations",
        ),
    ],
)
def test_compare_templates(old: dict[str, Any], new: dict[str, Any], method: UpdateMethod) -> None:
    assert compare_templates(old=old, new=new) == method


def test_view_pod() -> None:
    raw: dict[str, Any] = {
        "metadata": {
            "name": "web-1",
            "uid": "u1",
            "resourceVersion": "42",
            "creationTimestamp": "2024-05-01T11:00:00Z",
            "labels": {REVISION_LABEL: NEW, lc.SERVICE_AVAILABLE: "1", lc.TO_DELETE: "1"},
            "annotations": {"a": "b"},
        },
        "spec": {"containers": [{"name": "app", "image": "nginx:2"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "image": "nginx:2", "imageID": "sha256:x"}],
        },
    }
    view = view_pod(raw)
    assert (view.name, view.uid, view.resource_version, view.revision) == ("web-1", "u1", "42", NEW)
    assert view.ready and view.available and view.to_delete and not view.terminating
    assert view.created == NOW - timedelta(hours=1)
    assert (view.images, view.status_images, view.image_ids) == (
        {"app": "nginx:2"},
        {"app": "nginx:2"},
        {"app": "sha256:x"},
    )
    assert view_pod({**raw, "metadata": {**raw["metadata"], "deletionTimestamp": "x"}}).terminating
    assert view_pod({**raw, "status": {"phase": "Failed"}}).terminating


def test_pods_marked_to_delete_are_not_updated() -> None:
    pods = [pod("a", OLD, labels={lc.TO_DELETE: "1"}), pod("b", OLD)]
    assert kinds(plan_collaset(snapshot(spec(2), pods))) == [("BeginOperation:update", "b")]


def test_update_waits_while_a_previous_undo_is_being_cleaned_up() -> None:
    pods = [pod("a", OLD, labels={lc.id_key(lc.UNDO_OPERATION_TYPE, UPDATE_ID): lc.UPDATE})]
    plan = plan_collaset(snapshot(spec(1), pods))
    assert kinds(plan) == []
    message = condition(plan, "Update")[2]
    assert message.startswith(
        "0/1 updated, waiting for pod a before update can begin (operatingID collaset-update"
    )


def test_label_changes_are_merged_per_pod() -> None:
    first = LabelChange(set_labels={"a": "1"})
    second = LabelChange(set_labels={"b": "2"}, remove_labels=frozenset({"a"}))
    plan = Plan(
        actions=(
            MarkPodToDelete(pod="p", resource_version="1", change=first),
            UndoOperation(pod="p", resource_version="1", op_id="x", op_type="update", change=second),
        ),
        counts=plan_collaset(snapshot(spec(0), [])).counts,
        current_revision=NEW,
        conditions=(),
    )
    assert plan.label_changes() == {"p": LabelChange(set_labels={"b": "2"}, remove_labels=frozenset({"a"}))}


def test_a_views_remembered_answers_follow_its_labels() -> None:
    """PodView remembers during/operating (views are reused per pod version); a view made
    from another with other labels must not inherit them."""
    import dataclasses

    from rollouts.planning.updating import UPDATE_ADAPTER

    idle = pod("a")
    assert not idle.during(UPDATE_ADAPTER) and not idle.operating(UPDATE_ADAPTER)
    begun = dataclasses.replace(idle, labels={**idle.labels, **updating("PreCheck")})
    assert begun.during(UPDATE_ADAPTER)
    assert not idle.during(UPDATE_ADAPTER)
