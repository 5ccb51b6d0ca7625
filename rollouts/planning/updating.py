"""Pure scale and update planning for one CollaSet: a frozen snapshot in, a Plan of typed actions out.

Second half of the "observe, decide, apply" loop. The reconciler builds a
:class:`CollaSetSnapshot` (spec, revisions, :class:`PodView` per owned pod, the clock),
asks :mod:`hooks.planning` how far the rollout may go (``HookDecision.allowed_updated``)
and calls :func:`plan_collaset`. Every pod change goes through PodOpsLifecycle:

* **scale out**: ``CreatePod(revision)``; during a rollout new pods take the updated
  revision only while fewer pods than allowed are on it, else the current one;
* **scale in**: victims (``scaleStrategy.podToDelete`` first, then pods already being
  scaled in, not-ready pods, the newest) get ``BeginOperation(scale-in)``; once the
  lifecycle allows (``operate`` label, ``operationDelaySeconds`` elapsed) ``DeletePod``;
  pods no longer needed as victims are undone;
* **update**: the pods to be on the new revision are ``replicas - partition`` (or the
  ``update-included`` pods for byLabel), capped by the hook allowance; they get
  ``BeginOperation(update)``, then ``UpdatePodInPlace`` (only images / metadata differ)
  or ``DeletePod`` (recreate; scale-out brings the pod back on the new revision), then
  ``FinishOperation``. A pod whose update has begun but is no longer wanted and not
  yet operating gets ``UndoOperation``.

Conditions say what the CollaSet waits for, naming one pod and, when PodTransitionRules
hold it in its stage, the rules and their reasons (:class:`Rejection`, read from the
rules' ``status.details`` by the reconciler): ``3/10 updated, waiting for pod web-abc to
pass PreCheck: [ptr web-budget] [budget] blocked by max unavailable policy: ...``. The pod
named is the first (by name) a rule holds, else the first waiting, so the message only
changes when the situation does; ids that change on every webhook call are left out.

Update and scale-in use distinct lifecycle ids (``collaset-update``,
``collaset-scale-in``); KusionStack Operating shares one id, so a scale-in re-types a
running update (operating reference, section 6). Lifecycle writes come from the
operation library (:mod:`lifecycle.operations`: begin, allow_ops, finish, undo) as
:class:`~lifecycle.changes.LabelChange` values, and waits are named after the
operation's phase (:mod:`lifecycle.states`), so this module never spells a lifecycle label.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from hooks.planning import HookDecision, HookReason
from lifecycle import labels as lc
from lifecycle.changes import LabelChange
from lifecycle.operations import (
    LabelAdapter,
    OperationAdapter,
    OperationConflict,
    allow_ops,
    begin,
    finish,
    is_during_ops,
    undo,
)
from lifecycle.schema import Condition
from lifecycle.states import InvalidLifecycleLabel, OperationPhase, Stage, parse_state
from rollouts.api.collasets import (
    LAST_POD_STATUS_ANNOTATION,
    REVISION_LABEL,
    UPDATE_INCLUDED_LABEL,
    CollaSetSpec,
    ConditionType,
    PodUpdatePolicy,
)

UPDATE_ID: Final = lc.OperationId("collaset-update")
SCALE_IN_ID: Final = lc.OperationId("collaset-scale-in")

#: In-place update; finishing drops the byLabel opt-in (as Operating's update adapter does).
UPDATE_ADAPTER: Final = LabelAdapter(
    id=UPDATE_ID, type=lc.UPDATE, unmark_on_finish=frozenset({UPDATE_INCLUDED_LABEL})
)
#: Update by recreation: the pod will be deleted, and says so (preparing-to-delete) from the start.
RECREATE_ADAPTER: Final = LabelAdapter(
    id=UPDATE_ID,
    type=lc.UPDATE,
    mark_on_begin=frozenset({lc.PREPARING_TO_DELETE}),
    unmark_on_finish=frozenset({UPDATE_INCLUDED_LABEL}),
)
SCALE_IN_ADAPTER: Final = LabelAdapter(
    id=SCALE_IN_ID, type=lc.SCALE_IN, mark_on_begin=frozenset({lc.PREPARING_TO_DELETE})
)


class UpdateMethod(StrEnum):
    IN_PLACE = "InPlace"
    RECREATE = "Recreate"


class DeleteReason(StrEnum):
    SCALE_IN = "ScaleIn"
    RECREATE = "RecreateUpdate"


class UpdateReason(StrEnum):
    UPDATED = "Updated"
    UPDATING = "Updating"
    PARTITIONED = "Partitioned"
    PAUSED = "Paused"
    UPDATE_FAILED = "UpdateFailed"


class ScaleReason(StrEnum):
    SCALED = "Scaled"
    SCALING_OUT = "ScalingOut"
    SCALING_IN = "ScalingIn"


@dataclass(frozen=True, kw_only=True)
class PodView:
    """What the planners need of one owned pod (build it with :func:`view_pod`)."""

    name: str
    uid: str = ""
    resource_version: str = ""
    revision: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    ready: bool = False
    terminating: bool = False
    created: datetime
    #: Container name -> image in the pod spec.
    images: Mapping[str, str] = field(default_factory=dict)
    #: Container name -> image / imageID the kubelet reports running.
    status_images: Mapping[str, str] = field(default_factory=dict)
    image_ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        """Service-available: idle in the lifecycle, Ready and registered by cooperation controllers."""
        return lc.SERVICE_AVAILABLE in self.labels and not self.terminating

    @property
    def to_delete(self) -> bool:
        return lc.TO_DELETE in self.labels

    #: Answers of :meth:`during` / :meth:`operating` by adapter: a view is reused while its pod
    #: does not change (the operator caches views per pod version), and a rollout asks for
    #: every pod on every pass.
    _answers: dict[tuple[str, str], bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def during(self, adapter: OperationAdapter) -> bool:
        """The adapter's operation has begun on the pod (``is_during_ops``)."""
        key = ("during", adapter.id)
        if key not in self._answers:
            self._answers[key] = is_during_ops(adapter, self.labels)
        return self._answers[key]

    def operating(self, adapter: OperationAdapter) -> bool:
        """The lifecycle lets the adapter's operation act (``operate`` label; delays aside)."""
        key = ("operating", adapter.id)
        if key not in self._answers:
            self._answers[key] = allow_ops(adapter, self.labels, now_ns=0).allowed
        return self._answers[key]


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A PodTransitionRule holding a pod in a stage, as the rule's ``status.details`` say."""

    #: The PodTransitionRule's name.
    ptr: str
    #: The rule (``spec.rules[].name``) that rejected the pod.
    rule: str
    stage: Stage
    reason: str


@dataclass(frozen=True, kw_only=True)
class CollaSetSnapshot:
    name: str
    namespace: str
    spec: CollaSetSpec
    updated_revision: str
    #: status.currentRevision: the revision the rollout started from (None before the first one).
    current_revision: str | None
    #: Revision name -> pod template (``revisions.read_template``), for every known revision.
    templates: Mapping[str, Mapping[str, Any]]
    pods: Sequence[PodView]
    now: datetime
    #: Pod name -> the PodTransitionRules holding it (any stage; matched against its wait).
    rejections: Mapping[str, Sequence[Rejection]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CreatePod:
    revision: str


@dataclass(frozen=True, kw_only=True)
class PodAction:
    pod: str
    #: Guard: the apply fails instead of overwriting when the pod changed since the snapshot.
    resource_version: str


@dataclass(frozen=True, kw_only=True)
class BeginOperation(PodAction):
    op_id: str
    op_type: str
    change: LabelChange


@dataclass(frozen=True, kw_only=True)
class UpdatePodInPlace(PodAction):
    revision: str
    #: Strategic-merge patch: container images by name, metadata, revision label, last-pod-status.
    patch: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class FinishOperation(PodAction):
    op_id: str
    change: LabelChange
    #: Annotations dropped in the same write (None = delete).
    annotations: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class UndoOperation(PodAction):
    op_id: str
    op_type: str
    change: LabelChange


@dataclass(frozen=True, kw_only=True)
class DeletePod(PodAction):
    uid: str
    why: DeleteReason


@dataclass(frozen=True, kw_only=True)
class MarkPodToDelete(PodAction):
    """Hand a ``podToDelete`` pod to the PodDeletion lifecycle (label ``to-delete``)."""

    change: LabelChange


Action = (
    CreatePod
    | BeginOperation
    | UpdatePodInPlace
    | FinishOperation
    | UndoOperation
    | DeletePod
    | MarkPodToDelete
)


@dataclass(frozen=True, kw_only=True)
class PodCounts:
    replicas: int = 0
    ready: int = 0
    available: int = 0
    updated: int = 0
    updated_ready: int = 0
    updated_available: int = 0
    operating: int = 0


@dataclass(frozen=True, kw_only=True)
class Plan:
    actions: tuple[Action, ...]
    counts: PodCounts
    #: status.currentRevision to write: the updated revision once the rollout is complete.
    current_revision: str
    conditions: tuple[Condition, ...]
    requeue_after: float | None = None
    #: ``scaleStrategy.podToDelete`` without the names of pods that are gone; None: unchanged.
    pod_to_delete: tuple[str, ...] | None = None

    def label_changes(self) -> dict[str, LabelChange]:
        """Label changes of all actions merged per pod: one write per pod per cycle."""
        merged: dict[str, LabelChange] = {}
        for action in self.actions:
            if isinstance(action, BeginOperation | FinishOperation | UndoOperation | MarkPodToDelete):
                merged[action.pod] = merged.get(action.pod, LabelChange()).then(action.change)
        return merged


def view_pod(obj: Mapping[str, Any]) -> PodView:
    """A :class:`PodView` from a raw core/v1 Pod."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    conditions = status.get("conditions") or []
    statuses = status.get("containerStatuses") or []
    return PodView(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        resource_version=str(metadata.get("resourceVersion", "")),
        revision=labels.get(REVISION_LABEL),
        labels=labels,
        annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        terminating=bool(metadata.get("deletionTimestamp")) or status.get("phase") in ("Succeeded", "Failed"),
        created=_parse_time(metadata.get("creationTimestamp")),
        images={c["name"]: c.get("image", "") for c in spec.get("containers") or [] if "name" in c},
        status_images={c["name"]: c.get("image", "") for c in statuses if "name" in c},
        image_ids={c["name"]: c.get("imageID", "") for c in statuses if "name" in c},
    )


def count_pods(pods: Sequence[PodView], *, updated_revision: str) -> PodCounts:
    """Status counts over live (not terminating) pods."""
    live = [p for p in pods if not p.terminating]
    updated = [p for p in live if p.revision == updated_revision]
    return PodCounts(
        replicas=len(live),
        ready=sum(p.ready for p in live),
        available=sum(p.available for p in live),
        updated=len(updated),
        updated_ready=sum(p.ready for p in updated),
        updated_available=sum(p.available for p in updated),
        operating=sum(p.during(UPDATE_ADAPTER) or p.during(SCALE_IN_ADAPTER) for p in live),
    )


def compute_update_cap(snapshot: CollaSetSnapshot) -> int:
    """Pods the user's strategy lets onto the new revision (the hook planner's ``partition_cap``).

    byPartition: ``replicas - partition`` (all when unset). byLabel: pods already on the
    updated revision plus live pods labelled ``update-included``.
    """
    cap = snapshot.spec.update_cap
    if cap is not None:
        return cap
    live = [p for p in snapshot.pods if not p.terminating]
    return min(
        snapshot.spec.replicas,
        sum(1 for p in live if p.revision == snapshot.updated_revision or UPDATE_INCLUDED_LABEL in p.labels),
    )


def compare_templates(*, old: Mapping[str, Any], new: Mapping[str, Any]) -> UpdateMethod:
    """IN_PLACE when only metadata labels/annotations and container images differ (same containers)."""
    old_spec, new_spec = dict(old.get("spec") or {}), dict(new.get("spec") or {})
    old_containers = old_spec.pop("containers", None) or []
    new_containers = new_spec.pop("containers", None) or []
    if old_spec != new_spec or len(old_containers) != len(new_containers):
        return UpdateMethod.RECREATE
    for before, after in zip(old_containers, new_containers, strict=True):
        if {**before, "image": None} != {**after, "image": None}:
            return UpdateMethod.RECREATE
    old_meta = {k: v for k, v in (old.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    new_meta = {k: v for k, v in (new.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    return UpdateMethod.IN_PLACE if old_meta == new_meta else UpdateMethod.RECREATE


@dataclass(frozen=True, kw_only=True)
class _Wait:
    why: str
    stage: Stage | None = None


@dataclass
class _Draft:
    snapshot: CollaSetSnapshot
    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None
    #: Operation id -> pod name -> what the pod's operation waits for (condition messages).
    waits: dict[str, dict[str, _Wait]] = field(default_factory=dict)

    @property
    def now_ns(self) -> int:
        return int(self.snapshot.now.timestamp() * 1_000_000_000)

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def wait(self, adapter: OperationAdapter, pod: PodView, why: str, *, stage: Stage | None = None) -> None:
        """Note what ``pod`` waits for; ``stage``: the PodTransitionRule stage it has to pass."""
        self.waits.setdefault(adapter.id, {})[pod.name] = _Wait(why=why, stage=stage)

    def begin(self, pod: PodView, adapter: OperationAdapter) -> None:
        try:
            change = begin(adapter, pod.labels, now_ns=self.now_ns)
        except (OperationConflict, InvalidLifecycleLabel) as error:
            self.wait(adapter, pod, f"before {adapter.type} can begin ({error})")
            return
        self.actions.append(
            BeginOperation(
                pod=pod.name,
                resource_version=pod.resource_version,
                op_id=adapter.id,
                op_type=adapter.type,
                change=change,
            )
        )
        self.wait(adapter, pod, "to pass PreCheck", stage=Stage.PRE_CHECK)

    def undo(self, pod: PodView, adapter: OperationAdapter) -> None:
        try:
            change = undo(adapter, pod.labels)
        except (OperationConflict, InvalidLifecycleLabel) as error:
            self.wait(adapter, pod, f"before {adapter.type} can be undone ({error})")
            return
        if not change.is_empty:
            self.actions.append(
                UndoOperation(
                    pod=pod.name,
                    resource_version=pod.resource_version,
                    op_id=adapter.id,
                    op_type=adapter.type,
                    change=change,
                )
            )

    def may_act(self, pod: PodView, adapter: OperationAdapter, delay_seconds: int) -> bool:
        """Whether an operating pod's operationDelaySeconds has passed; if not, note the wait."""
        decision = allow_ops(adapter, pod.labels, now_ns=self.now_ns, delay_seconds=delay_seconds)
        if decision.allowed:
            return True
        left = decision.retry_after_seconds or 0.0
        self.wait(adapter, pod, f"for operationDelaySeconds ({left:.0f}s left)")
        self.requeue(left)
        return False


def plan_collaset(snapshot: CollaSetSnapshot, *, hooks: HookDecision | None = None) -> Plan:
    """Scale and update decisions for one reconcile; ``hooks`` caps pods on the new revision."""
    draft = _Draft(snapshot=snapshot)
    live = [p for p in snapshot.pods if not p.terminating]
    target = _update_target(snapshot, hooks)
    victims = _scale(draft, live, target)
    blocked = _update(draft, [p for p in live if p.name not in victims], target, hooks)
    counts = count_pods(snapshot.pods, updated_revision=snapshot.updated_revision)
    done = (
        counts.updated_ready >= snapshot.spec.replicas
        and counts.updated == counts.replicas
        and not any(p.during(UPDATE_ADAPTER) for p in live)
        and (hooks is None or hooks.done)
    )
    current = (
        snapshot.updated_revision if done or not snapshot.current_revision else snapshot.current_revision
    )
    conditions = (
        _scale_condition(draft, live),
        _update_condition(draft, counts, target, hooks, blocked, done=done),
        _failed_condition(hooks),
    )
    return Plan(
        actions=tuple(draft.actions),
        counts=counts,
        current_revision=current,
        conditions=conditions,
        requeue_after=draft.requeue_after,
        pod_to_delete=_prune_pod_to_delete(snapshot),
    )


def _prune_pod_to_delete(snapshot: CollaSetSnapshot) -> tuple[str, ...] | None:
    """``podToDelete`` without the names no pod of the CollaSet has any more (None: nothing to drop).

    A name is dropped once no pod of that name exists, terminating ones included, so a pod
    still shutting down keeps its entry; a name that never was a pod of the CollaSet goes too.
    """
    names = snapshot.spec.scale_strategy.pod_to_delete
    existing = {pod.name for pod in snapshot.pods}
    kept = tuple(name for name in names if name in existing)
    return None if len(kept) == len(names) else kept


def _update_target(snapshot: CollaSetSnapshot, hooks: HookDecision | None) -> int:
    target = compute_update_cap(snapshot)
    if hooks is not None:
        target = min(target, hooks.allowed_updated)
    return max(0, min(target, snapshot.spec.replicas))


def _scale(draft: _Draft, live: list[PodView], target: int) -> set[str]:
    """Scale out / in; returns the names of the scale-in victims."""
    spec = draft.snapshot.spec
    to_delete = set(spec.scale_strategy.pod_to_delete)
    diff = spec.replicas - len(live)
    victims: set[str] = set()
    if diff < 0:  # ordering every pod on every pass of a rollout cost more than the update planning
        victims = {p.name for p in sorted(live, key=lambda p: _victim_order(p, to_delete))[:-diff]}
    _scale_out(draft, live, target, count=max(diff, 0))
    for pod in live:
        if pod.name in to_delete and pod.name not in victims and not pod.to_delete:
            change = LabelChange(set_labels={lc.TO_DELETE: str(draft.now_ns)})
            draft.actions.append(
                MarkPodToDelete(pod=pod.name, resource_version=pod.resource_version, change=change)
            )
    _scale_in(draft, live, victims)
    return victims


def _scale_out(draft: _Draft, live: list[PodView], target: int, *, count: int) -> None:
    """Create ``count`` pods; during a rollout on the new revision only while under ``target``."""
    snapshot = draft.snapshot
    current, updated = snapshot.current_revision, snapshot.updated_revision
    rolling = current is not None and current != updated and current in snapshot.templates
    on_updated = sum(1 for p in live if p.revision == updated)
    for _ in range(count):
        if rolling and on_updated >= target:
            draft.actions.append(CreatePod(revision=str(current)))
        else:
            on_updated += 1
            draft.actions.append(CreatePod(revision=updated))


def _scale_in(draft: _Draft, live: list[PodView], victims: set[str]) -> None:
    """Take victims through the scale-in lifecycle and delete them once allowed; release the others."""
    delay = draft.snapshot.spec.scale_strategy.operation_delay_seconds
    for pod in live:
        during = pod.during(SCALE_IN_ADAPTER)
        if pod.name not in victims:
            if during:
                draft.undo(pod, SCALE_IN_ADAPTER)
        elif not during:
            draft.begin(pod, SCALE_IN_ADAPTER)
        elif not pod.operating(SCALE_IN_ADAPTER):
            why, stage = _describe_wait(pod, SCALE_IN_ID)
            draft.wait(SCALE_IN_ADAPTER, pod, why, stage=stage)
        elif draft.may_act(pod, SCALE_IN_ADAPTER, delay):
            draft.actions.append(
                DeletePod(
                    pod=pod.name,
                    resource_version=pod.resource_version,
                    uid=pod.uid,
                    why=DeleteReason.SCALE_IN,
                )
            )


def _victim_order(pod: PodView, to_delete: set[str]) -> tuple[bool, bool, bool, bool, float, str]:
    """podToDelete first, then pods already being scaled in, to-delete, not ready, newest."""
    return (
        pod.name not in to_delete,
        not pod.during(SCALE_IN_ADAPTER),
        not pod.to_delete,
        pod.ready,
        -pod.created.timestamp(),
        pod.name,
    )


def _update(draft: _Draft, pods: list[PodView], target: int, hooks: HookDecision | None) -> str | None:
    """Update the chosen pods; returns why updating is impossible (InPlaceOnly), if it is."""
    snapshot = draft.snapshot
    spec = snapshot.spec
    updated = snapshot.updated_revision
    by_label = spec.update_cap is None
    # Pods handed to PodDeletion (to-delete) are leaving: updating them would be wasted work.
    eligible = [
        p
        for p in pods
        if not p.to_delete and (not by_label or p.revision == updated or UPDATE_INCLUDED_LABEL in p.labels)
    ]
    chosen = {p.name for p in sorted(eligible, key=lambda p: _update_order(p, updated))[:target]}
    new_template = snapshot.templates.get(updated, {})
    # Paused, or stopped by a failed hook: no new updates; those already operating carry on.
    may_begin = not spec.paused and not (hooks is not None and hooks.stopped)
    blocked: str | None = None
    methods: dict[str | None, UpdateMethod | None] = {}  # by old revision: most pods share one
    for pod in pods:
        during, allowed = pod.during(UPDATE_ADAPTER), pod.operating(UPDATE_ADAPTER)
        if pod.revision == updated:
            _settle_updated(draft, pod)
            continue
        old_template = snapshot.templates.get(pod.revision or "")
        if pod.revision not in methods:
            methods[pod.revision] = _method(
                spec.update_strategy.pod_update_policy, old_template, new_template
            )
        method = methods[pod.revision]
        if method is None and (pod.name in chosen or allowed):
            blocked = (
                f"podUpdatePolicy InPlaceOnly: revision {updated} changes more than container images and "
                f"metadata of revision {pod.revision}; use InPlaceIfPossible or Recreate"
            )
        if method is None or (pod.name not in chosen and not allowed):
            if during:
                draft.undo(pod, UPDATE_ADAPTER)
        elif not during:
            if may_begin:
                draft.begin(pod, RECREATE_ADAPTER if method == UpdateMethod.RECREATE else UPDATE_ADAPTER)
        elif not allowed:
            why, stage = _describe_wait(pod, UPDATE_ID)
            draft.wait(UPDATE_ADAPTER, pod, why, stage=stage)
        elif draft.may_act(pod, UPDATE_ADAPTER, spec.update_strategy.operation_delay_seconds):
            _operate(draft, pod, method, old=old_template or {}, new=new_template)
    return blocked


def _settle_updated(draft: _Draft, pod: PodView) -> None:
    """A pod on the updated revision: finish its in-place update once it runs the new images."""
    if pod.operating(UPDATE_ADAPTER):
        if _in_place_finished(pod):
            draft.actions.append(_finish(pod))
        else:
            draft.wait(UPDATE_ADAPTER, pod, "to run the new images")
    elif pod.during(UPDATE_ADAPTER):
        draft.undo(
            pod, UPDATE_ADAPTER
        )  # nothing left to do, e.g. a rollback made its revision the updated one


def _operate(
    draft: _Draft, pod: PodView, method: UpdateMethod, *, old: Mapping[str, Any], new: Mapping[str, Any]
) -> None:
    """The update itself, once the lifecycle allows it: patch in place or delete for recreation."""
    if method == UpdateMethod.IN_PLACE:
        revision = draft.snapshot.updated_revision
        patch = _in_place_patch(pod, old, new, revision)
        draft.actions.append(
            UpdatePodInPlace(
                pod=pod.name, resource_version=pod.resource_version, revision=revision, patch=patch
            )
        )
        draft.wait(UPDATE_ADAPTER, pod, "to run the new images")
    else:
        draft.actions.append(
            DeletePod(
                pod=pod.name, resource_version=pod.resource_version, uid=pod.uid, why=DeleteReason.RECREATE
            )
        )


def _update_order(pod: PodView, updated: str) -> tuple[bool, bool, bool, bool, str]:
    """Already updated first, then pods whose update is operating / begun, then unavailable ones."""
    return (
        pod.revision != updated,
        not pod.operating(UPDATE_ADAPTER),
        not pod.during(UPDATE_ADAPTER),
        pod.available,
        pod.name,
    )


def _method(
    policy: PodUpdatePolicy, old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> UpdateMethod | None:
    """How to update from ``old`` to ``new`` under ``policy``; None when InPlaceOnly cannot."""
    if policy == PodUpdatePolicy.RECREATE:
        return UpdateMethod.RECREATE
    method = UpdateMethod.RECREATE if old is None else compare_templates(old=old, new=new)
    if method == UpdateMethod.RECREATE and policy == PodUpdatePolicy.IN_PLACE_ONLY:
        return None
    return method


def _in_place_patch(
    pod: PodView, old: Mapping[str, Any], new: Mapping[str, Any], revision: str
) -> dict[str, Any]:
    """Strategic-merge patch moving ``pod`` from template ``old`` to ``new`` (images and metadata)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    labels = _diff(old_meta.get("labels") or {}, new_meta.get("labels") or {})
    labels[REVISION_LABEL] = revision
    annotations = _diff(old_meta.get("annotations") or {}, new_meta.get("annotations") or {})
    containers = []
    states: dict[str, dict[str, str]] = {}
    for container in (new.get("spec") or {}).get("containers") or []:
        name, image = container.get("name"), container.get("image")
        if name and image and pod.images.get(name) != image:
            containers.append({"name": name, "image": image})
            states[name] = {"latestImage": image, "lastImageID": pod.image_ids.get(name, "")}
    if states:
        annotations[LAST_POD_STATUS_ANNOTATION] = json.dumps({"containerStates": states}, sort_keys=True)
    patch: dict[str, Any] = {"metadata": {"labels": labels}}
    if annotations:
        patch["metadata"]["annotations"] = annotations
    if containers:
        patch["spec"] = {"containers": containers}
    return patch


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str | None]:
    """Merge-patch entries turning the template's ``old`` map into ``new``; keys set elsewhere stay."""
    changes: dict[str, str | None] = {str(k): str(v) for k, v in new.items() if old.get(k) != v}
    changes.update({str(k): None for k in old if k not in new})
    return changes


def _in_place_finished(pod: PodView) -> bool:
    """Every container changed in place runs its new image (reported image, or a new imageID)."""
    raw = pod.annotations.get(LAST_POD_STATUS_ANNOTATION)
    if not raw:
        return True
    try:
        states = json.loads(raw).get("containerStates") or {}
    except (ValueError, AttributeError):
        return True
    for name, state in states.items():
        latest, last_id = state.get("latestImage", ""), state.get("lastImageID", "")
        if pod.images.get(name) != latest:
            return False
        image_id = pod.image_ids.get(name, "")
        if pod.status_images.get(name) != latest and not (image_id and image_id != last_id):
            return False
    return True


def _finish(pod: PodView) -> FinishOperation:
    annotations: dict[str, str | None] = {}
    if LAST_POD_STATUS_ANNOTATION in pod.annotations:
        annotations[LAST_POD_STATUS_ANNOTATION] = None
    return FinishOperation(
        pod=pod.name,
        resource_version=pod.resource_version,
        op_id=UPDATE_ID,
        change=finish(UPDATE_ADAPTER, pod.labels),
        annotations=annotations,
    )


_WAITS: Final = {
    OperationPhase.UNDO: "to undo its operation",
    OperationPhase.COMPLETING: "to finish Completing",
    OperationPhase.POST_CHECKED: "to finish Completing",
    OperationPhase.POST_CHECK: "to pass PostCheck",
    OperationPhase.OPERATED: "to pass PostCheck",
    OperationPhase.OPERATING: "to be operated",
    OperationPhase.PREPARING: "to finish Preparing (readiness gate off, protection finalizers gone)",
    OperationPhase.PRE_CHECKED: "to enter Preparing",
    OperationPhase.PRE_CHECK: "to pass PreCheck",
    OperationPhase.BEGUN: "to pass PreCheck",
}
#: Phases in which PodTransitionRules of a stage hold the pod.
_STAGES: Final = {
    OperationPhase.POST_CHECK: Stage.POST_CHECK,
    OperationPhase.OPERATED: Stage.POST_CHECK,
    OperationPhase.PRE_CHECK: Stage.PRE_CHECK,
    OperationPhase.BEGUN: Stage.PRE_CHECK,
}
#: Longest rule reason quoted in a condition message.
MAX_REASON_LENGTH: Final = 240
#: Parts of webhook reasons that change on every call (trace and task ids): left out of messages.
_VOLATILE: Final = re.compile(r",?\s*\b(?:traceId|taskId|trace-id|task-id)\b:?\s+[^\s,]+")


def _describe_wait(pod: PodView, op_id: str) -> tuple[str, Stage | None]:
    """What the pod's operation ``op_id`` waits for, from its lifecycle phase, and the stage it is in."""
    try:
        operation = parse_state(pod.labels).operations.get(lc.OperationId(op_id))
    except InvalidLifecycleLabel as error:
        return f"to get valid lifecycle labels ({error})", None
    if operation is None:
        return "to pass PreCheck", Stage.PRE_CHECK
    return _WAITS[operation.phase], _STAGES.get(operation.phase)


def describe_rejection(rejection: Rejection) -> str:
    """``[ptr <name>] <reason>``, the reason prefixed with its rule unless it names it already."""
    reason = _VOLATILE.sub("", rejection.reason).strip()
    if not reason.startswith(f"[{rejection.rule}]"):
        reason = f"{rejection.rule}: {reason}"
    if len(reason) > MAX_REASON_LENGTH:
        reason = reason[: MAX_REASON_LENGTH - 3] + "..."
    return f"[ptr {rejection.ptr}] {reason}"


def _holding(draft: _Draft, pod: str, wait: _Wait) -> list[Rejection]:
    """The rejections holding ``pod`` in the stage it waits to pass, by rule."""
    if wait.stage is None:
        return []
    found = [r for r in draft.snapshot.rejections.get(pod, ()) if r.stage == wait.stage]
    return sorted(found, key=lambda r: (r.ptr, r.rule))


def _first_wait(draft: _Draft, adapter: OperationAdapter) -> str:
    """``waiting for pod <name> <why>[: <rules holding it>] (and N more)``.

    The pod named is the first (by name) a PodTransitionRule holds, else the first waiting.
    """
    waits = draft.waits.get(adapter.id) or {}
    if not waits:
        return ""
    held = sorted(name for name, wait in waits.items() if _holding(draft, name, wait))
    name = held[0] if held else min(waits)
    wait = waits[name]
    rules = "; ".join(describe_rejection(r) for r in _holding(draft, name, wait))
    more = f" (and {len(waits) - 1} more)" if len(waits) > 1 else ""
    return f"waiting for pod {name} {wait.why}" + (f": {rules}" if rules else "") + more


def _scale_condition(draft: _Draft, live: list[PodView]) -> Condition:
    replicas = draft.snapshot.spec.replicas
    creating = sum(isinstance(a, CreatePod) for a in draft.actions)
    if creating:
        return Condition(
            type=ConditionType.SCALE,
            status="False",
            reason=ScaleReason.SCALING_OUT,
            message=f"{len(live)}/{replicas} pods, creating {creating}",
        )
    if len(live) > replicas:
        wait = _first_wait(draft, SCALE_IN_ADAPTER)
        message = f"{len(live)}/{replicas} pods, scaling in {len(live) - replicas}" + (
            f", {wait}" if wait else ""
        )
        return Condition(
            type=ConditionType.SCALE, status="False", reason=ScaleReason.SCALING_IN, message=message
        )
    return Condition(
        type=ConditionType.SCALE, status="True", reason=ScaleReason.SCALED, message=f"{replicas} pods"
    )


def _update_condition(
    draft: _Draft,
    counts: PodCounts,
    target: int,
    hooks: HookDecision | None,
    blocked: str | None,
    *,
    done: bool,
) -> Condition:
    spec = draft.snapshot.spec
    progress = f"{counts.updated}/{spec.replicas} updated"
    hook_note = f"; {hooks.condition_text}" if hooks is not None and not hooks.done else ""

    def pending(reason: str, message: str) -> Condition:
        return Condition(type=ConditionType.UPDATE, status="False", reason=reason, message=message)

    if done:
        message = f"{progress} to revision {draft.snapshot.updated_revision}"
        return Condition(
            type=ConditionType.UPDATE, status="True", reason=UpdateReason.UPDATED, message=message
        )
    if blocked is not None:
        return pending(UpdateReason.UPDATE_FAILED, f"{progress}, {blocked}")
    if hooks is not None and hooks.stopped:
        return pending(HookReason.HOOK_FAILED, f"{progress}{hook_note}")
    wait = _first_wait(draft, UPDATE_ADAPTER)
    if spec.paused:
        return pending(UpdateReason.PAUSED, f"{progress}, paused" + (f", {wait}" if wait else ""))
    if not wait and hooks is not None and not hooks.done:
        return pending(hooks.reason, f"{progress}; {hooks.message}")
    if not wait and counts.updated >= target:
        kept = spec.replicas - target
        return pending(UpdateReason.PARTITIONED, f"{progress}, partition keeps {kept} on the old revision")
    return pending(UpdateReason.UPDATING, progress + (f", {wait}" if wait else "") + hook_note)


def _failed_condition(hooks: HookDecision | None) -> Condition:
    if hooks is not None and hooks.stopped:
        return Condition(
            type=ConditionType.FAILED, status="True", reason=HookReason.HOOK_FAILED, message=hooks.message
        )
    return Condition(type=ConditionType.FAILED, status="False", reason="NoFailure", message="")


def _parse_time(value: object) -> datetime:
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return datetime.fromtimestamp(0, tz=UTC)
