"""Pure evaluation of a PodTransitionRule for one stage: which pods in the stage may move on.

Sits under the PTR controller: it builds :class:`PodView` s of the selected pods, calls
:func:`evaluate_stage` per stage (twice when webhook calls are needed, see
:mod:`lifecycle.rules.webhooks`), writes :func:`build_status`, and the lifecycle gates a pod
on :func:`gate_from_status` (or :func:`combine` of fresh verdicts) over every PTR selecting it.

Per stage, the effective rules (not disabled, of this stage) run in a fixed order: budgets
(``availablePolicy``), then ``labelCheck``, then ``webhook``, declaration order within a kind.
Each rule judges the subjects still standing; pods it rejects drop out, pods it skips (listed
in the ``skip-rule-conditions`` annotation, or outside ``filter.labelSelector``) stay in
without the rule in their ``passedRules``. A subject passes when no rule rejects it.

Budgets, with our fixes to Operating (reference section 3.5):

* a pod is unavailable when it lacks ``service-available``; a pod this rule already approved
  (``passedRules`` of the previous status, same stage) counts as unavailable while it still
  looks available and is in the stage or past it with an operation under way; once it is
  seen unavailable its own state counts, and when it is available again the approval is gone;
* percentages of all selected pods round down, but a positive percentage never resolves to 0
  (1% of 4 allows 1), for ``maxUnavailable`` and ``minAvailable`` alike;
* subjects are judged in name order, so the same inputs always approve the same pods.

Approvals of pods that left the stage are carried in the details (unchanged) for as long as
they count against the budget, which closes the window between approval and the pod losing
``service-available``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from lifecycle.rules.models import (
    DETAIL_ANNOTATION_PREFIX,
    SKIP_RULE_CONDITIONS,
    AvailablePolicy,
    LabelCheck,
    PodDetail,
    PodTransitionRule,
    PodTransitionRuleSpec,
    PodTransitionRuleStatus,
    RejectInfo,
    Rule,
    RuleKind,
    RuleState,
    Stage,
    Summary,
    parse_int_or_percent,
)
from lifecycle.rules.subjects import PodView
from lifecycle.rules.webhooks import WebhookCall, WebhookResult, evaluate_webhook_rule
from lifecycle.schema import LabelSelector

__all__ = [
    "PodGate",
    "PodView",
    "StageVerdicts",
    "Verdict",
    "build_status",
    "combine",
    "detail_annotation",
    "effective_rules",
    "evaluate_stage",
    "format_selector",
    "gate_from_status",
    "resolve_limit",
    "select_pods",
    "skipped_rules",
    "status_changed",
]

_KIND_ORDER: Final[Mapping[RuleKind, int]] = {"availablePolicy": 1, "labelCheck": 3, "webhook": 5}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Pods that passed, pods rejected (name -> reason), and when to look again (seconds)."""

    passed: frozenset[str] = frozenset()
    rejected: Mapping[str, str] = field(default_factory=dict)
    retry_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class StageVerdicts:
    """One PTR's decision for one stage.

    ``verdict`` covers the subjects over all rules; ``rules`` holds each effective rule's own
    verdict over the pods it judged. ``details`` are the status entries (subjects, then carried
    budget approvals). ``calls`` are webhook calls still to make: perform them and evaluate again
    with their outcomes. ``warnings`` are worth an Event (e.g. a failure let through by Ignore).
    """

    stage: Stage
    verdict: Verdict
    rules: Mapping[str, Verdict]
    details: tuple[PodDetail, ...]
    rule_states: tuple[RuleState, ...]
    calls: tuple[WebhookCall, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PodGate:
    """Whether a pod may leave its stage, over every PTR selecting it, and why not."""

    passed: bool
    reasons: tuple[str, ...] = ()


# -- small pure helpers ---------------------------------------------------------------------------


def effective_rules(spec: PodTransitionRuleSpec, stage: Stage) -> tuple[Rule, ...]:
    """The enabled rules of ``stage`` in evaluation order (budget, labels, webhook; then as declared)."""
    rules = [rule for rule in spec.rules if not rule.disabled and rule.stage == stage]
    return tuple(sorted(rules, key=lambda rule: _KIND_ORDER[rule.kind()]))


def resolve_limit(value: int | str, total: int) -> int:
    """An int as is; ``N%`` of ``total`` rounded down, but at least 1 when N > 0 and total > 0."""
    amount, is_percent = parse_int_or_percent(value)
    if not is_percent:
        return amount
    scaled = math.floor(amount * total / 100)
    if scaled == 0 and amount > 0 and total > 0:
        return 1
    return scaled


def skipped_rules(pod: PodView) -> frozenset[str]:
    """Rule names from the pod's ``skip-rule-conditions`` annotation; malformed JSON skips nothing."""
    raw = pod.annotations.get(SKIP_RULE_CONDITIONS)
    if not raw:
        return frozenset()
    try:
        document = json.loads(raw)
    except ValueError:
        return frozenset()
    names = document.get("skipRules") if isinstance(document, dict) else None
    if not isinstance(names, list):
        return frozenset()
    return frozenset(name for name in names if isinstance(name, str))


def format_selector(selector: LabelSelector) -> str:
    """A selector in ``kubectl`` form (``a=b,c in (d,e),!f``), requirements sorted by key."""
    parts: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (selector.match_labels or {}).items()]
    for req in selector.match_expressions or []:
        values = ",".join(sorted(req.values or []))
        text = {
            "In": f"{req.key} in ({values})",
            "NotIn": f"{req.key} notin ({values})",
            "Exists": req.key,
            "DoesNotExist": f"!{req.key}",
        }[req.operator]
        parts.append((req.key, text))
    if not parts:
        return "<none>"
    return ",".join(text for _, text in sorted(parts))


def select_pods(*, rule_obj: PodTransitionRule, pods: Iterable[PodView]) -> tuple[PodView, ...]:
    """The pods the PTR selects (its namespace, its selector), sorted by name."""
    namespace = rule_obj.namespace
    chosen = [
        pod
        for pod in pods
        if (not namespace or not pod.namespace or pod.namespace == namespace)
        and rule_obj.spec.selector.matches(dict(pod.labels))
    ]
    return tuple(sorted(chosen, key=lambda pod: pod.name))


def detail_annotation(*, ptr_name: str, detail: PodDetail) -> tuple[str, str]:
    """The pod annotation Operating writes per PTR: key and compact JSON ``{"stage", "passed"}``."""
    value = json.dumps({"stage": detail.stage.value, "passed": detail.passed}, separators=(",", ":"))
    return f"{DETAIL_ANNOTATION_PREFIX}/{ptr_name}", value


# -- rules ----------------------------------------------------------------------------------------


def _judge_budget(
    *,
    rule: Rule,
    policy: AvailablePolicy,
    selected: Sequence[PodView],
    judged: Sequence[PodView],
    holds: Callable[[PodView], bool],
) -> Verdict:
    total = len(selected)
    max_value = policy.max_unavailable_limit()
    min_value = policy.min_available_limit()
    max_quota = resolve_limit(max_value, total) if max_value is not None else total
    min_quota = resolve_limit(min_value, total) if min_value is not None else 0
    allowance = max_quota
    available = 0
    for pod in selected:
        if holds(pod) or not pod.available:
            allowance -= 1
        else:
            available += 1
    passed: set[str] = set()
    rejected: dict[str, str] = {}
    for pod in judged:
        if holds(pod) or not pod.available:
            passed.add(pod.name)
        elif allowance > 0:
            if available - min_quota < 1:
                rejected[pod.name] = (
                    f"blocked by min available policy: [min available]={min_quota}/{total}, "
                    f"[current keep available]={available}/{total}"
                )
            else:
                passed.add(pod.name)
                available -= 1
                allowance -= 1
        else:
            rejected[pod.name] = (
                f"[{rule.name}] blocked by max unavailable policy: [max unavailable]={max_quota}/{total}, "
                f"[current unavailable]={total - available}/{total}"
            )
    return Verdict(passed=frozenset(passed), rejected=rejected)


def _judge_labels(*, check: LabelCheck, judged: Sequence[PodView]) -> Verdict:
    passed: set[str] = set()
    rejected: dict[str, str] = {}
    for pod in judged:
        if check.requires.matches(dict(pod.labels)):
            passed.add(pod.name)
        else:
            rejected[pod.name] = (
                f"block by label check policy, pod {pod.namespace}/{pod.name} labels not match "
                f"{format_selector(check.requires)}"
            )
    return Verdict(passed=frozenset(passed), rejected=rejected)


def _min_retry(*values: float | None) -> float | None:
    present = [value for value in values if value is not None]
    return min(present) if present else None


def evaluate_stage(
    *,
    rule_obj: PodTransitionRule,
    stage: Stage,
    selected_pods: Sequence[PodView],
    subjects: Sequence[PodView],
    previous_status: PodTransitionRuleStatus | None,
    webhook_results: Sequence[WebhookResult] = (),
    now: datetime,
) -> StageVerdicts:
    """Judge ``subjects`` (the selected pods in ``stage``) against the PTR's rules of ``stage``.

    ``selected_pods`` are all pods the PTR selects (the budget's total); ``previous_status``
    supplies earlier approvals and webhook tasks; ``webhook_results`` are the outcomes of the
    calls a previous pass returned; ``now`` is timezone-aware.
    """
    spec = rule_obj.spec
    previous = previous_status or PodTransitionRuleStatus()
    previous_details = {detail.name: detail for detail in previous.details}
    previous_states = {state.name: state for state in previous.rule_states}
    rules = effective_rules(spec, stage)
    ordered = sorted({pod.name: pod for pod in subjects}.values(), key=lambda pod: pod.name)
    ordered_selected = sorted(selected_pods, key=lambda pod: pod.name)

    def approved_before(pod: PodView, rule: Rule) -> bool:
        detail = previous_details.get(pod.name)
        return detail is not None and detail.stage == stage and rule.name in detail.passed_rules

    def holds_budget(rule: Rule) -> Callable[[PodView], bool]:
        def holds(pod: PodView) -> bool:
            if not pod.available or not approved_before(pod, rule):
                return False
            return pod.stage == stage or (pod.stage is None and pod.is_operating())

        return holds

    standing = list(ordered)
    passed_rules: dict[str, list[str]] = {pod.name: [] for pod in ordered}
    rejects: dict[str, RejectInfo] = {}
    verdicts: dict[str, Verdict] = {}
    states: list[RuleState] = []
    calls: list[WebhookCall] = []
    warnings: list[str] = []
    retry: float | None = None
    key_prefix = f"{rule_obj.namespace}/{rule_obj.name}"

    for rule in rules:
        judged = [
            pod
            for pod in standing
            if rule.name not in skipped_rules(pod)
            and (
                rule.filter is None
                or rule.filter.label_selector is None
                or rule.filter.label_selector.matches(dict(pod.labels))
            )
        ]
        if rule.available_policy is not None:
            verdict = _judge_budget(
                rule=rule,
                policy=rule.available_policy,
                selected=ordered_selected,
                judged=judged,
                holds=holds_budget(rule),
            )
        elif rule.label_check is not None:
            verdict = _judge_labels(check=rule.label_check, judged=judged)
        else:
            previous_state = previous_states.get(rule.name)
            outcome = evaluate_webhook_rule(
                rule=rule,
                key=f"{key_prefix}/{rule.name}",
                stage=stage,
                pending=judged,
                approved_before={pod.name for pod in judged if approved_before(pod, rule)},
                previous=previous_state.webhook_status if previous_state else None,
                results=webhook_results,
                now=now,
            )
            verdict = Verdict(
                passed=outcome.passed, rejected=outcome.rejected, retry_after=outcome.retry_after
            )
            states.append(RuleState(name=rule.name, webhook_status=outcome.status))
            calls.extend(outcome.calls)
            warnings.extend(outcome.warnings)
        verdicts[rule.name] = verdict
        retry = _min_retry(retry, verdict.retry_after)
        for pod in judged:
            if pod.name in verdict.rejected:
                rejects[pod.name] = RejectInfo(rule_name=rule.name, reason=verdict.rejected[pod.name])
            else:
                passed_rules[pod.name].append(rule.name)
        standing = [pod for pod in standing if pod.name not in verdict.rejected]

    details = [
        PodDetail(
            name=pod.name,
            stage=stage,
            passed=pod.name not in rejects,
            passed_rules=tuple(passed_rules[pod.name]),
            reject_info=(rejects[pod.name],) if pod.name in rejects else (),
        )
        for pod in ordered
    ]
    subject_names = {pod.name for pod in ordered}
    budget_rules = [rule for rule in rules if rule.available_policy is not None]
    for pod in ordered_selected:
        carried = previous_details.get(pod.name)
        if (
            pod.name not in subject_names
            and carried is not None
            and any(holds_budget(rule)(pod) for rule in budget_rules)
        ):
            details.append(carried)

    return StageVerdicts(
        stage=stage,
        verdict=Verdict(
            passed=frozenset(subject_names - set(rejects)),
            rejected={name: info.reason for name, info in rejects.items()},
            retry_after=retry,
        ),
        rules=verdicts,
        details=tuple(details),
        rule_states=tuple(states),
        calls=tuple(calls),
        warnings=tuple(warnings),
    )


# -- putting stages and PTRs together -------------------------------------------------------------


def _describe_rejection(ptr_name: str, detail: PodDetail) -> str:
    infos = ", ".join(f"{info.rule_name}:{info.reason}" for info in detail.reject_info)
    return f"[PodTransitionRule: {ptr_name}, RejectInfo: {infos}]"


def combine(verdicts: Mapping[str, StageVerdicts]) -> dict[str, PodGate]:
    """Per subject pod over several PTRs (PTR name -> its verdicts): passed only if every one passed it."""
    gates: dict[str, PodGate] = {}
    for ptr_name in sorted(verdicts):
        stage_verdicts = verdicts[ptr_name]
        subjects = stage_verdicts.verdict.passed | set(stage_verdicts.verdict.rejected)
        for detail in stage_verdicts.details:
            if detail.name not in subjects:
                continue
            gate = gates.get(detail.name, PodGate(passed=True))
            if not detail.passed:
                gate = PodGate(passed=False, reasons=(*gate.reasons, _describe_rejection(ptr_name, detail)))
            gates[detail.name] = gate
    return gates


def gate_from_status(*, pod: PodView, rules: Iterable[PodTransitionRule]) -> PodGate:
    """Whether ``pod`` may leave its stage, from the status of the PTRs (of its namespace) selecting it.

    A PTR without rules for the stage does not hold the pod. One whose status has no detail
    for the pod in this stage, or was computed for an older generation, holds it as
    "waiting" (Operating let such pods through when the PTR had not listed them yet).
    A pod in no stage passes.
    """
    if pod.stage is None:
        return PodGate(passed=True)
    reasons: list[str] = []
    for rule_obj in sorted(rules, key=lambda r: r.name):
        if rule_obj.namespace and pod.namespace and rule_obj.namespace != pod.namespace:
            continue
        if not rule_obj.spec.selector.matches(dict(pod.labels)):
            continue
        if not effective_rules(rule_obj.spec, pod.stage):
            continue
        status = rule_obj.status
        detail = None
        if status is not None and (
            rule_obj.generation is None or status.observed_generation == rule_obj.generation
        ):
            detail = status.detail_of(pod.name)
            if detail is not None and detail.stage != pod.stage:
                detail = None
        if detail is None:
            reasons.append(f"[waiting for podtransitionrule {rule_obj.name} processing. ]")
        elif not detail.passed:
            reasons.append(_describe_rejection(rule_obj.name, detail))
    return PodGate(passed=not reasons, reasons=tuple(reasons))


def build_status(
    *,
    rule_obj: PodTransitionRule,
    selected_pods: Sequence[PodView],
    stages: Sequence[StageVerdicts],
    now: datetime,
) -> PodTransitionRuleStatus:
    """The PTR status from this reconcile's verdicts of every stage."""
    details: dict[str, PodDetail] = {}
    passed = 0
    rejected = 0
    for stage_verdicts in stages:
        passed += len(stage_verdicts.verdict.passed)
        rejected += len(stage_verdicts.verdict.rejected)
        for detail in stage_verdicts.details:
            # a subject's fresh detail wins over an approval carried by another stage
            subject = (
                detail.name in stage_verdicts.verdict.passed or detail.name in stage_verdicts.verdict.rejected
            )
            if subject or detail.name not in details:
                details[detail.name] = detail
    order = {rule.name: index for index, rule in enumerate(rule_obj.spec.rules)}
    states = sorted(
        (state for stage_verdicts in stages for state in stage_verdicts.rule_states),
        key=lambda state: order.get(state.name, len(order)),
    )
    targets = tuple(sorted({pod.name for pod in selected_pods}))
    return PodTransitionRuleStatus(
        observed_generation=rule_obj.generation,
        update_time=now,
        targets=targets,
        details=tuple(details[name] for name in sorted(details)),
        rule_states=tuple(states),
        summary=Summary(selected=len(targets), passed=passed, rejected=rejected),
    )


def status_changed(old: PodTransitionRuleStatus | None, new: PodTransitionRuleStatus) -> bool:
    """Whether writing ``new`` changes anything but ``updateTime``."""
    if old is None:
        return True
    return old.model_copy(update={"update_time": None}) != new.model_copy(update={"update_time": None})
