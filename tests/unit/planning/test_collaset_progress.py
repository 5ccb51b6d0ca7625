"""rollouts.operator.collasets_deciding: progress deadline, condition Events, rule rejections."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from collaset_builders import NOW

from hooks.models import HookPhase, HookStatus
from lifecycle.schema import Condition
from lifecycle.states import Stage
from rollouts.api.collasets import CollaSetStatus
from rollouts.operator.collasets_deciding import (
    Progress,
    condition_events,
    made_progress,
    read_rejections,
    track_progress,
)
from rollouts.planning.updating import Rejection

STAMP = "2024-05-01T12:00:00Z"
EARLIER = "2024-05-01T11:58:00Z"  # 120s before NOW


def status(**fields: Any) -> CollaSetStatus:
    base: dict[str, Any] = {
        "observedGeneration": 2,
        "currentRevision": "r1",
        "updatedRevision": "r2",
        "replicas": 4,
        "readyReplicas": 4,
        "availableReplicas": 3,
        "updatedReplicas": 1,
        "updatedReadyReplicas": 1,
        "updatedAvailableReplicas": 0,
    }
    return CollaSetStatus.model_validate({**base, **fields})


def hook(phase: HookPhase) -> dict[str, Any]:
    return HookStatus(name="smoke", revision="r2", point=2, phase=phase).model_dump(
        by_alias=True, mode="json"
    )


@pytest.mark.parametrize(
    ("new", "progressed"),
    [
        pytest.param(status(), False, id="same"),
        pytest.param(status(observedGeneration=3), True, id="spec-changed"),
        pytest.param(status(updatedRevision="r3"), True, id="new-revision"),
        pytest.param(status(currentRevision="r2"), True, id="rollout-done"),
        pytest.param(status(updatedReplicas=2, replicas=4), True, id="more-updated"),
        pytest.param(status(updatedReadyReplicas=2, updatedReplicas=2), True, id="more-updated-ready"),
        pytest.param(status(updatedAvailableReplicas=1), True, id="more-updated-available"),
        pytest.param(status(availableReplicas=4), True, id="more-available"),
        pytest.param(status(availableReplicas=2), False, id="fewer-available"),
        pytest.param(status(readyReplicas=3), False, id="fewer-ready"),
        pytest.param(status(replicas=3, updatedReplicas=1), True, id="old-pod-gone-scale-toward-3"),
        pytest.param(status(replicas=5), False, id="surplus-pod-not-toward-desired"),
        pytest.param(status(hooks=[hook(HookPhase.RUNNING)]), True, id="hook-advanced"),
    ],
)
def test_made_progress(new: CollaSetStatus, progressed: bool) -> None:
    old = status(hooks=[hook(HookPhase.PENDING)]) if new.hooks else status()
    assert made_progress(old=old, new=new, desired=3 if new.replicas in (3, 5) else 4) is progressed


def cond(kind: str, state: str, reason: str, message: str = "") -> Condition:
    return Condition(type=kind, status=state, reason=reason, message=message)  # type: ignore[arg-type]


UPDATING = (
    cond("Scale", "True", "Scaled", "4 pods"),
    cond("Update", "False", "Updating", "1/4 updated, waiting for pod web-b to pass PreCheck"),
)


@pytest.mark.parametrize(
    ("old", "new", "conditions", "deadline", "expected"),
    [
        pytest.param(
            None, status(), UPDATING, 60, ("True", "Progressing", STAMP), id="first-status-starts-clock"
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            UPDATING,
            300,
            ("True", "Progressing", EARLIER),
            id="within-deadline",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            UPDATING,
            120,
            ("False", "ProgressDeadlineExceeded", EARLIER),
            id="deadline-reached",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(updatedReplicas=2),
            UPDATING,
            60,
            ("True", "Progressing", STAMP),
            id="progress-restarts-the-clock",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            (cond("Scale", "True", "Scaled"), cond("Update", "True", "Updated")),
            60,
            ("True", "Complete", EARLIER),
            id="complete-never-exceeds",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            (cond("Scale", "True", "Scaled"), cond("Update", "False", "Partitioned")),
            60,
            ("True", "Complete", EARLIER),
            id="partition-reached",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            (cond("Scale", "True", "Scaled"), cond("Update", "False", "Paused")),
            60,
            ("Unknown", "Paused", EARLIER),
            id="paused",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            (cond("Scale", "False", "ScalingOut", "3/4 pods, creating 1"), cond("Update", "True", "Updated")),
            60,
            ("False", "ProgressDeadlineExceeded", EARLIER),
            id="stuck-scale",
        ),
        pytest.param(
            status(lastProgressTime=EARLIER),
            status(),
            UPDATING,
            None,
            (None, None, EARLIER),
            id="no-deadline-no-condition",
        ),
        pytest.param(status(), status(), UPDATING, 60, ("True", "Progressing", STAMP), id="no-record-yet"),
    ],
)
def test_track_progress(
    old: CollaSetStatus | None,
    new: CollaSetStatus,
    conditions: tuple[Condition, ...],
    deadline: int | None,
    expected: tuple[str | None, str | None, str],
) -> None:
    progress = track_progress(
        old=old, new=new, conditions=conditions, desired=4, deadline_seconds=deadline, now=NOW
    )
    condition = progress.condition
    got = (
        condition.status if condition else None,
        condition.reason if condition else None,
        progress.last_progress_time,
    )
    assert got == expected
    if condition is not None:
        assert condition.type == "Progressing"


def test_exceeded_message_says_what_the_rollout_waits_for() -> None:
    progress = track_progress(
        old=status(lastProgressTime=EARLIER),
        new=status(),
        conditions=UPDATING,
        desired=4,
        deadline_seconds=100,
        now=NOW,
    )
    assert progress.condition is not None
    assert progress.condition.message == (
        f"no progress for more than 100s (progressDeadlineSeconds) since {EARLIER}: "
        "1/4 updated, waiting for pod web-b to pass PreCheck"
    )
    assert progress.requeue_after is None


@pytest.mark.parametrize(
    ("elapsed", "deadline", "requeue"),
    [
        pytest.param(0, 60, 61.0, id="fresh"),
        pytest.param(50, 60, 11.0, id="ten-left"),
    ],
)
def test_requeue_until_the_deadline(elapsed: int, deadline: int, requeue: float) -> None:
    last = (NOW - timedelta(seconds=elapsed)).strftime("%Y-%m-%dT%H:%M:%SZ")
    progress = track_progress(
        old=status(lastProgressTime=last),
        new=status(),
        conditions=UPDATING,
        desired=4,
        deadline_seconds=deadline,
        now=NOW,
    )
    assert progress == Progress(
        last_progress_time=last, condition=progress.condition, requeue_after=pytest.approx(requeue)
    )


def with_conditions(*conditions: Condition, **fields: Any) -> CollaSetStatus:
    return status(**fields).model_copy(update={"conditions": list(conditions)})


EXCEEDED = cond("Progressing", "False", "ProgressDeadlineExceeded", "no progress for more than 60s")
PROGRESSING = cond("Progressing", "True", "Progressing", "rolling out")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, with_conditions(EXCEEDED), [], id="first-status-no-events"),
        pytest.param(
            with_conditions(PROGRESSING),
            with_conditions(EXCEEDED),
            [("Warning", "ProgressDeadlineExceeded", "no progress for more than 60s")],
            id="deadline-exceeded",
        ),
        pytest.param(with_conditions(EXCEEDED), with_conditions(EXCEEDED), [], id="still-exceeded-no-repeat"),
        pytest.param(
            with_conditions(EXCEEDED),
            with_conditions(PROGRESSING),
            [("Normal", "ProgressResumed", "rolling out")],
            id="resumed",
        ),
        pytest.param(
            with_conditions(cond("Scale", "False", "ScalingOut")),
            with_conditions(cond("Scale", "True", "Scaled", "4 pods")),
            [("Normal", "ScaleCompleted", "4 pods")],
            id="scaled",
        ),
        pytest.param(
            with_conditions(),
            with_conditions(currentRevision="r2"),
            [("Normal", "RolloutCompleted", "all 4 pods on revision r2 (from r1)")],
            id="rollout-completed",
        ),
        pytest.param(
            with_conditions(currentRevision=None, updatedRevision="r1"),
            with_conditions(currentRevision="r1", updatedRevision="r1"),
            [],
            id="first-revision-is-no-rollout",
        ),
    ],
)
def test_condition_events(
    old: CollaSetStatus | None, new: CollaSetStatus, expected: list[tuple[str, str, str]]
) -> None:
    assert [(e.type, e.reason, e.message) for e in condition_events(old=old, new=new)] == expected


def rule(
    name: str, details: list[dict[str, Any]], *, generation: int = 1, observed: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": generation},
        "status": {"observedGeneration": observed, "details": details},
    }


def detail(
    pod: str, *infos: tuple[str, str], stage: str = "PreCheck", passed: bool = False
) -> dict[str, Any]:
    return {
        "name": pod,
        "stage": stage,
        "passed": passed,
        "rejectInfo": [{"ruleName": r, "reason": why} for r, why in infos],
    }


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        pytest.param([], {}, id="no-rules"),
        pytest.param(
            [rule("budget", [detail("a", ("max", "blocked")), detail("b", passed=True)])],
            {"a": [Rejection(ptr="budget", rule="max", stage=Stage.PRE_CHECK, reason="blocked")]},
            id="rejected-only",
        ),
        pytest.param(
            [rule("budget", [detail("a", ("max", "blocked"))], generation=2, observed=1)],
            {},
            id="stale-generation-skipped",
        ),
        pytest.param(
            [
                rule("one", [detail("a", ("x", "no"), stage="PostCheck")]),
                rule("two", [detail("a", ("y", "nope"))]),
            ],
            {
                "a": [
                    Rejection(ptr="one", rule="x", stage=Stage.POST_CHECK, reason="no"),
                    Rejection(ptr="two", rule="y", stage=Stage.PRE_CHECK, reason="nope"),
                ]
            },
            id="several-rules-and-stages",
        ),
        pytest.param(
            [rule("odd", [detail("a", ("x", "no"), stage="Elsewhere"), {"name": "b"}, "garbage"])],
            {},
            id="malformed-entries-skipped",
        ),
        pytest.param([{"metadata": {"name": "fresh"}}], {}, id="no-status-yet"),
    ],
)
def test_read_rejections(rules: list[Any], expected: dict[str, list[Rejection]]) -> None:
    assert read_rejections(rules) == expected
