"""Applying one CollaSet decision: the only CollaSet code that writes to the API.

Order matters and follows the decision (:mod:`rollouts.operator.collasets_deciding`):

1. revision actions (create ``<cls>-<hash>``, bump ``revision`` for a rollback, prune) and
   the default PodTransitionRule (create, replace its spec, delete); while the updated
   revision or the rule is being created or changed nothing else is written;
2. the ``status`` subresource, guarded by the CollaSet's resourceVersion: it records hook
   phases before any Job is created or deleted, so a restart never starts a finished
   hook again and a retention deletion is never the only trace of a hook. A 409 stops
   the apply (the decision was made from an old CollaSet; observe again). The Events
   of condition changes (deadline exceeded, scale or rollout completed) follow it;
3. hook Job creations (a 409 means "already there": names are deterministic) and
   deletions (background propagation, after the status that says why);
4. pod writes, one per pod: label merge patches from the lifecycle library
   (begin / finish / undo / to-delete) and in-place strategic-merge patches carry the
   pod's resourceVersion, deletions carry uid and resourceVersion preconditions, so a
   stale decision fails (409) instead of overwriting;
5. Events on the CollaSet for every step done, one per kind of step naming its pods
   (:func:`group_events`), hook Events as the hook planner worded them.

Every write records an expectation (:mod:`rollouts.operator.collasets_expecting`); a 409
or 404 records one as well (the watch will show the newer state) and is otherwise
ignored. Other API errors are collected and returned (the caller reports them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hooks.planning import CreateJob, DeleteJob, JobDeletion
from lifecycle.rules.models import PLURAL as RULE_PLURAL
from rollouts import kube
from rollouts.api.collasets import GROUP, VERSION
from rollouts.operator.collasets_deciding import (
    CreateRule,
    Decision,
    DeleteRule,
    ReplaceRuleSpec,
    render_pod,
)
from rollouts.operator.collasets_expecting import Expectations, Kind
from rollouts.planning.revisions import BumpRevision, CreateRevision, DeleteRevision, read_template
from rollouts.planning.updating import (
    SCALE_IN_ID,
    BeginOperation,
    CreatePod,
    DeletePod,
    DeleteReason,
    FinishOperation,
    MarkPodToDelete,
    Plan,
    UndoOperation,
    UpdatePodInPlace,
)

log = logging.getLogger("rollouts.collasets")

PLURAL: Final = "collasets"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
#: Pod writes in flight at once for one CollaSet.
POD_WRITE_CONCURRENCY: Final = 16

#: ``post(type, reason, message)``: an Event on the CollaSet.
Poster = Callable[[str, str, str], None]


@dataclass(frozen=True, kw_only=True)
class PodWrite:
    """Everything the plan does to one existing pod, as one API call."""

    pod: str
    resource_version: str
    #: Delete the pod (uid + resourceVersion preconditions); takes precedence over a patch.
    delete: DeletePod | None = None
    patch: dict[str, Any] = field(default_factory=dict)
    content_type: str = MERGE_PATCH
    #: (reason, what happened) to report once the write succeeded (:func:`group_events`).
    events: tuple[tuple[str, str], ...] = ()


@dataclass
class ApplyResult:
    errors: list[str] = field(default_factory=list)
    #: The status write hit a newer CollaSet: nothing after it was applied.
    stale: bool = False
    #: (reason, what happened, pod) of the pod writes that succeeded, posted grouped.
    pod_events: list[tuple[str, str, str]] = field(default_factory=list)


def pod_writes(plan: Plan, *, updated_revision: str) -> list[PodWrite]:
    """Group the plan's pod actions into one write per pod (pure)."""
    by_pod: dict[str, list[Any]] = {}
    for action in plan.actions:
        if not isinstance(action, CreatePod):
            by_pod.setdefault(action.pod, []).append(action)
    changes = plan.label_changes()
    writes = []
    for pod, actions in by_pod.items():
        rv = actions[0].resource_version
        events = tuple(_describe(a, updated_revision) for a in actions)
        deletion = next((a for a in actions if isinstance(a, DeletePod)), None)
        if deletion is not None:
            writes.append(
                PodWrite(
                    pod=pod,
                    resource_version=rv,
                    delete=deletion,
                    events=(_describe(deletion, updated_revision),),
                )
            )
            continue
        patch: dict[str, Any] = {}
        content_type = MERGE_PATCH
        in_place = next((a for a in actions if isinstance(a, UpdatePodInPlace)), None)
        if in_place is not None:
            patch = _copy_patch(in_place.patch)
            content_type = STRATEGIC_MERGE_PATCH
        change = changes.get(pod)
        if change is not None and not change.is_empty:
            labels = change.to_merge_patch()["metadata"]["labels"]
            patch.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
        for action in actions:
            if isinstance(action, FinishOperation) and action.annotations:
                patch.setdefault("metadata", {}).setdefault("annotations", {}).update(action.annotations)
        if not patch:
            continue
        patch.setdefault("metadata", {})["resourceVersion"] = rv
        writes.append(
            PodWrite(pod=pod, resource_version=rv, patch=patch, content_type=content_type, events=events)
        )
    return writes


def _copy_patch(patch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_copy_patch(v) if isinstance(v, Mapping) else v) for k, v in patch.items()}


def _describe(action: Any, updated_revision: str) -> tuple[str, str]:
    """(reason, what happened) of one pod action, worded without the pod (see :func:`group_events`)."""
    if isinstance(action, BeginOperation):
        if action.op_id == SCALE_IN_ID:
            return "BeginScaleIn", "scale-in begins (PodOpsLifecycle)"
        return "BeginUpdate", f"update to revision {updated_revision} begins (PodOpsLifecycle)"
    if isinstance(action, UpdatePodInPlace):
        return "PodUpdatedInPlace", f"updated in place to revision {action.revision}"
    if isinstance(action, FinishOperation):
        return "UpdateFinished", "update finished"
    if isinstance(action, UndoOperation):
        what = "scale-in" if action.op_id == SCALE_IN_ID else "update"
        reason = "ScaleInCanceled" if action.op_id == SCALE_IN_ID else "UpdatePodCanceled"
        return reason, f"{what} no longer needed, undone"
    if isinstance(action, MarkPodToDelete):
        return "PodToDelete", "named in scaleStrategy.podToDelete, handed to PodDeletion"
    if isinstance(action, DeletePod):
        if action.why == DeleteReason.SCALE_IN:
            return "ScaledIn", "deleted (scale in)"
        return "PodRecreating", f"deleted to recreate it on revision {updated_revision}"
    return "PodChanged", "changed"


#: Pod names quoted in one grouped Event before "and N more" (Event messages are cut at 1 KiB).
EVENT_NAMES_LIMIT: Final = 20


def group_events(done: Sequence[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """One Event per (reason, what) over the pods of one apply, in first-seen order (pure).

    ``done`` holds (reason, what, pod). A rollout step touches up to a budget of pods at
    once, and one Event each would be most of the operator's requests. The message names
    the pods first: ``pod web-1: update finished`` or ``pods web-1, web-2: update finished``
    (``pods a, b, ... and 7 more (27): ...`` past :data:`EVENT_NAMES_LIMIT`).
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for reason, what, pod in done:
        groups.setdefault((reason, what), []).append(pod)
    messages = []
    for (reason, what), pods in groups.items():
        if len(pods) == 1:
            messages.append((reason, f"pod {pods[0]}: {what}"))
            continue
        names = ", ".join(pods[:EVENT_NAMES_LIMIT])
        if len(pods) > EVENT_NAMES_LIMIT:
            names += f", ... and {len(pods) - EVENT_NAMES_LIMIT} more ({len(pods)})"
        messages.append((reason, f"pods {names}: {what}"))
    return messages


class Applier:
    """Writes one decision for one CollaSet (see the module docstring for the order)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        expectations: Expectations,
        post: Poster,
        clock: Callable[[], float],
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.expectations = expectations
        self.post = post
        self.clock = clock

    async def apply(
        self,
        decision: Decision,
        *,
        collaset: Mapping[str, Any],
        revisions: Sequence[Mapping[str, Any]],
    ) -> ApplyResult:
        result = ApplyResult()
        meta = collaset.get("metadata") or {}
        name, namespace = str(meta["name"]), str(meta["namespace"])
        await self._revisions(decision, namespace, revisions, result)
        await self._rules(decision, namespace, result)
        if decision.waits_for_revision or result.errors:
            return result
        version = str(meta.get("resourceVersion", ""))
        if decision.status is not None:
            written = await self._status(name, namespace, meta, decision, result)
            if written is None:
                return result
            version = written
            for note in decision.events:
                self.post(note.type, note.reason, note.message)
        hooks = decision.hooks
        if hooks is not None:
            for event in hooks.events:
                self.post("Warning" if event.warning else "Normal", event.reason.value, event.message)
            await asyncio.gather(
                *(self._create_job(namespace, job, result) for job in hooks.create_jobs),
                *(self._delete_job(namespace, job, result) for job in hooks.delete_jobs),
            )
        plan = decision.plan
        if plan is not None:
            limit = asyncio.Semaphore(POD_WRITE_CONCURRENCY)
            templates = {
                str((r.get("metadata") or {}).get("name")): read_template(r.get("data") or {})
                for r in revisions
            }
            creates = [
                self._create_pod(collaset, action, templates, result, limit)
                for action in plan.actions
                if isinstance(action, CreatePod)
            ]
            writes = [
                self._write_pod(namespace, write, result, limit)
                for write in pod_writes(plan, updated_revision=decision.updated_revision)
            ]
            await asyncio.gather(*creates, *writes)
            for reason, message in group_events(result.pod_events):
                self.post("Normal", reason, message)
            if plan.pod_to_delete is not None:
                await self._prune_pod_to_delete(collaset, plan.pod_to_delete, version, result)
        return result

    async def _prune_pod_to_delete(
        self, collaset: Mapping[str, Any], kept: tuple[str, ...], version: str, result: ApplyResult
    ) -> None:
        """Drop the names of deleted pods from ``spec.scaleStrategy.podToDelete``.

        The JSON patch tests the list it was computed from rather than the resourceVersion
        (the status write just moved that), so a list the user changed meanwhile fails the
        test (422) and is looked at again.
        """
        meta = collaset["metadata"]
        name, namespace = str(meta["name"]), str(meta["namespace"])
        current = list(((collaset.get("spec") or {}).get("scaleStrategy") or {}).get("podToDelete") or [])
        path = "/spec/scaleStrategy/podToDelete"
        body = [
            {"op": "test", "path": path, "value": current},
            {"op": "replace", "path": path, "value": list(kept)},
        ]
        try:
            await self.custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type=JSON_PATCH
            )
        except ApiException as e:
            error = kube.map_error(e)
            if isinstance(error, kube.Conflict | kube.NotFound | kube.Invalid):
                log.debug("collaset %s/%s: podToDelete changed since observed (%s)", namespace, name, error)
            elif not _namespace_terminating(error):
                result.errors.append(f"prune scaleStrategy.podToDelete: {error}")
            return
        self.expectations.expect_changed(Kind.COLLASET, name, resource_version=version, now=self.clock())
        gone = [n for n in current if n not in kept]
        self.post(
            "Normal", "PodToDeleteDone", f"removed {', '.join(gone)} from scaleStrategy.podToDelete (deleted)"
        )

    async def _revisions(
        self,
        decision: Decision,
        namespace: str,
        revisions: Sequence[Mapping[str, Any]],
        result: ApplyResult,
    ) -> None:
        by_name = {str((r.get("metadata") or {}).get("name")): r for r in revisions}
        for action in decision.revision_actions:
            if isinstance(action, CreateRevision):
                ok = await self._call(
                    result,
                    f"create ControllerRevision {action.name}",
                    self.apps.create_namespaced_controller_revision(namespace, action.manifest),  # type: ignore[arg-type]
                )
                if ok:
                    self.expectations.expect_present(Kind.REVISION, action.name, now=self.clock())
                    self.post(
                        "Normal", "RevisionCreated", f"created revision {action.name} ({action.revision})"
                    )
                else:
                    await self._name_taken(decision, namespace, action, result)
            elif isinstance(action, BumpRevision):
                # A full update, as Kubernetes' controller history does: the API server compares
                # ``data`` byte for byte, and a patch would re-serialize it ("field is immutable").
                current = dict(by_name.get(action.name) or {})
                rv = str((current.get("metadata") or {}).get("resourceVersion", ""))
                ok = await self._call(
                    result,
                    f"bump ControllerRevision {action.name}",
                    self.apps.replace_namespaced_controller_revision(
                        action.name,
                        namespace,
                        {**current, "revision": action.revision},  # type: ignore[arg-type]
                    ),
                )
                self.expectations.expect_changed(
                    Kind.REVISION, action.name, resource_version=rv, now=self.clock()
                )
                if ok:
                    self.post(
                        "Normal",
                        "RevisionRolledBack",
                        f"template equals revision {action.name}: rolling back to it "
                        f"(revision {action.revision})",
                    )
            elif isinstance(action, DeleteRevision):
                ok = await self._call(
                    result,
                    f"delete ControllerRevision {action.name}",
                    self.apps.delete_namespaced_controller_revision(
                        action.name, namespace, propagation_policy="Background"
                    ),
                )
                self.expectations.expect_gone(Kind.REVISION, action.name, now=self.clock())
                if ok:
                    self.post("Normal", "RevisionPruned", f"deleted revision {action.name} (historyLimit)")

    async def _rules(self, decision: Decision, namespace: str, result: ApplyResult) -> None:
        """The default PodTransitionRule of ``rollingUpdate.maxUnavailable``."""
        for action in decision.rule_actions:
            if isinstance(action, CreateRule):
                ok = await self._call(
                    result,
                    f"create PodTransitionRule {action.name}",
                    self.custom.create_namespaced_custom_object(
                        GROUP, VERSION, namespace, RULE_PLURAL, action.manifest
                    ),
                    tolerate=(kube.Conflict,),  # ours, and the watch lags (plan_default_rule checks owners)
                )
                self.expectations.expect_present(Kind.RULE, action.name, now=self.clock())
                if ok:
                    self.post(
                        "Normal",
                        "RuleCreated",
                        f"created PodTransitionRule {action.name} ({_budget(action.manifest['spec'])})",
                    )
            elif isinstance(action, ReplaceRuleSpec):
                # resourceVersion guard: a stale decision gets a 409 instead of overwriting.
                body = {"metadata": {"resourceVersion": action.resource_version}, "spec": action.patch}
                ok = await self._call(
                    result,
                    f"update PodTransitionRule {action.name}",
                    self.custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
                        GROUP, VERSION, namespace, RULE_PLURAL, action.name, body, _content_type=MERGE_PATCH
                    ),
                )
                self.expectations.expect_changed(
                    Kind.RULE, action.name, resource_version=action.resource_version, now=self.clock()
                )
                if ok:
                    self.post(
                        "Normal",
                        "RuleUpdated",
                        f"updated PodTransitionRule {action.name} ({_budget(action.spec)})",
                    )
            elif isinstance(action, DeleteRule):
                ok = await self._call(
                    result,
                    f"delete PodTransitionRule {action.name}",
                    self.custom.delete_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        namespace,
                        RULE_PLURAL,
                        action.name,
                        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=action.uid)),
                    ),
                )
                self.expectations.expect_gone(Kind.RULE, action.name, uid=action.uid, now=self.clock())
                if ok:
                    self.post(
                        "Normal",
                        "RuleDeleted",
                        f"deleted PodTransitionRule {action.name} (rollingUpdate.maxUnavailable unset)",
                    )

    async def _name_taken(
        self, decision: Decision, namespace: str, action: CreateRevision, result: ApplyResult
    ) -> None:
        """The revision name exists: ours (the watch lags) or another owner's (bump collisionCount)."""
        try:
            existing = await self.apps.read_namespaced_controller_revision(action.name, namespace)
        except ApiException as e:
            if not isinstance(kube.map_error(e), kube.NotFound):
                result.errors.append(f"read ControllerRevision {action.name}: {kube.map_error(e)}")
            return
        owners = [ref.uid for ref in existing.metadata.owner_references or [] if ref.controller]
        ours = action.manifest["metadata"]["ownerReferences"][0]["uid"]
        if owners == [ours]:
            self.expectations.expect_present(Kind.REVISION, action.name, now=self.clock())
            return
        meta = decision.collaset.metadata
        name, rv = str(meta["name"]), str(meta.get("resourceVersion", ""))
        count = decision.collision_count + 1
        log.info(
            "collaset %s/%s: revision name %s is taken; collisionCount %d",
            namespace,
            name,
            action.name,
            count,
        )
        body = {"metadata": {"resourceVersion": rv}, "status": {"collisionCount": count}}
        await self._call(
            result,
            "write status.collisionCount",
            self.custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE_PATCH
            ),
        )
        self.expectations.expect_changed(Kind.COLLASET, name, resource_version=rv, now=self.clock())

    async def _status(
        self, name: str, namespace: str, meta: Mapping[str, Any], decision: Decision, result: ApplyResult
    ) -> str | None:
        """Write the status guarded by the observed version; the new resourceVersion, None when it failed."""
        rv = str(meta.get("resourceVersion", ""))
        body = {"metadata": {"resourceVersion": rv}, "status": decision.status}
        try:
            written = await self.custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE_PATCH
            )
        except ApiException as e:
            error = kube.map_error(e)
            self.expectations.expect_changed(Kind.COLLASET, name, resource_version=rv, now=self.clock())
            if isinstance(error, kube.Conflict | kube.NotFound):
                log.debug(
                    "collaset %s/%s changed since observed (%s); observing again", namespace, name, error
                )
            else:
                result.errors.append(f"write status: {error}")
            result.stale = True
            return None
        self.expectations.expect_changed(Kind.COLLASET, name, resource_version=rv, now=self.clock())
        return str(((written or {}).get("metadata") or {}).get("resourceVersion", rv))

    async def _create_job(self, namespace: str, job: CreateJob, result: ApplyResult) -> None:
        await self._call(
            result,
            f"create hook Job {job.name}",
            self.batch.create_namespaced_job(namespace, job.manifest),  # type: ignore[arg-type]
            tolerate=(kube.Conflict,),  # deterministic name: it is already there
        )
        self.expectations.expect_present(Kind.JOB, job.name, now=self.clock())

    async def _delete_job(self, namespace: str, job: DeleteJob, result: ApplyResult) -> None:
        ok = await self._call(
            result,
            f"delete hook Job {job.name}",
            self.batch.delete_namespaced_job(job.name, namespace, propagation_policy="Background"),
        )
        self.expectations.expect_gone(Kind.JOB, job.name, now=self.clock())
        if ok and job.why == JobDeletion.RETENTION:
            self.post("Normal", "HookJobDeleted", f"hook {job.hook}: deleted job {job.name} (retainPolicy)")

    async def _create_pod(
        self,
        collaset: Mapping[str, Any],
        action: CreatePod,
        templates: Mapping[str, Mapping[str, Any]],
        result: ApplyResult,
        limit: asyncio.Semaphore,
    ) -> None:
        meta = collaset["metadata"]
        manifest = render_pod(
            collaset=meta["name"],
            namespace=meta["namespace"],
            collaset_uid=meta["uid"],
            revision=action.revision,
            template=templates.get(action.revision) or {},
        )
        async with limit:
            try:
                created = await self.core.create_namespaced_pod(meta["namespace"], manifest)  # type: ignore[arg-type]
            except ApiException as e:
                error = kube.map_error(e)
                if not _namespace_terminating(error):
                    result.errors.append(f"create pod on revision {action.revision}: {error}")
                return
        name = created.metadata.name
        self.expectations.expect_present(Kind.POD, name, now=self.clock())
        result.pod_events.append(("PodCreated", f"created on revision {action.revision}", name))

    async def _write_pod(
        self, namespace: str, write: PodWrite, result: ApplyResult, limit: asyncio.Semaphore
    ) -> None:
        async with limit:
            if write.delete is not None:
                options = client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(
                        uid=write.delete.uid or None, resource_version=write.resource_version or None
                    )
                )
                ok = await self._call(
                    result,
                    f"delete pod {write.pod}",
                    kube.send(self.core.delete_namespaced_pod, write.pod, namespace, body=options),
                )
                if ok:
                    self.expectations.expect_gone(Kind.POD, write.pod, uid=write.delete.uid, now=self.clock())
                else:
                    self.expectations.expect_changed(
                        Kind.POD, write.pod, resource_version=write.resource_version, now=self.clock()
                    )
            else:
                ok = await self._call(
                    result,
                    f"patch pod {write.pod}",
                    kube.send(
                        self.core.patch_namespaced_pod,
                        write.pod,
                        namespace,
                        write.patch,
                        _content_type=write.content_type,
                    ),
                )
                self.expectations.expect_changed(
                    Kind.POD, write.pod, resource_version=write.resource_version, now=self.clock()
                )
        if ok:
            result.pod_events.extend((reason, what, write.pod) for reason, what in write.events)

    async def _call(
        self,
        result: ApplyResult,
        what: str,
        call: Awaitable[Any],
        *,
        tolerate: tuple[type[kube.ApiError], ...] = (),
    ) -> bool:
        """Run one write; True when it took effect (or a tolerated error says it already had)."""
        try:
            await call
        except ApiException as e:
            error = kube.map_error(e)
            if isinstance(error, tolerate):
                return True
            if isinstance(error, kube.Conflict | kube.NotFound):
                log.debug("%s: %s; observing again", what, error)
                return False
            if not _namespace_terminating(error):
                result.errors.append(f"{what}: {error}")
            return False
        return True


def _budget(spec: Mapping[str, Any]) -> str:
    rules = spec.get("rules") or [{}]
    value = (rules[0].get("availablePolicy") or {}).get("maxUnavailableValue")
    return f"maxUnavailable {value}"


def _namespace_terminating(error: kube.ApiError) -> bool:
    """Writes into a namespace being deleted fail (403); the CollaSet goes with it, nothing to report."""
    return error.status == 403 and "being terminated" in error.reason
