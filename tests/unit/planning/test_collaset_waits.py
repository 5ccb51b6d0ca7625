"""rollouts.planning.updating: condition messages name the pod and the PodTransitionRules holding it."""

from __future__ import annotations

import pytest
from collaset_builders import NEW, OLD, pod, scaling_in, snapshot, spec, updating

from lifecycle.states import Stage
from rollouts.planning.updating import Plan, Rejection, describe_rejection, plan_collaset

BUDGET = "[budget] blocked by max unavailable policy: [max unavailable]=1/4, [current unavailable]=1/4"


def held(
    ptr: str = "web-budget", *, rule: str = "budget", stage: Stage = Stage.PRE_CHECK, reason: str = BUDGET
) -> Rejection:
    return Rejection(ptr=ptr, rule=rule, stage=stage, reason=reason)


def message(plan: Plan, kind: str) -> str:
    (found,) = [c for c in plan.conditions if c.type == kind]
    return found.message


PREPARING_A = (
    "0/4 updated, waiting for pod web-a to finish Preparing "
    "(readiness gate off, protection finalizers gone) (and 3 more)"
)
LABELS = "block by label check policy, pod ns/web-d labels not match a=b"

FOUR_ON_UPDATE = [
    pod("web-a", OLD, labels=updating("preparing")),
    pod("web-b", OLD, labels=updating("begun")),
    pod("web-c", OLD, labels=updating("begun")),
    pod("web-d", OLD, labels=updating("begun")),
]


@pytest.mark.parametrize(
    ("rejections", "expected"),
    [
        pytest.param(
            {},
            PREPARING_A,
            id="no-rule-holds-first-pod-by-name",
        ),
        pytest.param(
            {"web-c": [held()], "web-b": [held()]},
            f"0/4 updated, waiting for pod web-b to pass PreCheck: [ptr web-budget] {BUDGET} (and 3 more)",
            id="first-held-pod-named-with-its-rule",
        ),
        pytest.param(
            {"web-b": [held(stage=Stage.POST_CHECK)]},
            PREPARING_A,
            id="rejection-of-another-stage-ignored",
        ),
        pytest.param(
            {"web-a": [held()]},
            PREPARING_A,
            id="stale-precheck-rejection-of-a-preparing-pod-ignored",
        ),
        pytest.param(
            {
                "web-d": [
                    held(
                        "zz-labels",
                        rule="labels",
                        reason=LABELS,
                    ),
                    held(),
                ]
            },
            "0/4 updated, waiting for pod web-d to pass PreCheck: [ptr web-budget] "
            f"{BUDGET}; [ptr zz-labels] labels: {LABELS} (and 3 more)",
            id="several-rules-sorted-by-ptr-rule-names-reason-prefixed-with-its-rule",
        ),
    ],
)
def test_update_wait_names_the_rules_holding_the_pod(
    rejections: dict[str, list[Rejection]], expected: str
) -> None:
    plan = plan_collaset(snapshot(spec(4), FOUR_ON_UPDATE, rejections=rejections))
    assert message(plan, "Update") == expected


def test_scale_in_wait_names_the_rule_holding_the_victim() -> None:
    pods = [pod("web-a", NEW, age=300), pod("web-b", NEW, age=10, labels=scaling_in("begun"))]
    plan = plan_collaset(snapshot(spec(1), pods, current=NEW, rejections={"web-b": [held()]}))
    assert message(plan, "Scale") == (
        f"2/1 pods, scaling in 1, waiting for pod web-b to pass PreCheck: [ptr web-budget] {BUDGET}"
    )


@pytest.mark.parametrize(
    ("rejection", "expected"),
    [
        pytest.param(held(), f"[ptr web-budget] {BUDGET}", id="budget-names-its-rule-already"),
        pytest.param(
            held(
                rule="check", reason="Webhook check check rejected, traceId 1b2c-33, taskId t-9, msg: not now"
            ),
            "[ptr web-budget] check: Webhook check check rejected, msg: not now",
            id="webhook-ids-left-out",
        ),
        pytest.param(
            held(rule="poll", reason="Polling task poll is running, taskId abc, msg: busy"),
            "[ptr web-budget] poll: Polling task poll is running, msg: busy",
            id="poll-task-id-left-out",
        ),
        pytest.param(
            held(rule="r", reason="x" * 500),
            "[ptr web-budget] r: " + "x" * 234 + "...",
            id="long-reason-truncated",
        ),
    ],
)
def test_describe_rejection(rejection: Rejection, expected: str) -> None:
    assert describe_rejection(rejection) == expected


def test_message_is_the_same_whatever_the_order_of_pods_and_rejections() -> None:
    rejections = {"web-c": [held()], "web-b": [held("other", rule="x", reason="no"), held()]}
    first = plan_collaset(snapshot(spec(4), FOUR_ON_UPDATE, rejections=rejections))
    flipped = {"web-b": list(reversed(rejections["web-b"])), "web-c": rejections["web-c"]}
    second = plan_collaset(snapshot(spec(4), list(reversed(FOUR_ON_UPDATE)), rejections=flipped))
    assert message(first, "Update") == message(second, "Update")
