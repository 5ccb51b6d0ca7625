"""Builders shared by the hook tests: hooks, planner inputs and observed Jobs in one line each."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hooks.models import HookPhase, HookStatus, LifecycleHook, RolloutType
from hooks.planning import HookDecision, HookInputs, plan_hooks
from hooks.rendering import JobOutcome, JobView, name_job

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
CLS = "web"
OLD = "web-old"
NEW = "web-new"


def job_spec(**extra: Any) -> dict[str, Any]:
    return {
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}},
        **extra,
    }


def make_hook(
    name: str,
    point: int | str,
    *,
    failure: str = "Abort",
    retain: str = "Always",
    spec: dict[str, Any] | None = None,
    deadline: int | None = None,
) -> LifecycleHook:
    raw: dict[str, Any] = {
        "name": name,
        "trigger": {"type": "ProgressAvailable", "progressAvailableParams": {"progressPoint": point}},
        "failurePolicy": failure,
        "retainPolicy": retain,
        "jobSpec": spec if spec is not None else job_spec(),
    }
    if deadline is not None:
        raw["activeDeadlineSeconds"] = deadline
    return LifecycleHook.model_validate(raw)


def make_inputs(hooks: list[LifecycleHook], **overrides: Any) -> HookInputs:
    base = HookInputs(
        collaset=CLS,
        namespace="ns",
        hooks=hooks,
        replicas=4,
        partition_cap=4,
        from_revision=OLD,
        to_revision=NEW,
        to_revision_uid="uid-new",
        rollout_type=RolloutType.ROLLOUT,
        statuses=(),
        jobs=(),
        updated_available=0,
        now=NOW,
    )
    return replace(base, **overrides)


def job_of(hook: str, phase: HookPhase, *, revision: str = NEW, message: str = "") -> JobView:
    return JobView(
        name=name_job(collaset=CLS, hook=hook, revision=revision),
        collaset=CLS,
        hook=hook,
        revision=revision,
        outcome=JobOutcome(phase=phase, message=message, finished_at=NOW if phase.finished else None),
    )


def status_of(
    hook: str, point: int, phase: HookPhase, *, revision: str = NEW, started: datetime | None = NOW
) -> HookStatus:
    job = name_job(collaset=CLS, hook=hook, revision=revision) if phase != HookPhase.PENDING else None
    return HookStatus(
        name=hook,
        revision=revision,
        point=point,
        phase=phase,
        job_name=job,
        start_time=started if job else None,
        finish_time=NOW if phase.finished else None,
    )


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def step(inputs: HookInputs, decision: HookDecision, **overrides: Any) -> HookInputs:
    """The next reconcile's inputs: the decision's statuses recorded, plus what changed outside."""
    return replace(inputs, statuses=decision.statuses, **overrides)


def run(inputs: HookInputs) -> HookDecision:
    return plan_hooks(inputs)
