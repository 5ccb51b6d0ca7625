"""PodTransitionRule controller: the I/O around the pure rule core, one worker per rule object.

Where it sits: the pure core (:mod:`lifecycle.rules`) judges pods; this module feeds it
snapshots from kopf's indexes (``transition_rules``, ``control_pods``), performs the webhook
calls it asks for (:func:`lifecycle.rules.calling.evaluate_stage_with_calls`) and writes what it
decided. The lifecycle controller reads the result back from the PTR status through the same
index (:func:`lifecycle.rules.evaluating.gate_from_status`), so our job ends at the status and
the pod annotations.

Triggers (level-based: every trigger runs the same idempotent reconcile of one PTR):

* one asyncio worker task per PTR, created on the PTR's first watch event (the initial listing
  after a start included), woken through an :class:`asyncio.Event`;
* PTR events wake it when the generation changed (a spec edit) or the object went away, but not
  for our own status writes, which would re-ask a rejecting webhook in a loop;
* control-pod events wake every PTR of the pod's namespace that selects the pod now or lists it
  in ``status.targets``, when something the rules read changed (labels, annotations other than
  the detail annotations we write, deletion, pod IP);
* the worker sleeps until the verdicts' ``retry_after`` (webhook poll intervals, retries after a
  rejection), and at most :data:`RESYNC_SECONDS`.

No finalizers and no kopf progress annotations: nothing of ours stays on the PTR. A deleted PTR's
worker removes its detail annotations from the pods (``DELETED`` event, or any reconcile that no
longer finds the object); annotations of PTRs deleted while the operator was down are swept on
the initial pod listing after start. Poll tasks live in the PTR status, so a restarted operator
resumes polling from there.

Reconcile, observe -> decide -> apply:

1. observe: the PTR and its namespace's control pods from the indexes, as a frozen
   :class:`Snapshot` (pods in a stage by :func:`lifecycle.states.parse_state`). Right after our
   status write the index may still hold the version before it; the worker then uses the status
   it wrote (it remembers the resourceVersions on both sides of the write). Likewise annotation
   values it wrote count as written until the index shows them (expectations, forgotten with a
   log line after :data:`EXPECTATION_SECONDS`).
2. decide: both stages evaluated concurrently with their webhook calls, then :func:`plan`
   (pure) turns the verdicts into a :class:`Plan`: the status (only when
   :func:`~lifecycle.rules.evaluating.status_changed`), the annotation writes (only when the
   value differs), the Events (only when a pod's rejection changes, ids and counts ignored),
   and when to look again.
3. apply: the status through the status subresource as a merge patch guarded by the observed
   resourceVersion (a stale decision fails with 409 and is observed again), then the pod
   annotations as merge patches of the one key (not guarded: the key is ours alone), then Events.

Rejections are visible where people look: ``kubectl describe ptr`` shows ``status.details``
(``rejectInfo`` per pod) and Warning Events ``PodsRejected`` / ``WebhookFailureIgnored``;
``kubectl describe pod`` shows the ``detail.podtransitionrule.kusionstack.io/<ptr>`` annotation
and a Warning ``TransitionRuleRejected`` naming the rule and its reason (Normal
``TransitionRulePassed`` once it passes).

Limits: a pod that loses ``kusionstack.io/control`` leaves the index unseen by us: it keeps its
detail annotation, and leaves ``targets`` at the PTR's next reconcile; a webhook that rejected
pods is asked again on the next reconcile, which a relevant change to a selected pod brings
forward from the 5 s retry.

:data:`COUNTS` counts this controller's API writes and reconciles, for ``bench/ptr_precheck.py``.
Prometheus (:mod:`rollouts.operator.metrics`): each rule's verdicts per evaluation by rule kind,
the webhook calls' latency and failures (a trace config on the controller's HTTP session), the
reconcile latency and the number of workers woken but not yet reconciling (the queue depth).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, cast

import aiohttp
import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from lifecycle.labels import CONTROL, CONTROL_VALUE
from lifecycle.rules.calling import evaluate_stage_with_calls
from lifecycle.rules.evaluating import (
    StageVerdicts,
    build_status,
    detail_annotation,
    select_pods,
    status_changed,
)
from lifecycle.rules.models import (
    DETAIL_ANNOTATION_PREFIX,
    PLURAL,
    PodDetail,
    PodTransitionRule,
    PodTransitionRuleStatus,
    Stage,
)
from lifecycle.rules.subjects import PodView
from lifecycle.schema import LabelSelector
from lifecycle.states import InvalidLifecycleLabel, parse_state
from rollouts import kube
from rollouts.operator import metrics
from rollouts.operator.caching import ByVersion
from rollouts.operator.handlers.indexes import GROUP, VERSION, parse_rule
from rollouts.operator.logs import decision

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig

log = logging.getLogger("rollouts.transitionrules")

#: Look at every PTR at least this often, whatever the events said.
RESYNC_SECONDS: Final = 300.0
#: After a wake-up, wait this long so a burst of pod events makes one reconcile.
COALESCE_SECONDS: Final = 0.05
#: Never look again sooner than this (a poll due "now" must not spin).
MIN_DELAY_SECONDS: Final = 0.2
#: Back-off after failed reconciles (API errors, bugs), by consecutive failures.
BACKOFF_SECONDS: Final = (1.0, 2.0, 5.0, 10.0, 30.0)
#: Pod annotation writes in flight at once, per PTR.
WRITE_CONCURRENCY: Final = 32
#: An annotation write the watch has not shown after this long is forgotten (and logged).
EXPECTATION_SECONDS: Final = 30.0
#: Our status writes remembered until the index shows them (see ``Worker.written``).
WRITTEN_CHAIN_LIMIT: Final = 32
#: Events carry at most this many characters of message.
EVENT_MESSAGE_LIMIT: Final = 1000

DETAIL_PREFIX: Final = f"{DETAIL_ANNOTATION_PREFIX}/"
#: The annotation of a selected pod with no detail (not in a stage), as Operating writes it.
NO_DETAIL: Final = json.dumps({"stage": "Unknown", "passed": True}, separators=(",", ":"))

Key = tuple[str, str]  # (namespace, name) of a PTR


@dataclass
class WriteCounts:
    """API writes issued by this controller (process-wide; read by the benchmark)."""

    status_patches: int = 0
    annotation_patches: int = 0
    events: int = 0
    conflicts: int = 0
    reconciles: int = 0

    def total_writes(self) -> int:
        return self.status_patches + self.annotation_patches + self.events

    def reset(self) -> None:
        for counter in fields(self):
            setattr(self, counter.name, 0)


COUNTS = WriteCounts()


# -- observe --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What one reconcile of a PTR looks at, taken from the indexes at one instant."""

    rule_obj: PodTransitionRule
    #: The resourceVersion a status write is guarded with.
    resource_version: str
    previous: PodTransitionRuleStatus | None
    selected: tuple[PodView, ...]
    #: Current value of our annotation per pod of the namespace carrying it or selected.
    annotations: Mapping[str, str | None]
    #: Pod uids, for Events about them.
    pod_uids: Mapping[str, str] = field(default_factory=dict)


def annotation_key(ptr_name: str) -> str:
    return f"{DETAIL_PREFIX}{ptr_name}"


def stage_of(labels: Mapping[str, str]) -> Stage | None:
    """The PodTransitionRule stage of a pod; a malformed lifecycle label puts it in none."""
    try:
        stage = parse_state(labels).stage
    except InvalidLifecycleLabel:
        return None
    return None if stage is None else Stage(stage.value)


def _view(pod: Mapping[str, Any]) -> PodView:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return PodView.from_pod(pod, stage=stage_of(labels))


#: A pod as the rules see it, parsed once per pod version (every pass looks at every pod).
view_of = ByVersion(_view)


def observe(
    *,
    rule_obj: PodTransitionRule,
    resource_version: str,
    previous: PodTransitionRuleStatus | None,
    pods: Iterable[Mapping[str, Any]],
    written: Mapping[str, str | None] | None = None,
) -> Snapshot:
    """The snapshot of one PTR over the control pods of its namespace.

    ``written`` (pod -> annotation value) are our writes the index does not show yet: they
    stand in for what the index holds, so a lagging watch does not make us write twice.
    """
    key = annotation_key(rule_obj.name)
    written = written or {}
    views = []
    current: dict[str, str | None] = {}
    uids: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace", rule_obj.namespace) != rule_obj.namespace:
            continue
        view = view_of(pod)
        views.append(view)
        uids[view.name] = str(meta.get("uid", ""))
        current[view.name] = written[view.name] if view.name in written else view.annotations.get(key)
    selected = select_pods(rule_obj=rule_obj, pods=views)
    names = {pod.name for pod in selected}
    return Snapshot(
        rule_obj=rule_obj,
        resource_version=resource_version,
        previous=previous,
        selected=selected,
        annotations={name: value for name, value in current.items() if value is not None or name in names},
        pod_uids=uids,
    )


# -- decide ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EventNote:
    """An Event to post: on the PTR (``pod`` None) or on a pod."""

    pod: str | None
    type: str
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything one reconcile writes, and when to look again (None: on events only)."""

    status: PodTransitionRuleStatus | None
    annotations: Mapping[str, str | None]
    events: tuple[EventNote, ...]
    retry_after: float | None
    #: Per pod, the rejection last announced (for the next plan); warnings announced.
    announced: Mapping[str, str]
    warned: frozenset[str]

    def describe(self) -> str:
        status = "status written" if self.status is not None else "status unchanged"
        removed = sum(1 for value in self.annotations.values() if value is None)
        retry = f"{self.retry_after:.1f}s" if self.retry_after is not None else "on events"
        return (
            f"{status}, {len(self.annotations) - removed} annotations set, {removed} removed, "
            f"{len(self.events)} events, next look {retry}"
        )


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TASK = re.compile(r"(taskId|taskID|task id|by taskId)\s+[^\s,]+")
_DIGITS = re.compile(r"\d+")


def stable_reason(reason: str) -> str:
    """A reason without what changes on every call (trace and task ids, counts), to detect news."""
    return _DIGITS.sub("#", _TASK.sub(r"\1 *", _UUID.sub("*", reason)))


def _truncate(message: str) -> str:
    if len(message) <= EVENT_MESSAGE_LIMIT:
        return message
    return message[: EVENT_MESSAGE_LIMIT - 3] + "..."


def _rejection(detail: PodDetail) -> tuple[str, str] | None:
    if detail.passed or not detail.reject_info:
        return None
    info = detail.reject_info[-1]
    return info.rule_name, info.reason


def _announced_rule(announced: str) -> str:
    """The rule name in an :func:`announcement`."""
    return announced.split("/", 2)[1] if announced.count("/") >= 2 else ""


def announcement(detail: PodDetail) -> str | None:
    """What a rejection Event announces, without ids and counts: a new one is worth an Event."""
    rejection = _rejection(detail)
    if rejection is None:
        return None
    rule_name, reason = rejection
    return f"{detail.stage}/{rule_name}/{stable_reason(reason)}"


def plan(
    *,
    snapshot: Snapshot,
    stages: Sequence[StageVerdicts],
    now: datetime,
    announced: Mapping[str, str],
    warned: frozenset[str],
) -> Plan:
    """The writes one reconcile makes, from its snapshot and the verdicts of every stage."""
    rule_obj = snapshot.rule_obj
    status = build_status(rule_obj=rule_obj, selected_pods=snapshot.selected, stages=stages, now=now)
    subjects = {
        name for verdicts in stages for name in (*verdicts.verdict.passed, *verdicts.verdict.rejected)
    }
    details = {detail.name: detail for detail in status.details}

    annotations: dict[str, str | None] = {}
    selected = {pod.name for pod in snapshot.selected}
    for name in sorted(selected):
        detail = details.get(name)
        wanted = NO_DETAIL if detail is None else detail_annotation(ptr_name=rule_obj.name, detail=detail)[1]
        if snapshot.annotations.get(name) != wanted:
            annotations[name] = wanted
    for name, value in sorted(snapshot.annotations.items()):
        if name not in selected and value is not None:
            annotations[name] = None

    # pods on their way out (a namespace being deleted, say) are not worth an Event
    leaving = {
        pod.name for pod in snapshot.selected if (pod.manifest.get("metadata") or {}).get("deletionTimestamp")
    }
    # A pod waiting for the budget (availablePolicy) is queueing, not failing: during a rollout
    # nearly every pod does, and an Event pair each would be most of the operator's requests.
    # Those waits are summed up on the rule; labelCheck and webhook rejections, which need
    # someone to act, are also announced on the pod.
    queueing = {rule.name for rule in rule_obj.spec.rules if rule.available_policy is not None}
    events: list[EventNote] = []
    now_announced: dict[str, str] = {}
    blocked: list[str] = []
    for name in sorted(subjects - leaving):
        detail = details[name]
        rejection = _rejection(detail)
        if rejection is None:
            if name in announced and _announced_rule(announced[name]) not in queueing:
                events.append(
                    EventNote(
                        pod=name,
                        type="Normal",
                        reason="TransitionRulePassed",
                        message=f"PodTransitionRule {rule_obj.name}: passed every rule of {detail.stage}",
                    )
                )
            continue
        rule_name, reason = rejection
        now_announced[name] = announcement(detail) or ""
        blocked.append(f"{name} ({detail.stage}) by {rule_name}: {reason}")
        if announced.get(name) != now_announced[name] and rule_name not in queueing:
            events.append(
                EventNote(
                    pod=name,
                    type="Warning",
                    reason="TransitionRuleRejected",
                    message=_truncate(
                        f"PodTransitionRule {rule_obj.name} rule {rule_name} blocks {detail.stage}: {reason}"
                    ),
                )
            )
    # The rule's summary follows the kinds of rejection (stage, rule, reason without counts),
    # not each pod: one Event when a budget starts holding pods back, one when none is left.
    before = {key for name, key in announced.items() if name not in leaving}
    if set(now_announced.values()) != before:
        if blocked:
            message = f"{len(blocked)} pod(s) blocked: " + "; ".join(blocked)
            events.append(
                EventNote(pod=None, type="Warning", reason="PodsRejected", message=_truncate(message))
            )
        else:
            events.append(
                EventNote(pod=None, type="Normal", reason="PodsPassed", message="no pod is blocked any more")
            )

    warnings = {stable_reason(w): w for verdicts in stages for w in verdicts.warnings}
    for stable, warning in sorted(warnings.items()):
        if stable not in warned:
            events.append(
                EventNote(
                    pod=None, type="Warning", reason="WebhookFailureIgnored", message=_truncate(warning)
                )
            )

    retries = [v.verdict.retry_after for v in stages if v.verdict.retry_after is not None]
    return Plan(
        status=status if status_changed(snapshot.previous, status) else None,
        annotations=annotations,
        events=tuple(events),
        retry_after=max(MIN_DELAY_SECONDS, min(retries)) if retries else None,
        announced=now_announced,
        warned=frozenset(warnings),
    )


def status_document(status: PodTransitionRuleStatus) -> dict[str, Any]:
    """The status as a merge patch: every top-level field present, null where unset."""
    document = status.to_api()
    for name, info in PodTransitionRuleStatus.model_fields.items():
        alias = info.alias or name
        document.setdefault(alias, None)
    return document


# -- apply ----------------------------------------------------------------------------------------


class RuleWriter:
    """The controller's only API writes: PTR status, pod annotations, Events."""

    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    async def patch_status(
        self, *, namespace: str, name: str, resource_version: str, status: PodTransitionRuleStatus
    ) -> str:
        """Write the status if the object is still at ``resource_version``; the new resourceVersion.

        :class:`rollouts.kube.Conflict` when it moved on, :class:`rollouts.kube.NotFound` when gone.
        """
        body = {"metadata": {"resourceVersion": resource_version}, "status": status_document(status)}
        COUNTS.status_patches += 1
        try:
            result = await self._objects.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                field_manager=kube.FIELD_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            raise kube.map_error(e) from e
        return str(cast(Mapping[str, Any], result)["metadata"]["resourceVersion"])

    async def patch_annotation(self, *, namespace: str, pod: str, key: str, value: str | None) -> bool:
        """Set (or with None remove) one annotation; False when the pod is gone."""
        body = {"metadata": {"annotations": {key: value}}}
        COUNTS.annotation_patches += 1
        try:
            await kube.send(
                self._core.patch_namespaced_pod,
                pod,
                namespace,
                body,
                field_manager=kube.FIELD_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            error = kube.map_error(e)
            if isinstance(error, kube.NotFound):
                return False
            raise error from e
        return True


def _ptr_ref(rule_obj: PodTransitionRule) -> dict[str, Any]:
    return {"apiVersion": rule_obj.api_version, "kind": rule_obj.kind, "metadata": rule_obj.metadata}


def _pod_ref(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": uid}}


def post_events(snapshot: Snapshot, events: Iterable[EventNote]) -> None:
    """Queue Events for kopf's poster, which posts them in the background, with retries."""
    rule_obj = snapshot.rule_obj
    for note in events:
        if note.pod is None:
            ref = _ptr_ref(rule_obj)
        else:
            ref = _pod_ref(rule_obj.namespace, note.pod, snapshot.pod_uids.get(note.pod, ""))
        COUNTS.events += 1
        kopf.event(cast(kopf.Body, ref), type=note.type, reason=note.reason, message=note.message)


# -- the per-run controller -----------------------------------------------------------------------


def _key_of(raw: Mapping[str, Any]) -> Key:
    meta = raw.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _pod_digest(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the rules read from a pod; our own annotation writes leave it unchanged."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        meta.get("uid"),
        tuple(sorted((meta.get("labels") or {}).items())),
        tuple(sorted((k, v) for k, v in annotations.items() if not k.startswith(DETAIL_PREFIX))),
        meta.get("deletionTimestamp") is not None,
        (pod.get("status") or {}).get("podIP"),
    )


@functools.lru_cache(maxsize=1024)
def _parse_selector(document: str) -> LabelSelector | None:
    try:
        return LabelSelector.model_validate_json(document)
    except ValidationError:
        return None


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether labels match a raw metav1.LabelSelector (parsed once per distinct selector)."""
    parsed = _parse_selector(json.dumps(selector, sort_keys=True))
    return parsed is not None and parsed.matches(dict(labels))


def concerns(rule_raw: Mapping[str, Any], *, pod: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod event matters to a PTR: it selects the pod now, or listed it last time."""
    if pod in (((rule_raw.get("status") or {}).get("targets")) or []):
        return True
    selector = (rule_raw.get("spec") or {}).get("selector")
    return isinstance(selector, Mapping) and selector_matches(selector, labels)


@dataclass(frozen=True)
class _Written:
    """One status write of ours: the index shows ``before`` until the watch delivers it."""

    before: str
    after: str
    status: PodTransitionRuleStatus


def latest_write(written: Mapping[str, _Written], shown: str) -> _Written | None:
    """Our latest status write reached from the version the index shows; None when it shows none
    of ours (it has caught up, or someone else wrote)."""
    latest = None
    for _ in range(len(written)):
        if shown not in written:
            break
        latest = written[shown]
        shown = latest.after
    return latest


class _Gone:
    """Reconcile outcome: the PTR is gone and its annotations are removed."""


GONE: Final = _Gone()


class Worker:
    """Reconciles one PTR whenever woken, or when its verdicts asked to look again."""

    def __init__(self, controller: TransitionRuleController, key: Key) -> None:
        self.controller = controller
        self.key = key
        self.wake = asyncio.Event()
        self.wake.set()
        #: The generation last reconciled: PTR events with another one wake the worker.
        self.generation: int | None = None
        #: Our status writes the index may not show yet, by the version each was guarded
        #: with: a chain from what the index shows to our latest write. Two writes can land
        #: before the watch delivers the first; building on the index then was a sure 409.
        self.written: dict[str, _Written] = {}
        #: Annotation writes not seen in the index yet: pod -> (value, deadline on the loop clock).
        self.expected: dict[str, tuple[str | None, float]] = {}
        self.announced: dict[str, str] | None = None
        self.warned: frozenset[str] = frozenset()
        self.invalid_generation: int | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        namespace, name = self.key
        self.task = asyncio.create_task(self.run(), name=f"podtransitionrule {namespace}/{name}")

    async def run(self) -> None:
        failures = 0
        delay: float | None = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=RESYNC_SECONDS if delay is None else delay)
            await asyncio.sleep(COALESCE_SECONDS)
            self.wake.clear()
            try:
                with metrics.reconciling("podtransitionrule"):
                    outcome = await self.controller.reconcile(self)
            except kube.Conflict as conflict:
                COUNTS.conflicts += 1
                log.info("podtransitionrule %s/%s: %s; observing again", *self.key, conflict.reason)
                self.written.clear()
                delay = MIN_DELAY_SECONDS  # the watch delivers the newer version in a moment
                continue
            except kube.NotFound:
                delay = None  # deleted: the DELETED event wakes us for the clean-up
                continue
            except Exception as error:
                delay = BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)]
                failures += 1
                if isinstance(error, kube.ApiError):
                    log.warning("podtransitionrule %s/%s: %s; retrying in %.0fs", *self.key, error, delay)
                else:
                    log.exception(
                        "podtransitionrule %s/%s: reconcile failed; retrying in %.0fs", *self.key, delay
                    )
                continue
            failures = 0
            if isinstance(outcome, _Gone):
                if self.controller.retire(self):
                    return
                delay = 0.0
            else:
                delay = outcome


class TransitionRuleController:
    """The state of one operator run: workers, the API and HTTP clients, the live indexes."""

    def __init__(self) -> None:
        self.workers: dict[Key, Worker] = {}
        self.digests: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.control_pods: Mapping[str, Iterable[Mapping[str, Any]]] | None = None
        self.transition_rules: Mapping[str, Iterable[Mapping[str, Any]]] | None = None
        self.writer: RuleWriter | None = None
        self.session: aiohttp.ClientSession | None = None

    def attach(
        self,
        *,
        memo: Mapping[str, Any],
        control_pods: Mapping[str, Iterable[Mapping[str, Any]]],
        transition_rules: Mapping[str, Iterable[Mapping[str, Any]]],
    ) -> None:
        """Take the live indexes and the run's API client (``memo["api"]``) from kopf's arguments."""
        self.control_pods = control_pods
        self.transition_rules = transition_rules
        if self.writer is None:
            self.writer = RuleWriter(memo["api"])
        if self.session is None:
            self.session = aiohttp.ClientSession(trace_configs=[metrics.webhook_trace_config()])

    async def close(self) -> None:
        workers = list(self.workers.values())
        self.workers.clear()
        for worker in workers:
            if worker.task is not None:
                worker.task.cancel()
        for worker in workers:
            if worker.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.task
        if self.session is not None:
            await self.session.close()
            self.session = None

    def queued(self) -> dict[str, float]:
        """Workers woken whose reconcile has not started yet (``rollouts_reconcile_queue_depth``)."""
        return {"": sum(worker.wake.is_set() for worker in list(self.workers.values()))}

    def worker(self, key: Key) -> tuple[Worker, bool]:
        existing = self.workers.get(key)
        if existing is not None:
            return existing, False
        worker = Worker(self, key)
        self.workers[key] = worker
        worker.start()
        return worker, True

    def retire(self, worker: Worker) -> bool:
        """Drop the worker of a gone PTR; no await since the check, so no event slips between."""
        if self.find_rule(worker.key) is not None or worker.wake.is_set():
            return False
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]
        return True

    def find_rule(self, key: Key) -> Mapping[str, Any] | None:
        namespace, name = key
        if self.transition_rules is None or namespace not in self.transition_rules:
            return None
        for raw in self.transition_rules[namespace]:
            if (raw.get("metadata") or {}).get("name") == name:
                return raw
        return None

    def pods_in(self, namespace: str) -> list[Mapping[str, Any]]:
        if self.control_pods is None or namespace not in self.control_pods:
            return []
        return list(self.control_pods[namespace])

    # -- triggers ---------------------------------------------------------------------------------

    def rule_event(self, kind: str | None, raw: Mapping[str, Any]) -> None:
        """Start the worker of a PTR seen for the first time; wake it on spec changes and deletion."""
        key = _key_of(raw)
        meta = raw.get("metadata") or {}
        if kind == "DELETED":
            existing = self.workers.get(key)
            if existing is not None:
                existing.wake.set()
            return
        worker, created = self.worker(key)
        if created or meta.get("deletionTimestamp") or meta.get("generation") != worker.generation:
            worker.wake.set()

    def pod_event(self, kind: str | None, raw: Mapping[str, Any]) -> None:
        """Wake the workers of the PTRs a control pod concerns, when something they read changed."""
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if kind == "DELETED":
            self.digests.pop((namespace, name), None)
        else:
            digest = _pod_digest(raw)
            if self.digests.get((namespace, name)) == digest:
                return
            self.digests[(namespace, name)] = digest
        if self.transition_rules is None or namespace not in self.transition_rules:
            return
        labels = meta.get("labels") or {}
        for rule_raw in self.transition_rules[namespace]:
            if concerns(rule_raw, pod=name, labels=labels):
                worker, _ = self.worker(_key_of(rule_raw))
                worker.wake.set()

    async def sweep_orphans(self, raw: Mapping[str, Any]) -> None:
        """Remove detail annotations of PTRs that no longer exist (deleted while we were down)."""
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if self.writer is None:
            return
        for key in meta.get("annotations") or {}:
            if not key.startswith(DETAIL_PREFIX):
                continue
            owner = (namespace, key.removeprefix(DETAIL_PREFIX))
            if owner in self.workers or self.find_rule(owner) is not None:
                continue
            log.info("pod %s/%s: removing %s, its PodTransitionRule is gone", namespace, name, key)
            await self.writer.patch_annotation(namespace=namespace, pod=name, key=key, value=None)

    # -- reconcile --------------------------------------------------------------------------------

    async def reconcile(self, worker: Worker) -> float | _Gone | None:
        """One pass over one PTR: seconds until the next look (None: on events only), or GONE."""
        namespace, name = worker.key
        raw = self.find_rule(worker.key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            await self._clean_up(worker)
            return GONE if raw is None else None
        COUNTS.reconciles += 1
        meta = raw.get("metadata") or {}
        worker.generation = meta.get("generation")
        parsed = parse_rule(raw)
        rule_obj, problem = parsed.rule, parsed.problem
        if rule_obj is None:
            if worker.invalid_generation != worker.generation:
                worker.invalid_generation = worker.generation
                log.warning("podtransitionrule %s/%s: invalid, not evaluated: %s", namespace, name, problem)
                kopf.event(
                    cast(kopf.Body, dict(raw)),
                    type="Warning",
                    reason="InvalidSpec",
                    message=_truncate(f"not evaluated: {problem}"),
                )
            return None
        resource_version = str(meta.get("resourceVersion", ""))
        previous = rule_obj.status
        latest = latest_write(worker.written, resource_version)
        if latest is None:
            worker.written.clear()
        else:  # the watch has not delivered our last status writes yet: build on what we wrote
            previous, resource_version = latest.status, latest.after
        pods = self.pods_in(namespace)
        snapshot = observe(
            rule_obj=rule_obj,
            resource_version=resource_version,
            previous=previous,
            pods=pods,
            written=self._unseen_writes(worker, pods),
        )
        if worker.announced is None:
            # after a start, what the status shows was announced by the run before
            worker.announced = {
                d.name: key for d in (previous.details if previous else ()) if (key := announcement(d))
            }
        now = datetime.now(UTC)
        assert self.session is not None
        stages = await asyncio.gather(
            *(
                evaluate_stage_with_calls(
                    session=self.session,
                    rule_obj=rule_obj,
                    stage=stage,
                    selected_pods=snapshot.selected,
                    subjects=[pod for pod in snapshot.selected if pod.stage == stage],
                    previous_status=snapshot.previous,
                    now=now,
                )
                for stage in Stage
            )
        )
        metrics.count_verdicts(rule_obj, stages)
        decided = plan(
            snapshot=snapshot, stages=stages, now=now, announced=worker.announced, warned=worker.warned
        )
        if decided.status is not None or decided.annotations or decided.events:
            log.info(
                "podtransitionrule %s/%s: %s",
                namespace,
                name,
                decided.describe(),
                extra={**decision("podtransitionrule", namespace, name), "reason": decided.describe()},
            )
        await self._apply(worker, snapshot, decided)
        return decided.retry_after

    def _unseen_writes(self, worker: Worker, pods: Iterable[Mapping[str, Any]]) -> dict[str, str | None]:
        """Our annotation writes the index does not show yet (the expectations), pruning the rest.

        An expectation ends when the index shows the value, when the pod is gone, or after
        :data:`EXPECTATION_SECONDS` (logged: the next pass then writes again if needed).
        """
        if not worker.expected:
            return {}
        key = annotation_key(worker.key[1])
        shown = {
            str((pod.get("metadata") or {}).get("name")): (
                (pod.get("metadata") or {}).get("annotations") or {}
            ).get(key)
            for pod in pods
        }
        now = asyncio.get_running_loop().time()
        for pod, (value, deadline) in list(worker.expected.items()):
            if pod not in shown or shown[pod] == value:
                del worker.expected[pod]
            elif now > deadline:
                log.info(
                    "podtransitionrule %s/%s: the write of %s on pod %s was not seen within %.0fs",
                    *worker.key,
                    key,
                    pod,
                    EXPECTATION_SECONDS,
                )
                del worker.expected[pod]
        return {pod: value for pod, (value, _) in worker.expected.items()}

    async def _apply(self, worker: Worker, snapshot: Snapshot, decided: Plan) -> None:
        assert self.writer is not None
        namespace, name = worker.key
        if decided.status is not None:
            after = await self.writer.patch_status(
                namespace=namespace,
                name=name,
                resource_version=snapshot.resource_version,
                status=decided.status,
            )
            worker.written[snapshot.resource_version] = _Written(
                before=snapshot.resource_version, after=after, status=decided.status
            )
            while len(worker.written) > WRITTEN_CHAIN_LIMIT:
                del worker.written[next(iter(worker.written))]
        await self._write_annotations(worker, decided.annotations)
        post_events(snapshot, decided.events)
        worker.announced = dict(decided.announced)
        worker.warned = decided.warned

    async def _write_annotations(self, worker: Worker, values: Mapping[str, str | None]) -> None:
        assert self.writer is not None
        writer = self.writer
        namespace, name = worker.key
        key = annotation_key(name)
        gate = asyncio.Semaphore(WRITE_CONCURRENCY)

        async def write(pod: str, value: str | None) -> None:
            async with gate:
                await writer.patch_annotation(namespace=namespace, pod=pod, key=key, value=value)
            worker.expected[pod] = (value, asyncio.get_running_loop().time() + EXPECTATION_SECONDS)

        await asyncio.gather(*(write(pod, value) for pod, value in values.items()))

    async def _clean_up(self, worker: Worker) -> None:
        """The PTR is gone or going: take its annotation off every pod that carries it."""
        namespace, name = worker.key
        key = annotation_key(name)
        pods = self.pods_in(namespace)
        unseen = self._unseen_writes(worker, pods)
        carriers: dict[str, str | None] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            pod_name = str(meta.get("name"))
            value = unseen[pod_name] if pod_name in unseen else (meta.get("annotations") or {}).get(key)
            if value is not None:
                carriers[pod_name] = None
        if carriers:
            log.info(
                "podtransitionrule %s/%s is gone: removing %s from %d pods",
                namespace,
                name,
                key,
                len(carriers),
            )
            await self._write_annotations(worker, carriers)
        worker.written.clear()
        worker.announced = None


# -- kopf handlers --------------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    """The PTR controller of one operator run; its state lives as long as the registry."""
    controller = TransitionRuleController()

    @kopf.on.startup(registry=registry)
    async def start_transition_rule_metrics(**_: Any) -> None:
        metrics.QUEUES.set("podtransitionrule", controller.queued)

    @kopf.on.cleanup(registry=registry)
    async def stop_transition_rule_workers(**_: Any) -> None:
        metrics.QUEUES.clear("podtransitionrule")
        await controller.close()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def transition_rule_event(event: kopf.RawEvent, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        """Start, wake or wind down the worker of this PTR."""
        # kopf passes the indexes by name; its WatchingFn protocol does not list them
        controller.attach(
            memo=memo, control_pods=kwargs["control_pods"], transition_rules=kwargs["transition_rules"]
        )
        controller.rule_event(event.get("type"), dict(body))

    @kopf.on.event("pods", labels={CONTROL: CONTROL_VALUE}, registry=registry)
    async def transition_rule_pod_event(
        event: kopf.RawEvent, body: kopf.Body, memo: Any, **kwargs: Any
    ) -> None:
        """Wake the PTRs this control pod concerns; on the listing after a start, sweep orphans."""
        # kopf passes the indexes by name; its WatchingFn protocol does not list them
        controller.attach(
            memo=memo, control_pods=kwargs["control_pods"], transition_rules=kwargs["transition_rules"]
        )
        kind = event.get("type")
        controller.pod_event(kind, dict(body))
        if kind is None:
            try:
                await controller.sweep_orphans(dict(body))
            except kube.ApiError as error:
                log.warning(
                    "pod %s: cannot remove orphaned detail annotations: %s", body.meta.get("name"), error
                )
