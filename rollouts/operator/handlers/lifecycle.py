"""PodOpsLifecycle I/O: the pod admission webhooks and the lifecycle controller.

Both apply the same pure state machine (:func:`lifecycle.advancing.settle`) to a
:class:`~lifecycle.advancing.PodFacts` snapshot:

* the **mutating webhook** (pods CREATE/UPDATE, control pods only, failurePolicy
  Ignore) is the fast path: it adds the readiness gate on create and folds the next
  label steps into the write that triggered it;
* the **controller** (every control-pod event, and every PodTransitionRule event for the
  pods it lists) writes the same label steps itself and the ``service-ready`` condition,
  in one pods/status request guarded by the pod's resourceVersion (:func:`status_patch`).
  So the lifecycle still advances while the webhook is unavailable.

Rule verdicts come from the PodTransitionRule statuses in the ``transition_rules`` index
(:func:`lifecycle.rules.evaluating.gate_from_status`); with no rule a stage passes.

History and metrics: every write either path makes also carries the pod's operation history
(:mod:`lifecycle.history`, annotation ``rollouts.kusionstack.io/lifecycle-history``) when it
changed, so recording it costs no write; the watch of control pods feeds the lifecycle
metrics (:class:`rollouts.operator.metrics.LifecycleObserver`). Each write the controller
decides is one log line naming the pod, the operation ids and the reasons; an unchanged pod
logs nothing.

Deletion through the lifecycle: a ``podopslifecycle.kusionstack.io/to-delete`` label makes
the controller begin a ``delete`` operation and delete the pod once it may operate.
With ``OperatorConfig.grace_delete`` the validating webhook turns a plain DELETE of a
controlled pod into that flow.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle.advancing import LifecyclePatch, PodFacts, settle
from lifecycle.history import HISTORY_ANNOTATION, updated_annotation
from lifecycle.labels import (
    CONTROL,
    CONTROL_VALUE,
    OPERATION_PERMISSION,
    SERVICE_READY,
    TO_DELETE,
)
from lifecycle.operations import POD_DELETE_ADAPTER, allow_ops, begin, is_during_ops
from lifecycle.rules.evaluating import PodGate, gate_from_status
from lifecycle.rules.models import DETAIL_ANNOTATION_PREFIX, PodTransitionRule
from lifecycle.rules.subjects import PodView
from lifecycle.states import InvalidLifecycleLabel, parse_state, split_lifecycle_key
from lifecycle.validating import validate
from rollouts import kube
from rollouts.operator import metrics
from rollouts.operator.handlers.indexes import GROUP, VERSION, parse_rule
from rollouts.operator.logs import decision

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig

log = logging.getLogger("rollouts.lifecycle")

CONTROLLED = {CONTROL: CONTROL_VALUE}
WRITES: tuple[Any, ...] = ("CREATE", "UPDATE")


def _now_ns() -> int:
    return time.time_ns()


def _condition(pod: Mapping[str, Any], kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def _parse_rule(raw: Mapping[str, Any]) -> PodTransitionRule | None:
    """The rule, None when it does not parse whole (the lifecycle ignores it then)."""
    parsed = parse_rule(raw)
    return None if parsed.status_dropped else parsed.rule


def rules_in(namespace: str, transition_rules: Any) -> list[PodTransitionRule]:
    """The parsed PodTransitionRules of a namespace from the index (unparseable ones are skipped)."""
    raws = transition_rules.get(namespace, []) if transition_rules is not None else []
    return [rule for rule in map(_parse_rule, raws) if rule is not None]


def gate_for(pod: Mapping[str, Any], rules: Iterable[PodTransitionRule]) -> PodGate:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    stage = parse_state(labels).stage
    view = PodView.from_pod(dict(pod), stage=stage)
    return gate_from_status(pod=view, rules=rules)


def rejections_of(pod: Mapping[str, Any], rules: Iterable[PodTransitionRule]) -> dict[str, str]:
    """PTR name -> the rules and reasons it rejects the pod with, for the PTRs whose detail
    annotation on the pod says rejected (the annotation itself names no rule)."""
    meta = pod.get("metadata") or {}
    prefix = f"{DETAIL_ANNOTATION_PREFIX}/"
    rejecting = {
        key.removeprefix(prefix)
        for key, value in (meta.get("annotations") or {}).items()
        if key.startswith(prefix) and '"passed":false' in str(value).replace(" ", "")
    }
    found: dict[str, str] = {}
    for rule in rules:
        if rule.name not in rejecting or rule.status is None:
            continue
        for detail in rule.status.details:
            if detail.name == meta.get("name") and not detail.passed and detail.reject_info:
                found[rule.name] = "; ".join(f"rule {i.rule_name}: {i.reason}" for i in detail.reject_info)
    return found


def history_after(
    pod: Mapping[str, Any], change: LifecyclePatch, rules: Iterable[PodTransitionRule], *, now_ns: int
) -> str | None:
    """The history annotation to write with ``change``, None when it stays as it is."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return updated_annotation(
        annotations=meta.get("annotations") or {},
        before=labels,
        after=change.labels.apply(labels),
        finalizers=meta.get("finalizers") or [],
        rejections=rejections_of(pod, rules),
        now_ns=now_ns,
    )


def operations_in(change: LifecyclePatch) -> list[str]:
    """The operation ids whose labels a change touches (for log lines)."""
    ids = set()
    for key in (*change.set_labels, *change.remove_labels):
        split = split_lifecycle_key(key)
        if split is not None and split[0] != OPERATION_PERMISSION:
            ids.add(split[1])
    return sorted(ids)


def facts_of(
    pod: Mapping[str, Any],
    *,
    gate: PodGate,
    creating: bool = False,
    previous: Mapping[str, Any] | None = None,
) -> PodFacts:
    meta = pod.get("metadata") or {}
    gates = {g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []}
    service_ready = _condition(pod, SERVICE_READY)
    return PodFacts(
        labels=meta.get("labels") or {},
        finalizers=frozenset(meta.get("finalizers") or []),
        annotations=meta.get("annotations") or {},
        has_readiness_gate=SERVICE_READY in gates,
        service_ready=None if service_ready is None else service_ready == "True",
        ready=_condition(pod, "Ready") == "True",
        creating=creating,
        pre_check_passed=gate.passed,
        post_check_passed=gate.passed,
        previous_labels=((previous or {}).get("metadata") or {}).get("labels"),
    )


def status_patch(
    pod: Mapping[str, Any], change: LifecyclePatch, *, now_ns: int, history: str | None = None
) -> dict[str, Any] | None:
    """The one pods/status write of a controller decision (pure); None when nothing changes.

    The label steps, the history annotation (only with label steps, never alone) and the
    ``service-ready`` condition when its status changes, guarded by the pod's resourceVersion.
    A strategic merge patch, so the condition merges into ``status.conditions`` by type and a
    ``None`` label removes it. pods/status keeps metadata changes (its update strategy resets
    only spec, ownerReferences and deletionTimestamp), so labels and the condition they imply
    cost one write instead of two; the mutating webhook on pods/status folds the next steps
    into it as on any other write.
    """
    version = str((pod.get("metadata") or {}).get("resourceVersion", ""))
    body = change.to_merge_patch(resource_version=version)
    if body and history is not None:
        body["metadata"]["annotations"] = {HISTORY_ANNOTATION: history}
    condition = change.service_ready_condition(now_ns=now_ns)
    if condition is not None and _condition(pod, SERVICE_READY) != condition["status"]:
        body.setdefault("metadata", {"resourceVersion": version})
        body["status"] = {"conditions": [condition]}
    return body or None


async def write_patch(
    api: client.ApiClient,
    pod: Mapping[str, Any],
    change: LifecyclePatch,
    *,
    now_ns: int,
    history: str | None = None,
) -> bool:
    """Write :func:`status_patch` in one request; False when the pod moved on (409) or is gone."""
    meta = pod["metadata"]
    body = status_patch(pod, change, now_ns=now_ns, history=history)
    if body is None:
        return True
    try:
        await kube.send(
            client.CoreV1Api(api).patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            body,
            _content_type="application/strategic-merge-patch+json",
        )
    except ApiException as e:
        err = kube.map_error(e)
        if isinstance(err, kube.Conflict | kube.NotFound):
            return False  # a newer version of the pod will come through the watch
        raise err from e
    return True


async def reconcile_pod(
    api: client.ApiClient, pod: Mapping[str, Any], rules: list[PodTransitionRule]
) -> None:
    """One controller pass over a pod: lifecycle steps, condition, deletion through the lifecycle."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or (meta.get("labels") or {}).get(CONTROL) != CONTROL_VALUE:
        return
    now_ns = _now_ns()
    try:
        gate = gate_for(pod, rules)
        change = settle(facts_of(pod, gate=gate), now_ns=now_ns)
        history = history_after(pod, change, rules, now_ns=now_ns) if change.to_merge_patch() else None
    except InvalidLifecycleLabel as e:
        log.warning(
            "pod %s/%s: %s; lifecycle held until the label is fixed", meta["namespace"], meta["name"], e
        )
        return
    if not change.is_empty:
        reason = "; ".join(change.reasons) or json.dumps(change.to_merge_patch())
        log.info(
            "pod %s/%s: %s",
            meta["namespace"],
            meta["name"],
            reason,
            extra={
                **decision("pod", meta["namespace"], meta["name"], operations=operations_in(change)),
                "reason": reason,
            },
        )
        if not await write_patch(api, pod, change, now_ns=now_ns, history=history):
            return
        if change.to_merge_patch():
            return  # the label write produces a new event; act on the new version then
    await _delete_through_lifecycle(api, pod, now_ns=now_ns)


async def _delete_through_lifecycle(api: client.ApiClient, pod: Mapping[str, Any], *, now_ns: int) -> None:
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if TO_DELETE not in labels:
        return
    core = client.CoreV1Api(api)
    try:
        if not is_during_ops(POD_DELETE_ADAPTER, labels):
            started = begin(POD_DELETE_ADAPTER, labels, now_ns=now_ns)
            log.info(
                "pod %s/%s: %s begins: labelled %s",
                meta["namespace"],
                meta["name"],
                POD_DELETE_ADAPTER.id,
                TO_DELETE,
                extra={
                    **decision("pod", meta["namespace"], meta["name"], operations=[POD_DELETE_ADAPTER.id]),
                    "reason": f"labelled {TO_DELETE}",
                },
            )
            body = started.to_merge_patch(resource_version=meta["resourceVersion"])
            await core.patch_namespaced_pod(  # type: ignore[call-arg]
                meta["name"], meta["namespace"], body, _content_type="application/merge-patch+json"
            )
            return
        if allow_ops(POD_DELETE_ADAPTER, labels, now_ns=now_ns).allowed:
            log.info(
                "pod %s/%s: deleting, %s may operate",
                meta["namespace"],
                meta["name"],
                POD_DELETE_ADAPTER.id,
                extra={
                    **decision("pod", meta["namespace"], meta["name"], operations=[POD_DELETE_ADAPTER.id]),
                    "reason": "the delete operation may operate",
                },
            )
            await core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"])),
            )
            kopf.event(_body(pod), type="Normal", reason="PodDeletion", message="Deleted pod")
    except ApiException as e:
        err = kube.map_error(e)
        if not isinstance(err, kube.Conflict | kube.NotFound):
            raise err from e


def register(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    if cfg.pod_webhooks:
        _register_webhooks(registry, cfg)
    observer = metrics.LifecycleObserver()

    @kopf.on.startup(registry=registry)
    async def start_lifecycle_metrics(**_: Any) -> None:
        metrics.POD_PHASES.set("lifecycle", observer.phases)

    @kopf.on.cleanup(registry=registry)
    async def stop_lifecycle_metrics(**_: Any) -> None:
        metrics.POD_PHASES.clear("lifecycle")

    @kopf.on.event("pods", labels=CONTROLLED, registry=registry)
    async def pod_changed(
        type: str | None, body: kopf.Body, namespace: str | None, memo: Any, **kwargs: Any
    ) -> None:
        pod = dict(body)
        observer.observe(kind=type, pod=pod)
        if type == "DELETED":
            return
        rules = rules_in(namespace or "", kwargs.get("transition_rules"))
        with metrics.reconciling("lifecycle"):
            await reconcile_pod(memo["api"], pod, rules)

    verdicts = VerdictMemory()

    @kopf.on.event(GROUP, VERSION, "podtransitionrules", registry=registry)
    async def rule_changed(
        type: str, body: kopf.Body, namespace: str | None, memo: Any, **kwargs: Any
    ) -> None:
        """A rule's verdicts changed: re-run the pods whose verdict did (the pod may have been seen first)."""
        ns = namespace or ""
        raw = dict(body)
        changed = verdicts.changed(raw, deleted=type == "DELETED")
        if not changed:
            return
        rules = [r for r in rules_in(ns, kwargs.get("transition_rules")) if r.name != body.meta.name]
        event_rule = _parse_rule(raw) if type != "DELETED" else None
        if event_rule is not None:
            # The index may not hold this very version yet; use the event's body for this rule.
            rules.append(event_rule)
        for pod in list(kwargs["control_pods"].get(ns, [])):
            if pod["metadata"]["name"] in changed:
                with metrics.reconciling("lifecycle"):
                    await reconcile_pod(memo["api"], pod, rules)


class VerdictMemory:
    """The verdicts of each PodTransitionRule as last seen, to tell which pods a new status concerns.

    A rule's status lists a detail for every selected pod in a stage; during a rollout most of
    them stay as they were from one status write to the next, and re-running every pod on
    every write made the lifecycle controller's work grow with pods x writes. A pod whose
    verdict did not change was already run with it: by this handler when it last changed, or
    by its own event, which reads the rule from the index. The first status seen of a rule
    (after a start), a new generation, and a deletion concern every pod the status lists.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[Any, dict[str, tuple[Any, Any]]]] = {}

    def changed(self, rule: Mapping[str, Any], *, deleted: bool = False) -> set[str]:
        meta = rule.get("metadata") or {}
        status = rule.get("status") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        current = {str(d.get("name")): (d.get("stage"), d.get("passed")) for d in status.get("details") or []}
        if deleted:
            self._seen.pop(key, None)
            return set(current)
        marker = (meta.get("generation"), status.get("observedGeneration"))
        before = self._seen.get(key)
        self._seen[key] = (marker, current)
        if before is None or before[0] != marker:
            return set(current)
        return {name for name, verdict in current.items() if before[1].get(name) != verdict}


def _register_webhooks(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    @kopf.on.mutate(
        "pods",
        id="podopslifecycle-mutate",
        labels=CONTROLLED,
        operations=WRITES,
        ignore_failures=True,
        registry=registry,
    )
    async def mutate_pod(body: kopf.Body, patch: kopf.Patch, namespace: str | None, **kwargs: Any) -> None:
        mutate(body, patch, namespace, kwargs)

    # The API server keeps label changes made during a pods/status write, so the step a
    # status change unlocks (e.g. preparing -> operate once service-ready is False) rides
    # on that very write instead of costing the controller one more.
    @kopf.on.mutate(
        "pods",
        id="podopslifecycle-mutate-status",
        subresource="status",
        labels=CONTROLLED,
        operations=["UPDATE"],
        ignore_failures=True,
        registry=registry,
    )
    async def mutate_pod_status(
        body: kopf.Body, patch: kopf.Patch, namespace: str | None, **kwargs: Any
    ) -> None:
        mutate(body, patch, namespace, kwargs)

    @kopf.on.validate(
        "pods", id="podopslifecycle-validate", labels=CONTROLLED, operations=WRITES, registry=registry
    )
    async def validate_pod(body: kopf.Body, **kwargs: Any) -> None:
        old = kwargs.get("old")
        meta = body.get("metadata") or {}
        old_meta = dict(old).get("metadata") or {} if old is not None else {}
        labels, annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
        old_annotations = dict(old_meta.get("annotations") or {})
        if (
            old is not None
            and labels == old_meta.get("labels")
            and _without_history(annotations) == _without_history(old_annotations)
        ):
            # Only writes that change labels or annotations are judged, so a pod already holding
            # a bad label never blocks e.g. a traffic controller removing its finalizer (the
            # history our mutating webhook adds to that write does not count).
            return
        errors = validate(labels, annotations)
        if errors:
            raise kopf.AdmissionError(
                "failed to validate PodOpsLifecycle labels: " + "; ".join(errors), code=422
            )

    if cfg.grace_delete:

        @kopf.on.validate(
            "pods", id="podopslifecycle-delete", labels=CONTROLLED, operations=["DELETE"],
            side_effects=True, registry=registry,
        )  # fmt: skip
        async def grace_delete(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
            old = kwargs.get("old")
            pod = dict(old) if old is not None else dict(body)
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            gated = any(
                g.get("conditionType") == SERVICE_READY
                for g in (pod.get("spec") or {}).get("readinessGates") or []
            )
            if not gated or allow_ops(POD_DELETE_ADAPTER, labels, now_ns=_now_ns()).allowed:
                return
            if TO_DELETE not in labels:
                core = client.CoreV1Api(memo["api"])
                await core.patch_namespaced_pod(  # type: ignore[call-arg]
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"labels": {TO_DELETE: str(_now_ns())}}},
                    _content_type="application/merge-patch+json",
                )
            raise kopf.AdmissionError(
                "pod deletion is underway through PodOpsLifecycle: the pod is labelled "
                f"{TO_DELETE} and will be deleted once its cooperation controllers let it go "
                "(Preparing), no need to delete it again",
                code=403,
            )


def mutate(body: kopf.Body, patch: kopf.Patch, namespace: str | None, kwargs: Mapping[str, Any]) -> None:
    """The webhook's fast path: fold the next label steps into the write under admission."""
    # kopf passes old/operation and the indexes by name; its WebhookFn protocol omits them.
    pod = dict(body)
    old = kwargs.get("old")
    rules = rules_in(namespace or "", kwargs.get("transition_rules"))
    now_ns = _now_ns()
    try:
        gate = gate_for(pod, rules)
        facts = facts_of(
            pod, gate=gate, creating=kwargs.get("operation") == "CREATE", previous=dict(old) if old else None
        )
        change = settle(facts, now_ns=now_ns)
        history = history_after(pod, change, rules, now_ns=now_ns)
    except InvalidLifecycleLabel:
        return  # the validating webhook rejects it with a message
    labels = change.to_merge_patch().get("metadata", {}).get("labels", {})
    for key, value in labels.items():
        patch.setdefault("metadata", {}).setdefault("labels", {})[key] = value
    if history is not None:
        patch.setdefault("metadata", {}).setdefault("annotations", {})[HISTORY_ANNOTATION] = history
    if change.add_readiness_gate:
        patch.fns.append(_add_readiness_gate)


def _without_history(annotations: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in annotations.items() if k != HISTORY_ANNOTATION}


def _add_readiness_gate(raw: Any) -> None:
    gates = raw.setdefault("spec", {}).setdefault("readinessGates", [])
    if not any(g.get("conditionType") == SERVICE_READY for g in gates):
        gates.append({"conditionType": SERVICE_READY})


def _body(pod: Mapping[str, Any]) -> kopf.Body:
    """A kopf Body over a plain pod dict (for posting Events about it)."""
    return kopf.Body(cast(kopf.RawBody, dict(pod)))
