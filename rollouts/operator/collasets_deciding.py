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
   condition transition times kept while a condition's status stays the same;
5. progress (:func:`track_progress`): the stored status is the previous observation, so
   comparing it with the new one tells whether the rollout moved; ``lastProgressTime``
   records when, and with ``progressDeadlineSeconds`` the ``Progressing`` condition turns
   False (``ProgressDeadlineExceeded``) once it is too long ago. Events are derived from
   condition changes (:func:`condition_events`) and posted once the status is written.

The default PodTransitionRule of ``rollingUpdate.maxUnavailable`` is planned first
(:func:`plan_default_rule`): created or changed before any pod is touched, so the budget
holds from the first pod on; deleted when the field is unset. The pod manifest of a new
pod is rendered here too (:func:`render_pod`), and the rules' rejections of pods are read
for the condition messages (:func:`read_rejections`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from hooks.planning import HookDecision, HookInputs, plan_hooks
from hooks.rendering import COLLASET_LABEL, JobView, view_job
from lifecycle.labels import CONTROL, CONTROL_VALUE, SERVICE_READY
from lifecycle.rules import models as ptr
from lifecycle.schema import Condition
from lifecycle.states import Stage
from rollouts.api.collasets import (
    API_VERSION,
    KIND,
    REVISION_LABEL,
    CollaSet,
    CollaSetStatus,
    ConditionType,
    ProgressReason,
    default_rule_name,
)
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
    PodView,
    Rejection,
    UpdateReason,
    compute_update_cap,
    count_pods,
    plan_collaset,
    view_pod,
)

#: Look again at least this often even when nothing happens (a missed event costs at most this).
RESYNC_SECONDS: Final = 300.0
#: The one rule of the default PodTransitionRule.
DEFAULT_RULE: Final = "max-unavailable"


class InvalidCollaSet(Exception):
    """The stored CollaSet does not parse (admission was bypassed); the message says why."""


@dataclass(frozen=True, kw_only=True)
class Observed:
    """One CollaSet and its children as the indexes hold them (raw API dicts)."""

    collaset: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]]
    revisions: Sequence[Mapping[str, Any]]
    jobs: Sequence[Mapping[str, Any]]
    #: PodTransitionRules of the CollaSet's namespace (the default one included).
    rules: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True, kw_only=True)
class CreateRule:
    """Create the default PodTransitionRule (a 409 means the watch lags: it is there)."""

    name: str
    manifest: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ReplaceRuleSpec:
    """Make the default PodTransitionRule's spec ``spec``, guarded by its resourceVersion."""

    name: str
    resource_version: str
    spec: dict[str, Any]
    #: JSON merge patch of the stored spec into ``spec`` (keys gone from it set to null).
    patch: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class DeleteRule:
    name: str
    uid: str


RuleAction = CreateRule | ReplaceRuleSpec | DeleteRule


@dataclass(frozen=True, kw_only=True)
class RulePlan:
    actions: tuple[RuleAction, ...] = ()
    #: Why the default rule cannot be managed (its name belongs to another object); None if it can.
    conflict: str | None = None


@dataclass(frozen=True, kw_only=True)
class EventNote:
    """An Event on the CollaSet, posted once the status that caused it is written."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Progress:
    """What :func:`track_progress` says: the new lastProgressTime, the condition, when to look again."""

    last_progress_time: str
    #: None without progressDeadlineSeconds.
    condition: Condition | None = None
    #: Seconds until the deadline passes, while a rollout runs.
    requeue_after: float | None = None


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
    #: The default PodTransitionRule (``rollingUpdate.maxUnavailable``).
    rule_actions: tuple[RuleAction, ...] = ()
    rule_conflict: str | None = None
    #: Events to post once ``status`` is written.
    events: tuple[EventNote, ...] = ()

    @property
    def waits_for_revision(self) -> bool:
        """Nothing but revisions and the default rule is applied: they must show first."""
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


def decide(
    observed: Observed,
    *,
    now: datetime,
    view: Callable[[Mapping[str, Any]], PodView] = view_pod,
) -> Decision:
    """The decision of one reconcile; see the module docstring for the steps.

    ``view`` turns a raw pod into its :class:`PodView` (the operator passes a version cache
    of :func:`view_pod`).
    """
    collaset = parse_collaset(observed.collaset)
    meta = collaset.metadata
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    spec = collaset.spec
    status = collaset.status or CollaSetStatus()
    revisions = [view_revision(r) for r in observed.revisions]
    pods = [view(p) for p in observed.pods]
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
    rules = plan_default_rule(collaset, observed.rules)
    base = Decision(
        collaset=collaset,
        updated_revision=revision_plan.updated_revision,
        rollback=revision_plan.rollback,
        revision_actions=revision_plan.actions,
        collision_count=revision_plan.collision_count,
        rule_actions=rules.actions,
        rule_conflict=rules.conflict,
    )
    if any(isinstance(a, CreateRevision | BumpRevision) for a in revision_plan.actions) or any(
        isinstance(a, CreateRule | ReplaceRuleSpec) for a in rules.actions
    ):
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
        rejections=read_rejections(observed.rules),
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
    status, progress = build_status(
        collaset=collaset,
        plan=plan,
        hooks=hooks,
        updated_revision=updated.name,
        collision_count=revision_plan.collision_count,
        now=now,
    )
    new_status = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    stored = _stored_status(observed.collaset)
    requeue = _earliest(plan.requeue_after, hooks.requeue_after, progress.requeue_after, RESYNC_SECONDS)
    changed = new_status != stored
    return Decision(
        collaset=collaset,
        updated_revision=updated.name,
        rollback=revision_plan.rollback,
        revision_actions=revision_plan.actions,
        collision_count=revision_plan.collision_count,
        hooks=hooks,
        plan=plan,
        status=new_status if changed else None,
        requeue_after=requeue,
        rule_actions=rules.actions,
        rule_conflict=rules.conflict,
        events=condition_events(old=collaset.status, new=status) if changed else (),
    )


def build_status(
    *,
    collaset: CollaSet,
    plan: Plan,
    hooks: HookDecision,
    updated_revision: str,
    collision_count: int,
    now: datetime,
) -> tuple[CollaSetStatus, Progress]:
    """The whole ``status`` (dump it camelCase, without nulls) and the progress it records."""
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
        hooks=list(hooks.statuses),
        hook_phase=hooks.summary,
    )
    progress = track_progress(
        old=collaset.status,
        new=status,
        conditions=plan.conditions,
        desired=collaset.spec.replicas,
        deadline_seconds=collaset.spec.progress_deadline_seconds,
        now=now,
    )
    conditions = [*plan.conditions, *([progress.condition] if progress.condition is not None else [])]
    status = status.model_copy(
        update={
            "conditions": merge_conditions(old.conditions, conditions, now=now),
            "last_progress_time": progress.last_progress_time,
        }
    )
    return status, progress


def made_progress(*, old: CollaSetStatus, new: CollaSetStatus, desired: int) -> bool:
    """Whether ``new`` is further than ``old`` (the previous observation), as a Deployment counts it.

    Progress: a new spec generation, another updated or current revision, more pods updated,
    updated-ready, updated-available or available, fewer pods on old revisions, a pod count
    closer to ``replicas``, or a hook changing phase.
    """
    return (
        old.observed_generation != new.observed_generation
        or old.updated_revision != new.updated_revision
        or old.current_revision != new.current_revision
        or new.updated_replicas > old.updated_replicas
        or new.updated_ready_replicas > old.updated_ready_replicas
        or new.updated_available_replicas > old.updated_available_replicas
        or new.available_replicas > old.available_replicas
        or new.replicas - new.updated_replicas < old.replicas - old.updated_replicas
        or abs(new.replicas - desired) < abs(old.replicas - desired)
        or _hook_phases(old) != _hook_phases(new)
    )


def track_progress(
    *,
    old: CollaSetStatus | None,
    new: CollaSetStatus,
    conditions: Sequence[Condition],
    desired: int,
    deadline_seconds: int | None,
    now: datetime,
) -> Progress:
    """lastProgressTime and, with a deadline, the Progressing condition (pure; ``now`` is the clock).

    A rollout runs while the Scale or Update condition is False, except when paused
    (Unknown, ``Paused``, the clock restarts on resume: a spec change is progress) or held
    by the partition (``Complete``). A running rollout whose last progress is
    ``deadline_seconds`` or more ago is ``ProgressDeadlineExceeded``; progress or completion
    clears it.
    """
    stamp = _stamp(now)
    last = old.last_progress_time if old is not None else None
    if old is None or last is None or made_progress(old=old, new=new, desired=desired):
        last = stamp
    if deadline_seconds is None:
        return Progress(last_progress_time=last)
    by_type = {c.type: c for c in conditions}
    update, scale = by_type.get(ConditionType.UPDATE), by_type.get(ConditionType.SCALE)

    def condition(status: Any, reason: ProgressReason, message: str) -> Condition:
        return Condition(type=ConditionType.PROGRESSING, status=status, reason=reason, message=message)

    if update is not None and update.reason == UpdateReason.PAUSED:
        return Progress(
            last_progress_time=last,
            condition=condition("Unknown", ProgressReason.PAUSED, "paused: no progress deadline"),
        )
    update_done = update is None or update.status == "True" or update.reason == UpdateReason.PARTITIONED
    scale_done = scale is None or scale.status == "True"
    if update_done and scale_done:
        what = "partition reached" if update is not None and update.status != "True" else "rollout complete"
        return Progress(
            last_progress_time=last,
            condition=condition("True", ProgressReason.COMPLETE, f"{what}: revision {new.updated_revision}"),
        )
    elapsed = (now - (_parse_time(last) or now)).total_seconds()
    if elapsed >= deadline_seconds:
        waiting = scale if update_done else update
        detail = f": {waiting.message}" if waiting is not None and waiting.message else ""
        message = (
            f"no progress for more than {deadline_seconds}s (progressDeadlineSeconds) since {last}{detail}"
        )
        return Progress(
            last_progress_time=last,
            condition=condition("False", ProgressReason.PROGRESS_DEADLINE_EXCEEDED, message),
        )
    return Progress(
        last_progress_time=last,
        condition=condition(
            "True",
            ProgressReason.PROGRESSING,
            f"revision {new.updated_revision} rolling out; last progress at {last}, "
            f"deadline {deadline_seconds}s",
        ),
        requeue_after=max(deadline_seconds - elapsed, 0.0) + 1.0,
    )


def condition_events(*, old: CollaSetStatus | None, new: CollaSetStatus) -> tuple[EventNote, ...]:
    """Events for condition changes between the stored status and the new one.

    ``ProgressDeadlineExceeded`` (Warning) when the Progressing condition turns to it and
    ``ProgressResumed`` when it leaves it; ``ScaleCompleted`` when the Scale condition turns
    True; ``RolloutCompleted`` when ``currentRevision`` moves to the updated revision.
    """
    if old is None:
        return ()
    before = {c.type: c for c in old.conditions}
    after = {c.type: c for c in new.conditions}
    notes: list[EventNote] = []
    exceeded = ProgressReason.PROGRESS_DEADLINE_EXCEEDED
    was, now_progress = before.get(ConditionType.PROGRESSING), after.get(ConditionType.PROGRESSING)
    was_exceeded = was is not None and was.reason == exceeded
    is_exceeded = now_progress is not None and now_progress.reason == exceeded
    if is_exceeded and not was_exceeded and now_progress is not None:
        notes.append(EventNote(type="Warning", reason=exceeded, message=now_progress.message))
    elif was_exceeded and not is_exceeded:
        why = now_progress.message if now_progress is not None else "progressDeadlineSeconds unset"
        notes.append(EventNote(type="Normal", reason="ProgressResumed", message=why))
    scale_before, scale_after = before.get(ConditionType.SCALE), after.get(ConditionType.SCALE)
    scaled = scale_after is not None and scale_after.status == "True"
    if scale_before is not None and scale_before.status != "True" and scale_after is not None and scaled:
        notes.append(EventNote(type="Normal", reason="ScaleCompleted", message=scale_after.message))
    if (
        old.current_revision is not None
        and old.current_revision != new.current_revision
        and new.current_revision == new.updated_revision
    ):
        notes.append(
            EventNote(
                type="Normal",
                reason="RolloutCompleted",
                message=f"all {new.replicas} pods on revision {new.updated_revision} "
                f"(from {old.current_revision})",
            )
        )
    return tuple(notes)


def read_rejections(rules: Sequence[Mapping[str, Any]]) -> dict[str, list[Rejection]]:
    """Pod name -> the PodTransitionRules holding it, from the rules' ``status.details``.

    Read from the raw objects (no model parse per reconcile); a status written for an older
    generation of its rule, or an entry that does not parse, is skipped.
    """
    found: dict[str, list[Rejection]] = {}
    for rule in rules:
        meta = rule.get("metadata") or {}
        status = rule.get("status")
        if not isinstance(status, Mapping):
            continue
        generation = meta.get("generation")
        if generation is not None and status.get("observedGeneration") != generation:
            continue
        for detail in status.get("details") or ():
            if not isinstance(detail, Mapping) or detail.get("passed", True):
                continue
            try:
                stage = Stage(str(detail.get("stage")))
            except ValueError:
                continue
            for info in detail.get("rejectInfo") or ():
                if isinstance(info, Mapping) and info.get("reason"):
                    found.setdefault(str(detail.get("name", "")), []).append(
                        Rejection(
                            ptr=str(meta.get("name", "")),
                            rule=str(info.get("ruleName", "")),
                            stage=stage,
                            reason=str(info["reason"]),
                        )
                    )
    return found


def render_default_rule(collaset: CollaSet) -> dict[str, Any] | None:
    """The PodTransitionRule ``<collaset>-max-unavailable`` of ``rollingUpdate.maxUnavailable`` (None: unset).

    It selects the CollaSet's pods with its selector and has one availablePolicy rule; the
    CollaSet is its controlling owner, so the garbage collector deletes it with the CollaSet.
    """
    value = collaset.spec.update_strategy.rolling_update.max_unavailable
    if value is None:
        return None
    meta = collaset.metadata
    name = str(meta.get("name", ""))
    return {
        "apiVersion": ptr.API_VERSION,
        "kind": ptr.KIND,
        "metadata": {
            "name": default_rule_name(name),
            "namespace": str(meta.get("namespace", "")),
            "labels": {COLLASET_LABEL: name},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": name,
                    "uid": str(meta.get("uid", "")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "selector": collaset.spec.selector.model_dump(by_alias=True, exclude_none=True, mode="json"),
            "rules": [
                {
                    "name": DEFAULT_RULE,
                    "availablePolicy": {
                        "maxUnavailableValue": value.strip() if isinstance(value, str) else value
                    },
                }
            ],
        },
    }


def plan_default_rule(collaset: CollaSet, rules: Sequence[Mapping[str, Any]]) -> RulePlan:
    """Create, change or delete the default PodTransitionRule so it matches ``maxUnavailable``.

    Only a rule this CollaSet controls is changed or deleted; one of the same name owned by
    someone else is left alone and reported as a conflict.
    """
    meta = collaset.metadata
    name = default_rule_name(str(meta.get("name", "")))
    uid = str(meta.get("uid", ""))
    desired = render_default_rule(collaset)
    existing = next((r for r in rules if (r.get("metadata") or {}).get("name") == name), None)
    if existing is None:
        return RulePlan(actions=(CreateRule(name=name, manifest=desired),) if desired is not None else ())
    existing_meta = existing.get("metadata") or {}
    owners = [ref.get("uid") for ref in existing_meta.get("ownerReferences") or [] if ref.get("controller")]
    if owners != [uid]:
        if desired is None:
            return RulePlan()
        return RulePlan(
            conflict=f"PodTransitionRule {name} exists and is not controlled by this CollaSet: "
            "rollingUpdate.maxUnavailable is not applied; delete or rename it"
        )
    if existing_meta.get("deletionTimestamp"):
        return RulePlan()  # being deleted: created again, if still wanted, once it is gone
    if desired is None:
        return RulePlan(actions=(DeleteRule(name=name, uid=str(existing_meta.get("uid", ""))),))
    if _same_rule_spec(existing.get("spec"), desired["spec"]):
        return RulePlan()
    stored = existing.get("spec")
    return RulePlan(
        actions=(
            ReplaceRuleSpec(
                name=name,
                resource_version=str(existing_meta.get("resourceVersion", "")),
                spec=desired["spec"],
                patch=merge_patch(stored if isinstance(stored, Mapping) else {}, desired["spec"]),
            ),
        )
    )


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: maps recursively, lists whole."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch


def _same_rule_spec(existing: object, desired: Mapping[str, Any]) -> bool:
    """Equal as models, so defaults the API server or admission filled in do not count as changes."""
    if not isinstance(existing, Mapping):
        return False
    try:
        return ptr.PodTransitionRuleSpec.model_validate(
            dict(existing)
        ) == ptr.PodTransitionRuleSpec.model_validate(dict(desired))
    except ValidationError:
        return False


def _hook_phases(status: CollaSetStatus) -> list[tuple[str, str, str]]:
    return sorted((h.name, str(h.revision), str(h.phase)) for h in status.hooks)


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(old: Sequence[Condition], new: Sequence[Condition], *, now: datetime) -> list[Condition]:
    """``new`` with each condition's lastTransitionTime kept while its status did not change."""
    before = {c.type: c for c in old}
    stamp = _stamp(now)
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
