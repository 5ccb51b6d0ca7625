"""rollouts.status.view_rollout / describe_lifecycle: what each pod and hook looks like in the view."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import labels as lc
from rollouts.status import HookRow, PodRow, describe_lifecycle, view_pod, view_rollout
from tests.unit.status.builders import NEW, OLD, collaset, condition, hook, in_phase, pod, rolling


@pytest.mark.parametrize(
    ("body", "lifecycle"),
    [
        pytest.param(pod("a"), "ServiceAvailable", id="available"),
        pytest.param(pod("a", available=False), "NotAvailable", id="waiting-for-finalizers"),
        pytest.param(pod("a", phase_labels=in_phase()), "update Begun", id="begun"),
        pytest.param(pod("a", phase_labels=in_phase(lc.PRE_CHECK)), "update PreCheck", id="precheck"),
        pytest.param(
            pod("a", phase_labels=in_phase(lc.PRE_CHECK, lc.PRE_CHECKED, lc.PREPARING)),
            "update Preparing",
            id="preparing",
        ),
        pytest.param(
            pod("a", phase_labels=in_phase(lc.PREPARING, lc.OPERATE)), "update Operating", id="operating"
        ),
        pytest.param(
            pod("a", phase_labels=in_phase(lc.OPERATED, lc.POST_CHECK)), "update PostCheck", id="postcheck"
        ),
        pytest.param(
            pod("a", phase_labels=in_phase(lc.OPERATED, lc.COMPLETING)), "update Completing", id="completing"
        ),
        pytest.param(
            pod(
                "a",
                phase_labels={
                    **in_phase(lc.PRE_CHECK),
                    lc.id_key(lc.UNDO_OPERATION_TYPE, "collaset-update"): "update",
                },
            ),
            "ServiceAvailable",
            id="undone-operation-is-not-live",
        ),
        pytest.param(
            pod(
                "a",
                phase_labels={
                    **in_phase(lc.PRE_CHECK),
                    lc.id_key(lc.OPERATING, "collaset-scale-in"): "1",
                    lc.id_key(lc.OPERATION_TYPE, "collaset-scale-in"): "scale-in",
                },
            ),
            "scale-in Begun, update PreCheck",
            id="two-operations",
        ),
        pytest.param(pod("a", deleting=True), "Terminating", id="terminating"),
        pytest.param(
            pod("a", phase_labels={lc.PREPARING: "1"}),
            f"invalid lifecycle labels (invalid label {lc.PREPARING})",
            id="invalid-label",
        ),
    ],
)
def test_describe_lifecycle(body: dict[str, Any], lifecycle: str) -> None:
    assert describe_lifecycle(body) == lifecycle


@pytest.mark.parametrize(
    ("body", "row"),
    [
        pytest.param(
            pod("a"),
            PodRow(
                name="a", revision=NEW, updated=True, lifecycle="ServiceAvailable", ready=True, available=True
            ),
            id="updated-available",
        ),
        pytest.param(
            pod("b", revision=OLD, ready=False, available=False, phase_labels=in_phase(lc.PREPARING)),
            PodRow(
                name="b",
                revision=OLD,
                updated=False,
                lifecycle="update Preparing",
                ready=False,
                available=False,
            ),
            id="old-preparing",
        ),
        pytest.param(
            pod("c", deleting=True),
            PodRow(
                name="c", revision=NEW, updated=True, lifecycle="Terminating", ready=True, available=False
            ),
            id="terminating-is-not-available",
        ),
    ],
)
def test_view_pod(body: dict[str, Any], row: PodRow) -> None:
    assert view_pod(body, updated_revision=NEW) == row


def test_view_keeps_only_the_collasets_pods_sorted() -> None:
    pods = [pod("web-c"), pod("web-a"), pod("other", owner="someone-else"), pod("web-b", revision=OLD)]
    view = view_rollout(rolling(updated=2, available=2), pods)
    assert [p.name for p in view.pods] == ["web-a", "web-b", "web-c"]
    assert [p.updated for p in view.pods] == [True, False, True]


@pytest.mark.parametrize(
    ("body", "waiting"),
    [
        pytest.param(collaset(), "", id="complete-waits-for-nothing"),
        pytest.param(
            rolling(updated=1, available=0),
            "1/4 updated, waiting for pod web-b to pass PreCheck",
            id="update-message",
        ),
        pytest.param(
            collaset(generation=3), "waiting for the rollout spec update to be observed", id="not-observed"
        ),
        pytest.param(
            rolling(
                updated=1,
                available=1,
                paused=True,
                conditions=[condition("Update", "False", "Paused", "1/4 updated, paused")],
            ),
            "1/4 updated, paused",
            id="paused-message",
        ),
        pytest.param(
            rolling(updated=1, available=1, paused=True, conditions=[]),
            "paused (spec.paused)",
            id="paused-without-condition",
        ),
        pytest.param(
            rolling(updated=2, available=2, conditions=[condition("Failed", "True", "HookFailed", "x")]),
            "",
            id="failed-waits-for-nothing",
        ),
    ],
)
def test_waiting_reason(body: dict[str, Any], waiting: str) -> None:
    assert view_rollout(body, []).waiting == waiting


@pytest.mark.parametrize(
    ("hooks", "running"),
    [
        pytest.param([], None, id="no-hooks"),
        pytest.param(
            [
                hook("pre", 0, "Succeeded", job="j0"),
                hook("mid", 2, "Running", job="j1"),
                hook("end", 4, "Pending"),
            ],
            HookRow(name="mid", point=2, phase="Running", job="j1"),
            id="the-running-one",
        ),
        pytest.param(
            [hook("pre", 0, "Succeeded", job="j0"), hook("end", 4, "Pending")],
            HookRow(name="end", point=4, phase="Pending"),
            id="else-the-next-pending",
        ),
        pytest.param([hook("pre", 0, "Succeeded", job="j0")], None, id="all-done"),
        pytest.param([hook("old", 0, "Running", job="j", revision=OLD)], None, id="other-revision-ignored"),
    ],
)
def test_running_hook(hooks: list[dict[str, Any]], running: HookRow | None) -> None:
    assert view_rollout(rolling(updated=1, available=1, hooks=hooks), []).running_hook == running


def test_hooks_are_ordered_by_point_then_name() -> None:
    hooks = [
        hook("z", 4, "Pending"),
        hook("b", 2, "Pending"),
        hook("a", 2, "Pending"),
        hook("pre", 0, "Running"),
    ]
    view = view_rollout(rolling(updated=0, available=0, hooks=hooks), [])
    assert [h.name for h in view.hooks] == ["pre", "a", "b", "z"]
