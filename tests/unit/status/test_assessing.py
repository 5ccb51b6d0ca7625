"""rollouts.status.assess: complete, failed, deadline exceeded or progressing, like kubectl rollout status."""

from __future__ import annotations

from typing import Any

import pytest

from rollouts.status import EXIT_CODES, Outcome, assess
from tests.unit.status.builders import NEW, OLD, collaset, condition, hook, rolling

FAILED = condition("Failed", "True", "HookFailed", "hook smoke (50%) failed: job web-smoke-1 failed")
NO_FAILURE = condition("Failed", "False", "NoFailure")
DEADLINE = condition("Progressing", "False", "ProgressDeadlineExceeded", "no progress for 60s")
PARTITIONED = condition(
    "Update", "False", "Partitioned", "2/4 updated, partition keeps 2 on the old revision"
)


@pytest.mark.parametrize(
    ("body", "outcome", "says"),
    [
        pytest.param(collaset(), Outcome.COMPLETE, "rollout complete: 4 of 4", id="complete"),
        pytest.param(
            collaset(hooks=[hook("pre", 0, "Succeeded"), hook("end", 4, "Failed")]),
            Outcome.COMPLETE,
            "rollout complete",
            id="complete-with-an-ignored-failed-hook",
        ),
        pytest.param(
            collaset(replicas=0, live=0, updated=0), Outcome.COMPLETE, "0 of 0", id="complete-scaled-to-zero"
        ),
        pytest.param(
            collaset(status=False), Outcome.PROGRESSING, "spec update to be observed", id="no-status"
        ),
        pytest.param(
            collaset(generation=3, observed=2),
            Outcome.PROGRESSING,
            "to be observed",
            id="generation-not-observed",
        ),
        pytest.param(
            collaset(observed=None), Outcome.PROGRESSING, "to be observed", id="observed-generation-missing"
        ),
        pytest.param(
            rolling(updated=2, available=1),
            Outcome.PROGRESSING,
            "1 of 4 updated pods available",
            id="rolling",
        ),
        pytest.param(
            collaset(current=OLD), Outcome.PROGRESSING, "waiting", id="counts-done-but-revision-not-current"
        ),
        pytest.param(
            collaset(hooks=[hook("end", 4, "Running", job="web-end-1")]),
            Outcome.PROGRESSING,
            "waiting",
            id="last-hook-running",
        ),
        pytest.param(
            collaset(hooks=[hook("end", 4, "Pending")]),
            Outcome.PROGRESSING,
            "waiting",
            id="last-hook-pending",
        ),
        pytest.param(
            collaset(hooks=[hook("end", 4, "Running", revision=OLD)]),
            Outcome.COMPLETE,
            "rollout complete",
            id="hooks-of-another-revision-do-not-count",
        ),
        pytest.param(collaset(live=5), Outcome.PROGRESSING, "waiting", id="scaling-in-leftover"),
        pytest.param(
            collaset(updated_revision=None, current=None), Outcome.PROGRESSING, "", id="no-revision-yet"
        ),
        pytest.param(
            rolling(updated=2, available=2, conditions=[FAILED]),
            Outcome.FAILED,
            "rollout failed: hook smoke (50%) failed",
            id="abort-hook-failed",
        ),
        pytest.param(
            rolling(updated=2, available=2, conditions=[NO_FAILURE]),
            Outcome.PROGRESSING,
            "waiting",
            id="failed-condition-false",
        ),
        pytest.param(
            rolling(updated=1, available=1, conditions=[DEADLINE]),
            Outcome.DEADLINE_EXCEEDED,
            "progress deadline exceeded: no progress for 60s",
            id="deadline",
        ),
        pytest.param(
            rolling(updated=1, available=1, conditions=[condition("Progressing", "True", "Progressing")]),
            Outcome.PROGRESSING,
            "waiting",
            id="progressing-true",
        ),
        pytest.param(
            rolling(updated=1, available=1, conditions=[FAILED, DEADLINE]),
            Outcome.FAILED,
            "rollout failed",
            id="failed-wins-over-deadline",
        ),
        pytest.param(
            rolling(updated=1, available=1, generation=5, observed=4, conditions=[FAILED]),
            Outcome.FAILED,
            "rollout failed",
            id="failed-even-before-the-new-generation-is-observed",
        ),
        pytest.param(
            rolling(updated=2, available=2, conditions=[PARTITIONED]),
            Outcome.COMPLETE,
            "partitioned rollout complete: 2 of 4 pods",
            id="partitioned",
        ),
        pytest.param(
            rolling(
                updated=2,
                available=2,
                conditions=[
                    condition("Update", "False", "WaitingForPartition", "hook mid (3) beyond partition")
                ],
            ),
            Outcome.COMPLETE,
            "partitioned rollout complete",
            id="partition-below-the-next-hook",
        ),
        pytest.param(
            rolling(updated=2, available=1, conditions=[PARTITIONED]),
            Outcome.PROGRESSING,
            "waiting",
            id="partitioned-but-a-pod-not-available-yet",
        ),
        pytest.param(
            rolling(updated=2, available=2, operating=1, conditions=[PARTITIONED]),
            Outcome.PROGRESSING,
            "waiting",
            id="partitioned-but-a-pod-still-operating",
        ),
        pytest.param(
            rolling(updated=2, available=2, conditions=[PARTITIONED], hooks=[hook("mid", 2, "Running")]),
            Outcome.PROGRESSING,
            "waiting",
            id="partitioned-but-the-hook-at-the-partition-runs",
        ),
        pytest.param(
            rolling(updated=4, available=4, conditions=[condition("Update", "False", "Partitioned", "4/4")]),
            Outcome.PROGRESSING,
            "waiting",
            id="everything-updated-is-no-partition",
        ),
    ],
)
def test_assess(body: dict[str, Any], outcome: Outcome, says: str) -> None:
    verdict = assess(body)
    assert verdict.outcome == outcome
    assert says in verdict.message


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        pytest.param(Outcome.COMPLETE, 0, id="complete"),
        pytest.param(Outcome.FAILED, 1, id="failed"),
        pytest.param(Outcome.DEADLINE_EXCEEDED, 2, id="deadline"),
        pytest.param(Outcome.PROGRESSING, 0, id="progressing-without-watch-like-kubectl"),
    ],
)
def test_exit_codes(outcome: Outcome, code: int) -> None:
    assert EXIT_CODES[outcome] == code


def test_complete_names_the_revision() -> None:
    assert assess(collaset()).message.endswith(f"revision {NEW}")
