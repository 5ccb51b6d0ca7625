"""One CollaSet reconcile's decision, pure: observed objects in, revision actions, plan and status out.

The "decide" step between the kopf indexes (observe) and :mod:`rollouts.operator.collasets_applying`
(apply). It chains the pure planners in the order the rollout needs:

1. :func:`rollouts.planning.revisions.plan_revisions` names the updated revision. While
   it has to be created (or bumped, for a rollback) nothing else is decided: the hook
   Jobs need its uid and the pods its template, so the next reconcile, once the watch
   shows it, goes on;
2. :func:`rollouts.planning.updating.count_pods` and
   :func:`~rollouts.planning.updating.compute_update_cap` feed
   :func:`hooks.planning.plan_hooks`, whose ``allowed_updated`` caps the rollout;
3. :func:`rollouts.planning.updating.plan_collaset` plans the pod actions;
4. the status is computed from the snapshot (never from what the apply will do), with
   condition transition times kept while a condition's status stays the same.

The pod manifest of a new pod is rendered here too (:func:`render_pod`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from hooks.planning import HookDecision, HookInputs, plan_hooks
from hooks.rendering import JobView, view_job
from lifecycle.labels import CONTROL, CONTROL_VALUE, SERVICE_READY
from lifecycle.schema import Condition
from rollouts.api.collasets import API_VERSION, KIND, REVISION_LABEL, CollaSet, CollaSetStatus
from rollouts.planning.revisions import (
    FIRST_REVISION_ANNOTATION,
    BumpRevision,
    CreateRevision,
    RevisionAction,
    RevisionView,
    classify_rollout,
    plan_revisions,
    read_template,
)
from rollouts.planning.updating import (
    CollaSetSnapshot,
    Plan,
    compute_update_cap,
    count_pods,
    plan_collaset,
    view_pod,
)

#: Look again at least this often even when nothing happens (a missed event costs at most this).
RESYNC_SECONDS: Final = 300.0


class InvalidCollaSet(Exception):
    """The stored CollaSet does not parse (admission was bypassed); the message says why."""


@dataclass(frozen=True, kw_only=True)
class Observed:
    """One CollaSet and its children as the indexes hold them (raw API dicts)."""

    collaset: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]]
    revisions: Sequence[Mapping[str, Any]]
    jobs: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, kw_only=True)
class Decision:
    collaset: CollaSet
    updated_revision: str
    #: The updated revision is an earlier one brought back.
    rollback: bool
    revision_actions: tuple[RevisionAction, ...]
    #: status.collisionCount the revision names were computed with.
    collision_count: int = 0
    #: None while the updated revision is being created or bumped (decide again once it shows).
    hooks: HookDecision | None = None
    plan: Plan | None = None
    #: The new ``status``; None when it equals the stored one.
    status: dict[str, Any] | None = None
    requeue_after: float | None = None

    @property
    def waits_for_revision(self) -> bool:
        return self.plan is None


def parse_collaset(obj: Mapping[str, Any]) -> CollaSet:
    try:
        return CollaSet.model_validate(dict(obj))
    except ValidationError as error:
        raise InvalidCollaSet(str(error)) from error


def view_revision(obj: Mapping[str, Any]) -> RevisionView:
    meta = obj.get("metadata") or {}
    return RevisionView(
        name=str(meta.get("name", "")),
        revision=int(obj.get("revision") or 0),
        data=obj.get("data") or {},
        uid=str(meta.get("uid", "")),
        created=_parse_time(meta.get("creationTimestamp")),
        first_revision=_parse_int((meta.get("annotations") or {}).get(FIRST_REVISION_ANNOTATION)),
    )


def decide(observed: Observed, *, now: datetime) -> Decision:
    """The decision of one reconcile; see the module docstring for the steps."""
    collaset = parse_collaset(observed.collaset)
    meta = collaset.metadata
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    spec = collaset.spec
    status = collaset.status or CollaSetStatus()
    revisions = [view_revision(r) for r in observed.revisions]
    pods = [view_pod(p) for p in observed.pods]
    revision_plan = plan_revisions(
        collaset=name,
        namespace=namespace,
        collaset_uid=str(meta.get("uid", "")),
        template=spec.template,
        selector_labels=spec.selector.match_labels or {},
        revisions=revisions,
        collision_count=status.collision_count,
        history_limit=spec.history_limit,
        current_revision=status.current_revision,
        pod_revisions={p.revision for p in pods if p.revision},
    )
    base = Decision(
        collaset=collaset,
        updated_revision=revision_plan.updated_revision,
        rollback=revision_plan.rollback,
        revision_actions=revision_plan.actions,
        collision_count=revision_plan.collision_count,
    )
    if any(isinstance(a, CreateRevision | BumpRevision) for a in revision_plan.actions):
        return base
    by_name = {r.name: r for r in revisions}
    updated = by_name[revision_plan.updated_revision]
    snapshot = CollaSetSnapshot(
        name=name,
        namespace=namespace,
        spec=spec,
        updated_revision=updated.name,
        current_revision=status.current_revision,
        templates={r.name: read_template(r.data) for r in revisions},
        pods=pods,
        now=now,
    )
    counts = count_pods(pods, updated_revision=updated.name)
    jobs = [view for view in (view_job(j) for j in observed.jobs) if view is not None]
    hooks = plan_hooks(
        HookInputs(
            collaset=name,
            namespace=namespace,
            hooks=spec.lifecycle_hooks,
            replicas=spec.replicas,
            partition_cap=compute_update_cap(snapshot),
            from_revision=status.current_revision,
            to_revision=updated.name,
            to_revision_uid=updated.uid,
            rollout_type=classify_rollout(
                from_revision=by_name.get(status.current_revision or ""), to_revision=updated
            ),
            statuses=status.hooks,
            jobs=_own_jobs(jobs, name),
            updated_available=counts.updated_available,
            now=now,
        )
    )
    plan = plan_collaset(snapshot, hooks=hooks)
    new_status = build_status(
        collaset=collaset,
        plan=plan,
        hooks=hooks,
        updated_revision=updated.name,
        collision_count=revision_plan.collision_count,
        now=now,
    )
    stored = _stored_status(observed.collaset)
    requeue = _earliest(plan.requeue_after, hooks.requeue_after, RESYNC_SECONDS)
    return Decision(
        collaset=collaset,
        updated_revision=updated.name,
        rollback=revision_plan.rollback,
        revision_actions=revision_plan.actions,
        collision_count=revision_plan.collision_count,
        hooks=hooks,
        plan=plan,
        status=None if new_status == stored else new_status,
        requeue_after=requeue,
    )


def build_status(
    *,
    collaset: CollaSet,
    plan: Plan,
    hooks: HookDecision,
    updated_revision: str,
    collision_count: int,
    now: datetime,
) -> dict[str, Any]:
    """The whole ``status`` as the API stores it (camelCase, no nulls)."""
    old = collaset.status or CollaSetStatus()
    generation = collaset.metadata.get("generation")
    counts = plan.counts
    status = CollaSetStatus(
        observed_generation=generation if isinstance(generation, int) else None,
        current_revision=plan.current_revision,
        updated_revision=updated_revision,
        collision_count=collision_count,
        replicas=counts.replicas,
        ready_replicas=counts.ready,
        available_replicas=counts.available,
        updated_replicas=counts.updated,
        updated_ready_replicas=counts.updated_ready,
        updated_available_replicas=counts.updated_available,
        operating_replicas=counts.operating,
        conditions=merge_conditions(old.conditions, plan.conditions, now=now),
        hooks=list(hooks.statuses),
        hook_phase=hooks.summary,
    )
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def merge_conditions(old: Sequence[Condition], new: Sequence[Condition], *, now: datetime) -> list[Condition]:
    """``new`` with each condition's lastTransitionTime kept while its status did not change."""
    before = {c.type: c for c in old}
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    merged = []
    for condition in new:
        previous = before.get(condition.type)
        since = (
            previous.last_transition_time
            if previous is not None and previous.status == condition.status and previous.last_transition_time
            else stamp
        )
        merged.append(condition.model_copy(update={"last_transition_time": since}))
    return merged


def render_pod(
    *, collaset: str, namespace: str, collaset_uid: str, revision: str, template: Mapping[str, Any]
) -> dict[str, Any]:
    """A new pod of the CollaSet on ``revision``: template + control labels, owner, readiness gate."""
    metadata = copy.deepcopy(dict(template.get("metadata") or {}))
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    metadata.pop("name", None)
    metadata["generateName"] = f"{collaset}-"
    metadata["namespace"] = namespace
    metadata["labels"] = {**(metadata.get("labels") or {}), CONTROL: CONTROL_VALUE, REVISION_LABEL: revision}
    metadata["ownerReferences"] = [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": collaset,
            "uid": collaset_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    gates = list(spec.get("readinessGates") or [])
    if not any(g.get("conditionType") == SERVICE_READY for g in gates):
        gates.append({"conditionType": SERVICE_READY})
    spec["readinessGates"] = gates
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _own_jobs(jobs: Sequence[JobView], collaset: str) -> list[JobView]:
    return [j for j in jobs if j.collaset == collaset]


def _stored_status(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = obj.get("status")
    if not isinstance(raw, Mapping):
        return None
    try:
        return CollaSetStatus.model_validate(dict(raw)).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
    except ValidationError:
        return None


def _earliest(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _parse_int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None
