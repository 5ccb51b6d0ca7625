"""Pure hook planning: how far a rollout may go now, and which hook Jobs to start, keep or delete.

Sits between the observed state and the CollaSet update planner: the reconciler passes
the hooks of ``spec.lifecycleHooks``, the recorded ``status.hooks``, the observed hook
Jobs (:class:`~hooks.rendering.JobView`) and the number of available pods of the new
revision; :func:`plan_hooks` returns a :class:`HookDecision` whose ``allowed_updated``
caps the number of pods on the new revision, which ``rollouts.planning.updating`` honours.

The algorithm is the proposal's, level-based (every call recomputes from the inputs):

1. Resolve each hook's progress point to a number of available new pods (a percentage
   becomes ``ceil(pct * replicas / 100)``, the closest point at or after it) and walk
   the distinct points in ascending order; hooks at the same point run in parallel.
2. A point whose hooks all finished (succeeded, or failed with ``Ignore``) is passed.
3. At the first unfinished point: if the user's partition keeps the rollout below the
   point, wait (``WaitingForPartition``); otherwise allow exactly ``point`` pods on the
   new revision and wait until that many are available (``WaitingForPods``); then create
   the Jobs of every hook of the point at once and wait for all (``WaitingForHook``).
4. A hook failed with ``Abort`` (including a Job past its deadline) stops the rollout of
   the revision for good (``HookFailed``); the allowance stays at that point.
5. With every point passed the allowance is the partition cap (``HooksSucceeded``).

Rollover: hooks recorded for another revision that have not finished are Cancelled
and their Jobs deleted; no further hook of that revision starts. ``status.hooks`` keeps
the hooks of the updated revision plus the hooks cancelled by the latest rollover.

Hooks run only for a rollout, i.e. when there is a source revision different from the
target one: creating a CollaSet runs no hook (there is nothing to roll out from).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from hooks.models import (
    FailurePolicy,
    HookPhase,
    HookStatus,
    LifecycleHook,
    RetainPolicy,
    RolloutType,
    resolve_point,
)
from hooks.rendering import JobView, name_job, render_job

#: Slack past a Job's activeDeadlineSeconds before the planner itself calls the hook failed
#: (the Job controller normally fails it first, with reason DeadlineExceeded).
DEADLINE_GRACE_SECONDS: Final = 30


class HookReason(StrEnum):
    """Why the rollout is where it is, as far as hooks are concerned (a condition reason)."""

    NO_HOOKS = "NoHooks"
    WAITING_FOR_PARTITION = "WaitingForPartition"
    WAITING_FOR_PODS = "WaitingForPods"
    WAITING_FOR_HOOK = "WaitingForHook"
    HOOK_FAILED = "HookFailed"
    HOOKS_SUCCEEDED = "HooksSucceeded"


class JobDeletion(StrEnum):
    CANCELLED = "Cancelled"
    RETENTION = "Retention"


class EventReason(StrEnum):
    HOOK_STARTED = "HookStarted"
    HOOK_SUCCEEDED = "HookSucceeded"
    HOOK_FAILED = "HookFailed"
    HOOK_FAILURE_IGNORED = "HookFailureIgnored"
    HOOK_CANCELLED = "HookCancelled"


@dataclass(frozen=True, kw_only=True)
class HookInputs:
    """Everything :func:`plan_hooks` looks at; built by the reconciler from one snapshot."""

    collaset: str
    namespace: str
    hooks: Sequence[LifecycleHook]
    replicas: int
    #: Pods the user's strategy lets onto the new revision (replicas - partition, or the byLabel count).
    partition_cap: int
    #: The rollout's source revision (status.currentRevision); None when there is none yet.
    from_revision: str | None
    to_revision: str
    to_revision_uid: str
    rollout_type: RolloutType
    statuses: Sequence[HookStatus]
    jobs: Sequence[JobView]
    #: Available (service-available, not terminating) pods on ``to_revision``.
    updated_available: int
    now: datetime


@dataclass(frozen=True, kw_only=True)
class CreateJob:
    hook: str
    name: str
    manifest: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class DeleteJob:
    """Delete a hook Job (background propagation); apply after the status write that records why."""

    name: str
    hook: str
    revision: str
    why: JobDeletion


@dataclass(frozen=True, kw_only=True)
class HookEvent:
    reason: EventReason
    message: str
    warning: bool = False


@dataclass(frozen=True, kw_only=True)
class HookDecision:
    """What the hooks allow now and what to change to get further."""

    #: How many pods may be on the new revision right now.
    allowed_updated: int
    reason: HookReason
    message: str
    #: The rollout of the revision stopped for good (an Abort hook failed).
    stopped: bool = False
    statuses: tuple[HookStatus, ...] = ()
    create_jobs: tuple[CreateJob, ...] = ()
    delete_jobs: tuple[DeleteJob, ...] = ()
    events: tuple[HookEvent, ...] = ()
    #: Short text for the ``status.hookPhase`` printer column; None without hooks.
    summary: str | None = None
    #: Seconds until a running hook's deadline needs checking again.
    requeue_after: float | None = None

    @property
    def done(self) -> bool:
        """No hook holds the rollout back (none configured, not a rollout, or all passed)."""
        return self.reason in (HookReason.NO_HOOKS, HookReason.HOOKS_SUCCEEDED)

    @property
    def condition_text(self) -> str:
        """``Reason: message``, ``WaitingForHook: db-migrate (50%) running job web-db-migrate-1a2b3c4d``."""
        return f"{self.reason.value}: {self.message}"


@dataclass
class _Draft:
    """Mutable scratch of one planning pass; frozen into a HookDecision at the end."""

    inputs: HookInputs
    creates: list[CreateJob] = field(default_factory=list)
    deletes: dict[str, DeleteJob] = field(default_factory=dict)
    events: list[HookEvent] = field(default_factory=list)
    requeue_after: float | None = None

    def delete(self, job: DeleteJob) -> None:
        self.deletes.setdefault(job.name, job)

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


def plan_hooks(inputs: HookInputs) -> HookDecision:
    """Decide the hook side of one reconcile; see the module docstring for the algorithm."""
    draft = _Draft(inputs=inputs)
    hooks = {hook.name: hook for hook in inputs.hooks}
    cap = max(0, min(inputs.partition_cap, inputs.replicas))
    cancelled = _cancel_superseded(draft)
    _clean_up_jobs(draft, hooks)

    is_rollout = inputs.from_revision is not None and inputs.from_revision != inputs.to_revision
    recorded = {s.name: s for s in inputs.statuses if s.revision == inputs.to_revision and s.name in hooks}
    if not hooks or not is_rollout:
        return _freeze(
            draft,
            allowed=cap,
            reason=HookReason.NO_HOOKS,
            message="no lifecycle hooks" if not hooks else "no rollout in progress",
            current=list(recorded.values()),
            cancelled=cancelled,
        )

    jobs = {job.name: job for job in inputs.jobs if job.collaset == inputs.collaset and not job.deleting}
    entries = {name: _refresh(draft, hook, recorded.get(name), jobs) for name, hook in hooks.items()}
    allowed, reason, message, stopped = _walk_points(draft, hooks, entries, cap)
    return _freeze(
        draft,
        allowed=allowed,
        reason=reason,
        message=message,
        current=list(entries.values()),
        cancelled=cancelled,
        stopped=stopped,
    )


def _cancel_superseded(draft: _Draft) -> list[HookStatus]:
    """Cancel unfinished hooks of other revisions; return the Cancelled records to keep."""
    inputs = draft.inputs
    old = [s for s in inputs.statuses if s.revision != inputs.to_revision]
    active_revisions = {s.revision for s in old if not s.phase.finished}
    if not active_revisions:
        latest = max(
            (s for s in old if s.phase == HookPhase.CANCELLED and s.finish_time is not None),
            key=lambda s: s.finish_time or inputs.now,
            default=None,
        )
        if latest is None:
            return []
        return [s for s in old if s.revision == latest.revision and s.phase == HookPhase.CANCELLED]
    kept: list[HookStatus] = []
    for status in old:
        if status.revision not in active_revisions or status.phase.finished:
            continue
        was_running = status.phase == HookPhase.RUNNING
        verb = "cancelled" if was_running else "not started"
        message = f"{verb}: revision {inputs.to_revision} superseded {status.revision}"
        kept.append(
            status.model_copy(
                update={"phase": HookPhase.CANCELLED, "finish_time": inputs.now, "message": message}
            )
        )
        if was_running and status.job_name:
            draft.delete(
                DeleteJob(
                    name=status.job_name,
                    hook=status.name,
                    revision=status.revision,
                    why=JobDeletion.CANCELLED,
                )
            )
            draft.events.append(
                HookEvent(
                    reason=EventReason.HOOK_CANCELLED,
                    message=f"hook {status.name} ({status.revision}): job {status.job_name} {message}",
                    warning=True,
                )
            )
    return kept


def _clean_up_jobs(draft: _Draft, hooks: dict[str, LifecycleHook]) -> None:
    """Delete running Jobs nobody waits for any more, and finished Jobs their retainPolicy drops."""
    inputs = draft.inputs
    for job in inputs.jobs:
        if job.collaset != inputs.collaset or job.deleting:
            continue
        hook = hooks.get(job.hook)
        phase = job.outcome.phase
        if phase == HookPhase.RUNNING:
            if job.revision != inputs.to_revision or hook is None:
                draft.delete(
                    DeleteJob(name=job.name, hook=job.hook, revision=job.revision, why=JobDeletion.CANCELLED)
                )
        elif hook is not None and _drop_after(hook.retain_policy, phase):
            draft.delete(
                DeleteJob(name=job.name, hook=job.hook, revision=job.revision, why=JobDeletion.RETENTION)
            )


def _drop_after(policy: RetainPolicy, phase: HookPhase) -> bool:
    if policy == RetainPolicy.NEVER:
        return True
    return policy == RetainPolicy.ON_FAILURE and phase == HookPhase.SUCCEEDED


def _refresh(
    draft: _Draft, hook: LifecycleHook, recorded: HookStatus | None, jobs: dict[str, JobView]
) -> HookStatus:
    """The hook's record for the target revision, brought up to date with its Job."""
    inputs = draft.inputs
    job_name = name_job(collaset=inputs.collaset, hook=hook.name, revision=inputs.to_revision)
    try:
        point = resolve_point(hook.progress_point, replicas=inputs.replicas)
    except ValueError as error:
        # Admission rejects this; an object stored before the webhook ran fails the hook visibly instead.
        point = inputs.replicas
        entry = recorded or HookStatus(name=hook.name, revision=inputs.to_revision, point=point)
        if entry.phase.finished:
            return entry
        return _fail(draft, hook, entry, job_name=None, why=str(error), when=inputs.now)
    entry = recorded or HookStatus(name=hook.name, revision=inputs.to_revision, point=point)
    if entry.phase.finished:
        return entry
    job = jobs.get(job_name)
    if entry.phase == HookPhase.PENDING:
        if job is None:
            return entry.model_copy(update={"point": point})
        # The Job exists but the status write that recorded its start was lost: adopt it.
        entry = entry.model_copy(
            update={
                "phase": HookPhase.RUNNING,
                "job_name": job_name,
                "start_time": inputs.now,
                "point": point,
            }
        )
    if job is None:
        # Recorded as running, Job not there (deleted by hand): create it again; the name makes it idempotent.
        draft.creates.append(_create(inputs, hook, entry.point, job_name))
        return entry.model_copy(
            update={"job_name": job_name, "message": f"job {job_name} not found, creating it again"}
        )
    outcome = job.outcome
    if outcome.phase == HookPhase.SUCCEEDED:
        draft.events.append(
            HookEvent(
                reason=EventReason.HOOK_SUCCEEDED, message=f"hook {hook.name}: job {job.name} succeeded"
            )
        )
        return entry.model_copy(
            update={
                "phase": HookPhase.SUCCEEDED,
                "job_name": job.name,
                "finish_time": outcome.finished_at or inputs.now,
                "message": f"job {job.name} succeeded",
            }
        )
    if outcome.phase == HookPhase.FAILED:
        return _fail(
            draft, hook, entry, job_name=job.name, why=outcome.message, when=outcome.finished_at or inputs.now
        )
    deadline = hook.effective_deadline_seconds() + DEADLINE_GRACE_SECONDS
    elapsed = (inputs.now - entry.start_time).total_seconds() if entry.start_time else 0.0
    if elapsed >= deadline:
        reason = f"DeadlineExceeded: still running {int(elapsed)}s after start (deadline {deadline}s)"
        return _fail(draft, hook, entry, job_name=job.name, why=reason, when=inputs.now)
    draft.requeue(deadline - elapsed)
    return entry.model_copy(update={"job_name": job.name, "message": f"job {job.name} running"})


def _fail(
    draft: _Draft, hook: LifecycleHook, entry: HookStatus, *, job_name: str | None, why: str, when: datetime
) -> HookStatus:
    """Record a failed hook (its Job failed or timed out, or the hook cannot run at all)."""
    ignored = hook.failure_policy == FailurePolicy.IGNORE
    message = (f"job {job_name} failed: {why}" if job_name else why) + (
        " (ignored: failurePolicy Ignore)" if ignored else ""
    )
    draft.events.append(
        HookEvent(
            reason=EventReason.HOOK_FAILURE_IGNORED if ignored else EventReason.HOOK_FAILED,
            message=f"hook {hook.name}: {message}",
            warning=True,
        )
    )
    return entry.model_copy(
        update={"phase": HookPhase.FAILED, "job_name": job_name, "finish_time": when, "message": message}
    )


def _create(inputs: HookInputs, hook: LifecycleHook, point: int, job_name: str) -> CreateJob:
    assert inputs.from_revision is not None  # only rollouts run hooks
    manifest = render_job(
        collaset=inputs.collaset,
        namespace=inputs.namespace,
        hook=hook,
        point=point,
        from_revision=inputs.from_revision,
        to_revision=inputs.to_revision,
        rollout_type=inputs.rollout_type,
        owner_revision_uid=inputs.to_revision_uid,
    )
    return CreateJob(hook=hook.name, name=job_name, manifest=manifest)


def _walk_points(
    draft: _Draft,
    hooks: dict[str, LifecycleHook],
    entries: dict[str, HookStatus],
    cap: int,
) -> tuple[int, HookReason, str, bool]:
    """Steps 2-5 of the algorithm: ``(allowed_updated, reason, message, stopped)``; starts due hooks."""
    inputs = draft.inputs
    for point in sorted({entry.point for entry in entries.values()}):
        names = sorted(name for name, entry in entries.items() if entry.point == point)
        at = [entries[name] for name in names]
        aborted = [
            e
            for e in at
            if e.phase == HookPhase.FAILED and hooks[e.name].failure_policy == FailurePolicy.ABORT
        ]
        if aborted:
            failures = "; ".join(f"{_label(hooks[e.name], e)} {e.message}" for e in aborted)
            return (
                min(point, cap),
                HookReason.HOOK_FAILED,
                f"{failures}; rollout of {inputs.to_revision} stopped",
                True,
            )
        if all(e.phase.finished for e in at):
            continue
        waiting = ", ".join(_label(hooks[e.name], e) for e in at if not e.phase.finished)
        started = any(e.phase == HookPhase.RUNNING for e in at)
        if not started and point > cap:
            message = f"hook {waiting} needs {point} pods on the new revision; the partition allows {cap}"
            return cap, HookReason.WAITING_FOR_PARTITION, message, False
        if not started and inputs.updated_available < point:
            message = f"{inputs.updated_available}/{point} new pods available before hook {waiting}"
            return point, HookReason.WAITING_FOR_PODS, message, False
        for entry in at:
            if entry.phase == HookPhase.PENDING:
                entries[entry.name] = _start(draft, hooks[entry.name], entry)
        running = ", ".join(
            f"{_label(hooks[name], entries[name])} running job {entries[name].job_name}"
            for name in names
            if entries[name].phase == HookPhase.RUNNING
        )
        return min(point, cap), HookReason.WAITING_FOR_HOOK, running, False
    done = sum(1 for e in entries.values() if e.phase == HookPhase.SUCCEEDED)
    return cap, HookReason.HOOKS_SUCCEEDED, f"{done}/{len(entries)} hooks succeeded", False


def _start(draft: _Draft, hook: LifecycleHook, entry: HookStatus) -> HookStatus:
    inputs = draft.inputs
    job_name = name_job(collaset=inputs.collaset, hook=hook.name, revision=inputs.to_revision)
    draft.creates.append(_create(inputs, hook, entry.point, job_name))
    draft.events.append(
        HookEvent(
            reason=EventReason.HOOK_STARTED,
            message=f"hook {_label(hook, entry)}: created job {job_name} for revision {inputs.to_revision}",
        )
    )
    draft.requeue(hook.effective_deadline_seconds() + DEADLINE_GRACE_SECONDS)
    return entry.model_copy(
        update={
            "phase": HookPhase.RUNNING,
            "job_name": job_name,
            "start_time": inputs.now,
            "message": "job created",
        }
    )


def _label(hook: LifecycleHook, entry: HookStatus) -> str:
    """``db-migrate (50%)``: the hook with its point as the user wrote it."""
    raw = hook.progress_point
    return f"{hook.name} ({raw})" if isinstance(raw, str) else f"{hook.name} ({entry.point})"


def _freeze(
    draft: _Draft,
    *,
    allowed: int,
    reason: HookReason,
    message: str,
    current: Iterable[HookStatus],
    cancelled: Sequence[HookStatus],
    stopped: bool = False,
) -> HookDecision:
    ordered = sorted(current, key=lambda s: (s.point, s.name))
    return HookDecision(
        allowed_updated=allowed,
        reason=reason,
        message=message,
        stopped=stopped,
        statuses=(*ordered, *sorted(cancelled, key=lambda s: (s.point, s.name))),
        create_jobs=tuple(draft.creates),
        delete_jobs=tuple(draft.deletes.values()),
        events=tuple(draft.events),
        summary=summarize_hooks(ordered, stopped=stopped),
        requeue_after=draft.requeue_after,
    )


def summarize_hooks(statuses: Sequence[HookStatus], *, stopped: bool = False) -> str | None:
    """The ``hookPhase`` printer column: ``Running a``, ``Waiting b``, ``Failed a``, ``Succeeded 3/3``.

    ``statuses`` are the target revision's records, ordered by point.
    """
    if not statuses:
        return None
    by_phase: dict[HookPhase, list[str]] = {}
    for status in statuses:
        by_phase.setdefault(status.phase, []).append(status.name)
    if stopped:
        return f"Failed {','.join(by_phase.get(HookPhase.FAILED, []))}"
    if HookPhase.RUNNING in by_phase:
        return f"Running {','.join(by_phase[HookPhase.RUNNING])}"
    pending = [s for s in statuses if s.phase == HookPhase.PENDING]
    if pending:
        first = min(s.point for s in pending)
        return f"Waiting {','.join(s.name for s in pending if s.point == first)}"
    return f"Succeeded {len(by_phase.get(HookPhase.SUCCEEDED, []))}/{len(statuses)}"
