"""CollaSet controller I/O: kopf indexes (observe), one reconcile loop per CollaSet (trigger), apply.

Observe: three kopf indexes, complete before any handler runs and fed by watches, so a
reconcile never LISTs:

* ``collaset_pods``: control pods by the uid of their controlling CollaSet;
* ``collaset_revisions``: ControllerRevisions by the uid of their controlling CollaSet;
* ``collaset_jobs``: hook Jobs by ``<namespace>/<collaset>`` (label ``rollouts.kusionstack.io/collaset``);
* ``transition_rules`` (:mod:`rollouts.operator.handlers.indexes`): PodTransitionRules by
  namespace, for the default rule of ``rollingUpdate.maxUnavailable`` and for the rules'
  rejections that condition messages quote. A rule's event wakes every CollaSet of its
  namespace (its status may now hold or release their pods).

Trigger: a kopf daemon per CollaSet runs a level-based loop: wait until the watch shows
the results of the previous writes (:mod:`rollouts.operator.collasets_expecting`), decide
(:mod:`rollouts.operator.collasets_deciding`), apply
(:mod:`rollouts.operator.collasets_applying`), then sleep until an event of the CollaSet
or one of its children wakes it or the decision's ``requeue_after`` passes. Only one
reconcile of a CollaSet runs at a time; the daemon's body is kopf's live view of the
object. Deleting a CollaSet stops its daemon; the API server's garbage collector
deletes its pods and revisions (owner references), and the revisions' hook Jobs.

The daemon makes kopf put its finalizer on CollaSets, released when the daemon stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import kopf

from hooks.rendering import COLLASET_LABEL
from lifecycle.labels import CONTROL, CONTROL_VALUE
from rollouts.api.collasets import GROUP, KIND, VERSION
from rollouts.operator import metrics
from rollouts.operator.caching import ByVersion
from rollouts.operator.collasets_applying import Applier
from rollouts.operator.collasets_deciding import InvalidCollaSet, Observed, decide
from rollouts.operator.collasets_expecting import Expectations, Kind
from rollouts.operator.handlers.indexes import snapshot
from rollouts.planning.updating import view_pod

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig

log = logging.getLogger("rollouts.collasets")

#: Pause after an apply that reported errors (API down, invalid template ...).
ERROR_BACKOFF_SECONDS = 5.0
#: Parsed pods shared by every CollaSet's reconciles (a pod version is parsed once).
POD_VIEWS = ByVersion(view_pod)


def controller_ref(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object's controller ownerReference when a CollaSet controls it."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).startswith(GROUP)
        ):
            return dict(ref)
    return None


def owner_uid(body: Mapping[str, Any]) -> str | None:
    ref = controller_ref(body)
    return None if ref is None else str(ref.get("uid"))


def owner_name(body: Mapping[str, Any]) -> str | None:
    ref = controller_ref(body)
    return None if ref is None else str(ref.get("name"))


def _owned(body: kopf.Body, **_: Any) -> bool:
    return owner_uid(body) is not None


class Wakeups:
    """One asyncio.Event per running CollaSet loop, keyed ``namespace/name``."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}

    def register(self, key: str) -> asyncio.Event:
        return self.events.setdefault(key, asyncio.Event())

    def unregister(self, key: str) -> None:
        self.events.pop(key, None)

    def wake(self, namespace: str | None, name: str | None) -> None:
        if name:
            event = self.events.get(f"{namespace or ''}/{name}")
            if event is not None:
                event.set()

    def wake_namespace(self, namespace: str | None) -> None:
        prefix = f"{namespace or ''}/"
        for key, event in self.events.items():
            if key.startswith(prefix):
                event.set()


def register(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    wakeups = Wakeups()
    # rollouts_reconcile_queue_depth: loops woken whose step has not started (the wake is cleared then)
    metrics.QUEUES.set("collaset", lambda: {"": sum(e.is_set() for e in list(wakeups.events.values()))})

    @kopf.index("pods", id="collaset_pods", labels={CONTROL: CONTROL_VALUE}, when=_owned, registry=registry)
    async def collaset_pods(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        """Control pods by the uid of their controlling CollaSet."""
        return {str(owner_uid(body)): snapshot(body)}

    @kopf.index("apps", "v1", "controllerrevisions", id="collaset_revisions", when=_owned, registry=registry)
    async def collaset_revisions(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        """ControllerRevisions by the uid of their controlling CollaSet."""
        return {str(owner_uid(body)): snapshot(body)}

    @kopf.index(
        "batch", "v1", "jobs", id="collaset_jobs", labels={COLLASET_LABEL: kopf.PRESENT}, registry=registry
    )
    async def collaset_jobs(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
    ) -> dict[str, dict[str, Any]]:
        """Hook Jobs by ``namespace/collaset``."""
        return {f"{namespace or ''}/{labels[COLLASET_LABEL]}": snapshot(body)}

    @kopf.on.event("pods", labels={CONTROL: CONTROL_VALUE}, when=_owned, registry=registry)
    async def pod_event(body: kopf.Body, namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, owner_name(body))

    @kopf.on.event("apps", "v1", "controllerrevisions", when=_owned, registry=registry)
    async def revision_event(body: kopf.Body, namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, owner_name(body))

    @kopf.on.event("batch", "v1", "jobs", labels={COLLASET_LABEL: kopf.PRESENT}, registry=registry)
    async def job_event(labels: kopf.Labels, namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, labels.get(COLLASET_LABEL))

    @kopf.on.event(GROUP, VERSION, "podtransitionrules", id="collaset_rule_event", registry=registry)
    async def rule_event(namespace: str | None, **_: Any) -> None:
        wakeups.wake_namespace(namespace)

    @kopf.on.event(GROUP, VERSION, "collasets", registry=registry)
    async def collaset_event(name: str | None, namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, name)

    # An unexpected error (not an API answer, e.g. the connection dropped) restarts the loop soon.
    @kopf.daemon(
        GROUP, VERSION, "collasets", backoff=ERROR_BACKOFF_SECONDS, cancellation_timeout=10, registry=registry
    )
    async def collaset_loop(
        body: kopf.Body,
        name: str,
        namespace: str | None,
        memo: Any,
        stopped: kopf.DaemonStopped,
        **kwargs: Any,
    ) -> None:
        """Reconcile one CollaSet until it is deleted or the operator stops."""
        key = f"{namespace}/{name}"
        wake = wakeups.register(key)
        loop = Reconciler(
            body=body,
            api=memo["api"],
            # kopf passes every index to every handler, named after its id.
            pods=kwargs["collaset_pods"],
            revisions=kwargs["collaset_revisions"],
            jobs=kwargs["collaset_jobs"],
            rules=kwargs["transition_rules"],
        )
        try:
            while not stopped:
                wake.clear()
                with metrics.reconciling("collaset"):
                    delay = await loop.step()
                if stopped:
                    break
                await _sleep(wake, stopped, delay)
        finally:
            wakeups.unregister(key)


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float | None) -> None:
    """Until ``wake`` is set, the daemon is stopped, or ``delay`` seconds passed."""

    async def until_stopped() -> None:
        await stopped.wait()

    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


class Reconciler:
    """The observe-decide-apply step of one CollaSet, with its expectations."""

    def __init__(
        self,
        *,
        body: kopf.Body,
        api: Any,
        pods: kopf.Index[str, dict[str, Any]],
        revisions: kopf.Index[str, dict[str, Any]],
        jobs: kopf.Index[str, dict[str, Any]],
        rules: kopf.Index[str, dict[str, Any]],
    ) -> None:
        self.body = body
        self.pods = pods
        self.revisions = revisions
        self.jobs = jobs
        self.rules = rules
        self.expectations = Expectations()
        self.applier = Applier(api, expectations=self.expectations, post=self.post, clock=time.monotonic)
        self._invalid: str | None = None
        #: The default rule's conflict last posted, so it is posted once.
        self._conflict: str | None = None
        #: Errors of the last apply, so a persistent error is posted as an Event once, not every retry.
        self._errors: list[str] = []

    @property
    def key(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    @property
    def namespace(self) -> str:
        return str((self.body.get("metadata") or {}).get("namespace") or "")

    def post(self, type: str, reason: str, message: str) -> None:
        kopf.event(self.body, type=type, reason=reason, message=message)

    def observe(self) -> Observed:
        uid = str((self.body.get("metadata") or {}).get("uid", ""))
        return Observed(
            collaset=snapshot(self.body),
            pods=list(self.pods.get(uid, [])),
            revisions=list(self.revisions.get(uid, [])),
            jobs=list(self.jobs.get(self.key, [])),
            rules=list(self.rules.get(self.namespace, [])),
        )

    def find(self, kind: Kind, name: str) -> Mapping[str, Any] | None:
        """An object of this CollaSet as the indexes (or the live body) show it."""
        if kind == Kind.COLLASET:
            return self.body
        uid = str((self.body.get("metadata") or {}).get("uid", ""))
        store: Iterable[dict[str, Any]]
        if kind == Kind.POD:
            store = self.pods.get(uid, [])
        elif kind == Kind.REVISION:
            store = self.revisions.get(uid, [])
        elif kind == Kind.RULE:
            store = self.rules.get(self.namespace, [])
        else:
            store = self.jobs.get(self.key, [])
        for obj in store:
            if (obj.get("metadata") or {}).get("name") == name:
                return obj
        return None

    async def step(self) -> float | None:
        """One pass; returns how long to sleep at most before the next one (None: until woken)."""
        if (self.body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        waiting = self.expectations.settle(self.find, now=time.monotonic(), owner=self.key)
        if waiting is not None:
            log.debug("collaset %s waits for %s", self.key, ", ".join(self.expectations.pending()))
            return waiting
        observed = self.observe()
        try:
            decision = decide(observed, now=datetime.now(UTC), view=POD_VIEWS)
        except InvalidCollaSet as invalid:
            message = f"spec does not parse, nothing done until it is fixed: {invalid}"
            if self._invalid != message:
                self._invalid = message
                log.warning("collaset %s: %s", self.key, message)
                self.post("Warning", "InvalidSpec", message)
            return None
        self._invalid = None
        if decision.rule_conflict != self._conflict:
            self._conflict = decision.rule_conflict
            if decision.rule_conflict is not None:
                log.warning("collaset %s: %s", self.key, decision.rule_conflict)
                self.post("Warning", "RuleConflict", decision.rule_conflict)
        plan = decision.plan
        if (
            decision.revision_actions
            or decision.rule_actions
            or (plan is not None and plan.actions)
            or decision.status is not None
        ):
            log.info("collaset %s: %s", self.key, _summarize(decision))
        result = await self.applier.apply(decision, collaset=observed.collaset, revisions=observed.revisions)
        if result.errors:
            for error in result.errors:
                log.warning("collaset %s: %s", self.key, error)
                if error not in self._errors:
                    self.post("Warning", "ReconcileError", error)
            self._errors = result.errors
            return ERROR_BACKOFF_SECONDS
        self._errors = []
        if self.expectations.open:
            return 0.0  # loop straight back: settle() waits for the watch
        return decision.requeue_after


def _summarize(decision: Any) -> str:
    """One log line per decision: revision actions, pod actions by type, hook changes, status."""
    parts: list[str] = [f"revision {decision.updated_revision}"]
    if decision.revision_actions:
        parts.append(
            "revisions: " + ", ".join(type(a).__name__ + " " + a.name for a in decision.revision_actions)
        )
    if decision.rule_actions:
        parts.append("rules: " + ", ".join(type(a).__name__ + " " + a.name for a in decision.rule_actions))
    plan = decision.plan
    if plan is not None and plan.actions:
        counts: dict[str, int] = {}
        for action in plan.actions:
            counts[type(action).__name__] = counts.get(type(action).__name__, 0) + 1
        parts.append("pods: " + ", ".join(f"{n}x{k}" for k, n in sorted(counts.items())))
    hooks = decision.hooks
    if hooks is not None and (hooks.create_jobs or hooks.delete_jobs):
        parts.append(
            f"hooks: create {[j.name for j in hooks.create_jobs]} "
            f"delete {[j.name for j in hooks.delete_jobs]}"
        )
    if hooks is not None and not hooks.done:
        parts.append(hooks.condition_text)
    if decision.status is not None:
        parts.append("status changed")
    return "; ".join(parts)
