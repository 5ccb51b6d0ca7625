"""Pure rule evaluation: budgets, label checks, rule order, several PTRs, status building."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from lifecycle.rules.evaluating import (
    PodGate,
    PodView,
    StageVerdicts,
    build_status,
    combine,
    detail_annotation,
    effective_rules,
    evaluate_stage,
    format_selector,
    gate_from_status,
    resolve_limit,
    select_pods,
    status_changed,
)
from lifecycle.rules.models import (
    SKIP_RULE_CONDITIONS,
    PodDetail,
    PodTransitionRule,
    PodTransitionRuleStatus,
    RejectInfo,
    Stage,
)
from lifecycle.rules.webhooks import RequestCall
from lifecycle.schema import LabelSelector

from .builders import NOW, POST, PRE, approved, budget, label_check, pod, ptr, status_with, webhook


def run(
    rule_obj: PodTransitionRule,
    pods: Sequence[PodView],
    *,
    stage: Stage = PRE,
    previous: PodTransitionRuleStatus | None = None,
) -> StageVerdicts:
    return evaluate_stage(
        rule_obj=rule_obj,
        stage=stage,
        selected_pods=pods,
        subjects=[p for p in pods if p.stage is stage],
        previous_status=previous,
        now=NOW,
    )


def max_reason(rule: str, limit: int, unavailable: int, total: int) -> str:
    return (
        f"[{rule}] blocked by max unavailable policy: [max unavailable]={limit}/{total}, "
        f"[current unavailable]={unavailable}/{total}"
    )


# -- budgets --------------------------------------------------------------------------------------


def test_half_of_four_with_two_unavailable_passes_exactly_those_two() -> None:
    rule_obj = ptr(budget(maxUnavailableValue="50%"))
    pods = [pod("a"), pod("b", available=False), pod("c"), pod("d", available=False)]

    verdicts = run(rule_obj, pods)

    assert verdicts.verdict.passed == {"b", "d"}
    assert verdicts.verdict.rejected == {
        "a": max_reason("budget", 2, 2, 4),
        "c": max_reason("budget", 2, 2, 4),
    }
    assert verdicts.details[0] == PodDetail(
        name="a",
        stage=PRE,
        passed=False,
        reject_info=(RejectInfo(rule_name="budget", reason=max_reason("budget", 2, 2, 4)),),
    )


def test_a_third_pod_going_unavailable_passes_too() -> None:
    rule_obj = ptr(budget(maxUnavailableValue="50%"))
    pods = [pod("a", available=False), pod("b", available=False), pod("c"), pod("d", available=False)]

    verdicts = run(rule_obj, pods)

    assert verdicts.verdict.passed == {"a", "b", "d"}
    assert verdicts.verdict.rejected == {"c": max_reason("budget", 2, 3, 4)}


def test_available_pods_take_the_budget_in_name_order() -> None:
    rule_obj = ptr(budget(maxUnavailableValue="50%"))
    pods = [pod(name) for name in ("d", "b", "a", "c")]

    verdicts = run(rule_obj, pods)

    assert verdicts.verdict.passed == {"a", "b"}
    assert set(verdicts.verdict.rejected) == {"c", "d"}
    assert verdicts.verdict.rejected["c"] == max_reason("budget", 2, 2, 4)
    assert [d.name for d in verdicts.details] == ["a", "b", "c", "d"]


def test_same_inputs_in_any_order_give_the_same_verdict() -> None:
    rule_obj = ptr(budget(maxUnavailableValue=3))
    pods = [pod(f"p{i}", available=i % 3 != 0) for i in range(10)]
    first = run(rule_obj, pods)
    shuffled = list(pods)
    random.Random(7).shuffle(shuffled)
    assert run(rule_obj, shuffled) == first


def test_pods_outside_the_stage_count_but_are_not_judged() -> None:
    rule_obj = ptr(budget(maxUnavailableValue=2))
    pods = [pod("a", stage=None, available=False), pod("b"), pod("c"), pod("d", stage=POST)]

    verdicts = run(rule_obj, pods)

    assert verdicts.verdict.passed == {"b"}
    assert verdicts.verdict.rejected == {"c": max_reason("budget", 2, 2, 4)}
    assert [d.name for d in verdicts.details] == ["b", "c"]


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [
        pytest.param("1%", 4, 1, id="1pct-of-4-is-1-not-0"),
        pytest.param("10%", 5, 1, id="10pct-of-5-is-1-not-0"),
        pytest.param("50%", 3, 1, id="50pct-of-3-rounds-down"),
        pytest.param("50%", 4, 2, id="50pct-of-4"),
        pytest.param("99%", 10, 9, id="99pct-of-10-rounds-down"),
        pytest.param("100%", 7, 7, id="100pct"),
        pytest.param("0%", 5, 0, id="0pct-stays-0"),
        pytest.param("30%", 0, 0, id="no-pods"),
        pytest.param(3, 10, 3, id="int"),
        pytest.param(12, 10, 12, id="int-over-total"),
    ],
)
def test_resolve_limit(value: int | str, total: int, expected: int) -> None:
    assert resolve_limit(value, total) == expected


@pytest.mark.parametrize(
    ("value", "total", "passing"),
    [
        pytest.param("1%", 4, 1, id="1pct-of-4"),
        pytest.param("10%", 5, 1, id="10pct-of-5"),
        pytest.param("50%", 3, 1, id="50pct-of-3"),
        pytest.param("100%", 4, 4, id="100pct-of-4"),
        pytest.param({"value": "50%"}, 4, 2, id="nested-spelling"),
    ],
)
def test_rounding_in_evaluation(value: Any, total: int, passing: int) -> None:
    policy = {"maxUnavailable": value} if isinstance(value, dict) else {"maxUnavailableValue": value}
    rule_obj = ptr(budget(**policy))
    pods = [pod(f"p{i}") for i in range(total)]

    verdicts = run(rule_obj, pods)

    assert verdicts.verdict.passed == {f"p{i}" for i in range(passing)}


@pytest.mark.parametrize(
    ("policy", "unavailable", "passed", "reason"),
    [
        pytest.param(
            {"minAvailableValue": 3},
            0,
            {"a"},
            "blocked by min available policy: [min available]=3/4, [current keep available]=3/4",
            id="min-3-of-4",
        ),
        pytest.param(
            {"minAvailableValue": "50%"},
            0,
            {"a", "b"},
            "blocked by min available policy: [min available]=2/4, [current keep available]=2/4",
            id="min-50pct-of-4",
        ),
        pytest.param(
            {"minAvailableValue": 3},
            1,
            set(),  # d is down already, so nobody else may go
            "blocked by min available policy: [min available]=3/4, [current keep available]=3/4",
            id="min-3-of-4-one-down",
        ),
        pytest.param(
            {"minAvailable": {"value": "1%"}, "maxUnavailableValue": 3},
            0,
            {"a", "b", "c"},
            max_reason("budget", 3, 3, 4),
            id="min-1pct-is-1-and-max-3",
        ),
        pytest.param(
            {"minAvailableValue": 4, "maxUnavailableValue": 2},
            0,
            set(),
            "blocked by min available policy: [min available]=4/4, [current keep available]=4/4",
            id="min-all",
        ),
    ],
)
def test_min_available(policy: dict[str, Any], unavailable: int, passed: set[str], reason: str) -> None:
    rule_obj = ptr(budget(**policy))
    names = ["a", "b", "c", "d"]
    pods = [pod(name, available=index < len(names) - unavailable) for index, name in enumerate(names)]

    verdicts = run(rule_obj, pods)

    down = {name for name, p in zip(names, pods, strict=True) if not p.available}
    assert verdicts.verdict.passed == passed | down
    assert set(verdicts.verdict.rejected.values()) == {reason}


# -- approvals remembered from the previous status ------------------------------------------------


@pytest.mark.parametrize(
    ("approved_pod", "passed", "carried"),
    [
        pytest.param(pod("a"), {"a"}, False, id="approved-still-in-stage-keeps-its-slot"),
        pytest.param(pod("a", stage=None), set(), True, id="approved-past-the-stage-still-counts"),
        pytest.param(pod("a", stage=None, available=False), set(), False, id="approved-now-unavailable"),
        pytest.param(
            pod("a", stage=None, operating=False), {"b"}, False, id="available-again-approval-lapsed"
        ),
        pytest.param(pod("a", stage=POST), {"b"}, False, id="moved-on-to-another-stage"),
    ],
)
def test_previously_approved_pods_count_as_unavailable(
    approved_pod: PodView, passed: set[str], carried: bool
) -> None:
    rule_obj = ptr(budget(maxUnavailableValue="25%"))  # 1 of 4
    pods = [approved_pod, pod("b"), pod("c"), pod("d")]
    in_stage = {p.name for p in pods if p.stage is PRE}

    verdicts = run(rule_obj, pods, previous=status_with(approved("a", "budget")))

    assert verdicts.verdict.passed == passed
    assert set(verdicts.verdict.rejected) == in_stage - passed
    carried_details = [d for d in verdicts.details if d.name not in in_stage]
    assert carried_details == ([approved("a", "budget")] if carried else [])


def test_approval_from_another_stage_is_not_an_approval_here() -> None:
    rule_obj = ptr(budget(maxUnavailableValue=1))
    previous = status_with(approved("a", "budget", stage=POST))

    verdicts = run(rule_obj, [pod("a"), pod("b")], previous=previous)

    assert verdicts.verdict.passed == {"a"}


def test_pod_approved_by_budget_but_held_by_labels_keeps_its_slot() -> None:
    rule_obj = ptr(budget(maxUnavailableValue=1), label_check(matchLabels={"ready": "true"}))
    first = run(rule_obj, [pod("a"), pod("b", extra_labels={"ready": "true"})])
    assert first.details[0].passed_rules == ("budget",)
    assert first.details[0].reject_info[0].rule_name == "labels"

    second = run(
        rule_obj,
        [pod("a"), pod("b", extra_labels={"ready": "true"})],
        previous=PodTransitionRuleStatus(details=first.details),
    )

    assert second.verdict.rejected["b"] == max_reason("budget", 1, 1, 2)


# -- skip and filter ------------------------------------------------------------------------------


def test_skip_annotation_and_filter_let_pods_through_without_recording_the_rule() -> None:
    rule_obj = ptr(
        {**budget(maxUnavailableValue=1), "filter": {"labelSelector": {"matchLabels": {"tier": "web"}}}},
        label_check(matchLabels={"ready": "true"}),
    )
    skip = {SKIP_RULE_CONDITIONS: json.dumps({"skipRules": ["labels"]})}
    pods = [
        pod("a", extra_labels={"tier": "web"}),
        pod("b", extra_labels={"tier": "web"}, annotations=skip),
        pod("c", extra_labels={"ready": "true"}),
        pod("d", annotations={SKIP_RULE_CONDITIONS: "not json"}),
    ]

    verdicts = run(rule_obj, pods)
    details = {d.name: d for d in verdicts.details}

    assert verdicts.verdict.passed == {"c"}
    assert details["a"].reject_info[0].rule_name == "labels"
    assert details["b"].reject_info[0].rule_name == "budget"
    assert details["c"].passed_rules == ("labels",)
    assert details["d"].reject_info[0].rule_name == "labels"


# -- label checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requires", "pod_labels", "passes"),
    [
        pytest.param(
            {"matchLabels": {"app.custom/ready": "true"}}, {"app.custom/ready": "true"}, True, id="match"
        ),
        pytest.param(
            {"matchLabels": {"app.custom/ready": "true"}}, {"app.custom/ready": "no"}, False, id="value"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app.custom/forbidden", "operator": "DoesNotExist"}]},
            {},
            True,
            id="does-not-exist",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app.custom/forbidden", "operator": "DoesNotExist"}]},
            {"app.custom/forbidden": ""},
            False,
            id="does-not-exist-but-does",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"zone": "b"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a", "b"]}]},
            {"zone": "b"},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchLabels": {"ready": "true"}, "matchExpressions": [{"key": "canary", "operator": "Exists"}]},
            {"ready": "true"},
            False,
            id="labels-and-expressions",
        ),
    ],
)
def test_label_check(requires: dict[str, Any], pod_labels: dict[str, str], passes: bool) -> None:
    rule_obj = ptr(label_check(**requires))

    verdicts = run(rule_obj, [pod("a", extra_labels=pod_labels)])

    assert (verdicts.verdict.passed == {"a"}) is passes
    if not passes:
        selector = format_selector(LabelSelector.model_validate(requires))
        assert verdicts.verdict.rejected["a"] == (
            f"block by label check policy, pod default/a labels not match {selector}"
        )


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        pytest.param({}, "<none>", id="empty"),
        pytest.param({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2", id="labels-sorted"),
        pytest.param(
            {
                "matchLabels": {"ready": "true"},
                "matchExpressions": [
                    {"key": "zone", "operator": "NotIn", "values": ["b", "a"]},
                    {"key": "canary", "operator": "Exists"},
                    {"key": "forbidden", "operator": "DoesNotExist"},
                    {"key": "tier", "operator": "In", "values": ["web"]},
                ],
            },
            "canary,!forbidden,ready=true,tier in (web),zone notin (a,b)",
            id="everything",
        ),
    ],
)
def test_format_selector(selector: dict[str, Any], text: str) -> None:
    assert format_selector(LabelSelector.model_validate(selector)) == text


# -- rule order and selection of rules ------------------------------------------------------------


def test_rules_run_budget_then_labels_then_webhook_whatever_the_declaration_order() -> None:
    rule_obj = ptr(
        webhook("hook"),
        label_check("ready", matchLabels={"ready": "true"}),
        budget("budget", maxUnavailableValue=2),
        label_check("zone", matchExpressions=[{"key": "zone", "operator": "Exists"}]),
    )
    ready = {"ready": "true", "zone": "z"}
    pods = [
        pod("a", extra_labels=ready),
        pod("b", extra_labels={"zone": "z"}),
        pod("c", extra_labels=ready),
    ]

    verdicts = run(rule_obj, pods)
    details = {d.name: d for d in verdicts.details}

    assert [r.name for r in effective_rules(rule_obj.spec, PRE)] == ["budget", "ready", "zone", "hook"]
    assert details["a"].passed_rules == ("budget", "ready", "zone")
    assert details["a"].reject_info[0].reason == "Waiting for webhook default/ptr/hook to answer"
    assert details["b"].passed_rules == ("budget",)
    assert details["b"].reject_info[0].rule_name == "ready"
    assert details["c"].passed_rules == ()
    assert details["c"].reject_info[0].rule_name == "budget"
    # only the pod that passed everything before the webhook is sent to it
    (call,) = verdicts.calls
    assert isinstance(call, RequestCall)
    assert [p.name for p in call.pods] == ["a"]


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        pytest.param([{**budget("b1", maxUnavailableValue=1), "disabled": True}], [], id="disabled"),
        pytest.param([budget("b1", stage="PostCheck", maxUnavailableValue=1)], [], id="other-stage"),
        pytest.param(
            [
                label_check("l1", matchLabels={}),
                budget("b1", maxUnavailableValue=1),
                budget("b2", minAvailableValue=1),
            ],
            ["b1", "b2", "l1"],
            id="kind-then-declaration-order",
        ),
    ],
)
def test_effective_rules(rules: list[dict[str, Any]], expected: list[str]) -> None:
    assert [r.name for r in effective_rules(ptr(*rules).spec, PRE)] == expected


def test_subjects_without_rules_for_the_stage_pass() -> None:
    rule_obj = ptr(budget(stage="PostCheck", maxUnavailableValue=1))
    verdicts = run(rule_obj, [pod("a"), pod("b")])
    assert verdicts.verdict.passed == {"a", "b"}
    assert all(d.passed and d.passed_rules == () for d in verdicts.details)


# -- several PodTransitionRules -------------------------------------------------------------------


def test_a_pod_passes_only_when_every_ptr_selecting_it_passes_it() -> None:
    pods = [pod("a", extra_labels={"ready": "true"}), pod("b"), pod("c", extra_labels={"ready": "true"})]
    budget_ptr = ptr(budget(maxUnavailableValue=2), name="budget-ptr")
    labels_ptr = ptr(label_check(matchLabels={"ready": "true"}), name="labels-ptr")

    gates = combine({"budget-ptr": run(budget_ptr, pods), "labels-ptr": run(labels_ptr, pods)})

    assert gates["a"] == PodGate(passed=True)
    assert not gates["b"].passed
    assert gates["b"].reasons == (
        "[PodTransitionRule: labels-ptr, RejectInfo: labels:block by label check policy, pod "
        "default/b labels "
        "not match ready=true]",
    )
    assert gates["c"].reasons == (
        f"[PodTransitionRule: budget-ptr, RejectInfo: budget:{max_reason('budget', 2, 2, 3)}]",
    )


def _with_status(
    rule_obj: PodTransitionRule, verdicts: StageVerdicts, pods: Sequence[PodView]
) -> PodTransitionRule:
    status = build_status(rule_obj=rule_obj, selected_pods=pods, stages=[verdicts], now=NOW)
    return rule_obj.model_copy(update={"status": status})


def test_gate_from_status_over_several_ptrs() -> None:
    pods = [pod("a", extra_labels={"ready": "true"}), pod("b")]
    labels_ptr = ptr(label_check(matchLabels={"ready": "true"}), name="labels-ptr")
    labels_ptr = _with_status(labels_ptr, run(labels_ptr, pods), pods)
    fresh = ptr(budget(maxUnavailableValue=1), name="fresh-ptr")  # not reconciled yet
    post_only = ptr(budget(stage="PostCheck", maxUnavailableValue=1), name="post-ptr")
    elsewhere = ptr(budget(maxUnavailableValue=1), name="other-app").model_copy(
        update={
            "spec": ptr(budget(maxUnavailableValue=1)).spec.model_copy(
                update={"selector": LabelSelector(match_labels={"app": "bar"})}
            )
        }
    )

    assert gate_from_status(pod=pods[0], rules=[labels_ptr, post_only, elsewhere]) == PodGate(passed=True)
    assert gate_from_status(pod=pods[0], rules=[labels_ptr, fresh]) == PodGate(
        passed=False, reasons=("[waiting for podtransitionrule fresh-ptr processing. ]",)
    )
    assert not gate_from_status(pod=pods[1], rules=[labels_ptr]).passed
    assert gate_from_status(pod=pod("a", stage=None), rules=[fresh]) == PodGate(passed=True)
    assert gate_from_status(pod=pods[0], rules=[]) == PodGate(passed=True)
    stale = labels_ptr.model_copy(update={"metadata": {**labels_ptr.metadata, "generation": 2}})
    assert gate_from_status(pod=pods[0], rules=[stale]).reasons == (
        "[waiting for podtransitionrule labels-ptr processing. ]",
    )
    in_other_stage = pod("a", stage=POST, extra_labels={"ready": "true"})
    assert gate_from_status(pod=in_other_stage, rules=[labels_ptr]) == PodGate(passed=True)


# -- status ---------------------------------------------------------------------------------------


def test_build_status_merges_stages() -> None:
    rule_obj = ptr(
        budget(maxUnavailableValue=1), label_check(stage="PostCheck", matchLabels={"ready": "true"})
    )
    pods = [
        pod("c"),
        pod("a"),
        pod("b", stage=POST, available=False),
        pod("idle", stage=None, operating=False),
    ]
    previous = status_with(approved("x", "budget"))
    pods.append(pod("x", stage=None))  # approved earlier, past PreCheck, still available: carried

    pre = run(rule_obj, pods, previous=previous)
    post = run(rule_obj, pods, stage=POST, previous=previous)
    status = build_status(rule_obj=rule_obj, selected_pods=pods, stages=[pre, post], now=NOW)

    assert status.targets == ("a", "b", "c", "idle", "x")
    assert [d.name for d in status.details] == ["a", "b", "c", "x"]
    assert status.details[3] == approved("x", "budget")
    assert status.summary.model_dump() == {"selected": 5, "passed": 0, "rejected": 3}
    assert status.observed_generation == 1
    assert status.update_time == NOW
    assert not status_changed(status, status.model_copy(update={"update_time": None}))
    assert status_changed(status, status.model_copy(update={"targets": ("a",)}))
    assert status_changed(None, status)


def test_select_pods_by_namespace_and_selector() -> None:
    rule_obj = ptr(budget(maxUnavailableValue=1))
    pods = [
        pod("b"),
        pod("a"),
        pod("other-ns", namespace="kube-system"),
        pod("x", extra_labels={"app": "bar"}),
    ]
    assert [p.name for p in select_pods(rule_obj=rule_obj, pods=pods)] == ["a", "b"]


@pytest.mark.parametrize(
    ("detail", "value"),
    [
        pytest.param(
            PodDetail(name="a", stage=PRE, passed=True), '{"stage":"PreCheck","passed":true}', id="passed"
        ),
        pytest.param(
            PodDetail(name="a", stage=POST, passed=False), '{"stage":"PostCheck","passed":false}', id="no"
        ),
    ],
)
def test_detail_annotation(detail: PodDetail, value: str) -> None:
    assert detail_annotation(ptr_name="p", detail=detail) == (
        "detail.podtransitionrule.kusionstack.io/p",
        value,
    )


def test_pod_view_from_pod() -> None:
    manifest = {
        "metadata": {
            "name": "a",
            "namespace": "ns",
            "labels": {
                "podopslifecycle.kusionstack.io/service-available": "1",
                "operating.podopslifecycle.kusionstack.io/collaset": "1",
            },
            "annotations": {"k": "v"},
        },
        "status": {"podIP": "10.0.0.1"},
    }
    view = PodView.from_pod(manifest, stage=PRE)
    assert (view.name, view.namespace, view.available, view.stage) == ("a", "ns", True, PRE)
    assert view.is_operating()
    assert dict(view.annotations) == {"k": "v"}
    assert not PodView.from_pod({"metadata": {"name": "b"}}, stage=None).available
