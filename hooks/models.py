"""Lifecycle hook API: the ``spec.lifecycleHooks[]`` items and the ``status.hooks[]`` records of a CollaSet.

These models sit at the API edge of the hooks package: the CollaSet model
(``rollouts.api.collasets``) embeds them, the CRD generator reads their JSON schema,
and the pure planner (:mod:`hooks.planning`) and renderer (:mod:`hooks.rendering`)
take them as input. They follow the lifecycle hooks proposal (a Job triggered when the
rollout reaches a progress point) with two additions of ours:

* ``activeDeadlineSeconds`` on the hook (default :data:`DEFAULT_HOOK_DEADLINE_SECONDS`),
  applied to the Job when its ``jobSpec`` sets none, so no hook holds a rollout forever;
* ``failurePolicy`` defaults to ``Abort``: a hook is usually a gate (migration, smoke
  test), and going on after a failed gate is the unsafe choice. ``Ignore`` is opt-in.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import Field

from lifecycle.schema import ApiModel, IntOrString, Unstructured

#: Seconds a hook Job may run when neither the hook nor its jobSpec says otherwise.
DEFAULT_HOOK_DEADLINE_SECONDS: Final = 600

_PERCENT = re.compile(r"^(\d+)%$")


class HookTriggerType(StrEnum):
    """What makes a hook run; the proposal leaves room for more types later."""

    PROGRESS_AVAILABLE = "ProgressAvailable"


class FailurePolicy(StrEnum):
    """What a failed (or timed out) hook does to the rollout."""

    ABORT = "Abort"
    """The rollout of this revision stops for good (condition ``Failed``, reason ``HookFailed``)."""
    IGNORE = "Ignore"
    """An event is recorded and the rollout goes on."""


class RetainPolicy(StrEnum):
    """Whether the hook's Job is kept once it has finished."""

    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"


class HookPhase(StrEnum):
    """The phase of one hook of one revision's rollout."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (HookPhase.SUCCEEDED, HookPhase.FAILED, HookPhase.CANCELLED)


class RolloutType(StrEnum):
    """Value of ``K8S_ROLLOUT_TYPE`` in hook Jobs."""

    ROLLOUT = "ROLLOUT"
    ROLLBACK = "ROLLBACK"


class ProgressAvailableParams(ApiModel):
    progress_point: IntOrString = Field(
        description=(
            "When the hook runs: a number of available pods of the new revision, or a percentage of "
            "spec.replicas ('50%'), which resolves to the closest possible point at or right after it "
            "(ceil(pct * replicas / 100)). 0 runs before any pod is touched; '100%' after the last pod "
            "is available."
        )
    )


class HookTrigger(ApiModel):
    type: HookTriggerType = Field(
        default=HookTriggerType.PROGRESS_AVAILABLE, description="Type of trigger; only ProgressAvailable."
    )
    progress_available_params: ProgressAvailableParams | None = Field(
        default=None, description="Parameters of the ProgressAvailable trigger (required for that type)."
    )


class LifecycleHook(ApiModel):
    """One hook: a Job run once per revision when the rollout reaches the hook's progress point."""

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Name of the hook, unique in the CollaSet; a DNS label (used in Job names and labels).",
    )
    trigger: HookTrigger = Field(description="When the hook runs.")
    failure_policy: FailurePolicy = Field(
        default=FailurePolicy.ABORT,
        description="Abort (default): a failed hook stops the rollout for good. Ignore: record and go on.",
    )
    retain_policy: RetainPolicy = Field(
        default=RetainPolicy.ALWAYS,
        description=(
            "Always (default): keep the Job. OnFailure: delete it after it succeeds. Never: delete it once "
            "it has finished."
        ),
    )
    active_deadline_seconds: int = Field(
        default=DEFAULT_HOOK_DEADLINE_SECONDS,
        ge=1,
        description=(
            "Deadline of the hook Job when jobSpec sets no activeDeadlineSeconds; past it the hook failed."
        ),
    )
    job_spec: Unstructured = Field(description="A batch/v1 JobSpec the hook Job is created from.")

    @property
    def progress_point(self) -> int | str:
        """The raw progress point (0 when the trigger has no parameters)."""
        params = self.trigger.progress_available_params
        return 0 if params is None else params.progress_point

    def effective_deadline_seconds(self) -> int:
        """The Job's deadline: the jobSpec's own ``activeDeadlineSeconds`` wins over the hook's."""
        value = self.job_spec.get("activeDeadlineSeconds")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return self.active_deadline_seconds


class HookStatus(ApiModel):
    """What happened to one hook of one revision; kept in ``status.hooks[]``."""

    name: str = Field(description="Name of the hook.")
    revision: str = Field(description="ControllerRevision the hook runs for (the rollout's target).")
    point: int = Field(ge=0, description="Resolved progress point: number of available new pods.")
    phase: HookPhase = Field(
        default=HookPhase.PENDING, description="Pending, Running, Succeeded, Failed, Cancelled."
    )
    job_name: str | None = Field(default=None, description="Name of the hook's Job once created.")
    start_time: datetime | None = Field(default=None, description="When the Job was created.")
    finish_time: datetime | None = Field(default=None, description="When the hook finished.")
    message: str = Field(default="", description="Why the hook is in its phase.")


def parse_percent(value: str) -> int | None:
    """``"50%"`` -> 50; anything else -> None."""
    match = _PERCENT.match(value.strip())
    return int(match.group(1)) if match else None


def resolve_point(point: int | str, *, replicas: int) -> int:
    """A progress point as a number of available new pods, within ``[0, replicas]``.

    A percentage resolves to the closest possible point at or right after it,
    ``ceil(pct * replicas / 100)``. A number above ``replicas`` (possible after a scale
    down; admission rejects it otherwise) is clamped, so the hook still runs at the end.
    Raises ``ValueError`` on a string that is not a percentage (admission rejects those).
    """
    if isinstance(point, str):
        pct = parse_percent(point)
        if pct is None:
            raise ValueError(f"progress point {point!r} is neither a number nor a percentage like '50%'")
        resolved = -(-pct * replicas // 100)  # ceil in integers: no float rounding at e.g. 7% of 100
    else:
        resolved = point
    return max(0, min(resolved, max(replicas, 0)))
