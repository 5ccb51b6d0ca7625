"""The operator's Prometheus metrics: the families, and the observers that feed them from watches.

Served on ``/metrics`` by :mod:`rollouts.operator.health`. Every family is process-wide in
``prometheus_client``'s default registry (with its process and Python collectors), so a
counter keeps counting across operator restarts inside one process (tests, playground).

Families (labels are bounded: phases, outcomes, rule kinds, controllers, verbs, our resource
kinds; never a pod, CollaSet or rule name):

=====================================================  ==========================================
``rollouts_lifecycle_transitions_total``               operations entering a phase (``phase``,
                                                       ``type``); ``phase`` is also the outcome
                                                       (``Completed``, ``Undone`` ...) at the end
``rollouts_lifecycle_phase_duration_seconds``          time spent per phase (``phase``, ``type``)
``rollouts_lifecycle_pods``                            control pods per pod phase (``phase``)
``rollouts_rule_verdicts_total``                       pods judged per rule (``kind``, ``stage``,
                                                       ``outcome`` passed / rejected)
``rollouts_rule_webhook_request_duration_seconds``     rule webhook HTTP calls (``call`` request
                                                       / poll)
``rollouts_rule_webhook_errors_total``                 failed calls (``call``, ``kind`` transport
                                                       / status)
``rollouts_hook_runs_total``                           finished hook runs (``outcome``)
``rollouts_hook_duration_seconds``                     hook Job run time (``outcome``)
``rollouts_rollout_duration_seconds``                  CollaSet rollouts (``outcome`` Completed /
                                                       Failed / Superseded)
``rollouts_reconcile_duration_seconds``                one reconcile (``controller``)
``rollouts_reconcile_queue_depth``                     objects woken, not yet reconciled
                                                       (``controller``)
``rollouts_api_requests_total``                        Kubernetes API requests (``verb``,
                                                       ``group``, ``resource``, ``code``), from
                                                       :data:`rollouts.apicalls.API_CALLS`
=====================================================  ==========================================

Lifecycle and CollaSet metrics are derived from what the watches show (the labels' own
timestamps and the history annotation of :mod:`lifecycle.history`, the CollaSet status),
not from our writes, so they count what happened even when another writer made it happen
and never count a write the API server refused. What existed when the operator started
(the initial listing) is the baseline: it is not counted again after a restart.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Final

import aiohttp
from prometheus_client import REGISTRY, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lifecycle.history import HISTORY_ANNOTATION, PHASE_ORDER, OperationRecord, parse_history, phase_stamps
from lifecycle.labels import OPERATING
from lifecycle.rules.evaluating import StageVerdicts
from lifecycle.rules.models import PodTransitionRule
from lifecycle.states import InvalidLifecycleLabel, OperationPhase, PodPhase, parse_state
from rollouts.apicalls import API_CALLS, ApiCalls

# ``<family>_created`` series (when each labelled child appeared) would double the output for nothing.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Seconds: from sub-second webhook steps to hour-long holds.
PHASE_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
REQUEST_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
RUN_BUCKETS: Final = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
RECONCILE_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

#: Operation types beyond this many distinct values are counted as ``other``.
MAX_TYPES: Final = 32

LIFECYCLE_TRANSITIONS: Final = Counter(
    "rollouts_lifecycle_transitions",
    "Operations entering a lifecycle phase; phase is the outcome (Completed, Undone, ...) when it ends.",
    ["phase", "type"],
)
LIFECYCLE_PHASE_SECONDS: Final = Histogram(
    "rollouts_lifecycle_phase_duration_seconds",
    "Time an operation spent in a lifecycle phase.",
    ["phase", "type"],
    buckets=PHASE_BUCKETS,
)
RULE_VERDICTS: Final = Counter(
    "rollouts_rule_verdicts",
    "Pods judged by a PodTransitionRule rule, per evaluation.",
    ["kind", "stage", "outcome"],
)
RULE_WEBHOOK_SECONDS: Final = Histogram(
    "rollouts_rule_webhook_request_duration_seconds",
    "HTTP calls to PodTransitionRule webhooks (first requests and polls).",
    ["call"],
    buckets=REQUEST_BUCKETS,
)
RULE_WEBHOOK_ERRORS: Final = Counter(
    "rollouts_rule_webhook_errors",
    "PodTransitionRule webhook calls without a usable answer (no connection, or a non-2xx status).",
    ["call", "kind"],
)
HOOK_RUNS: Final = Counter(
    "rollouts_hook_runs", "Lifecycle hook runs that finished, by outcome.", ["outcome"]
)
HOOK_SECONDS: Final = Histogram(
    "rollouts_hook_duration_seconds",
    "Run time of lifecycle hook Jobs (start to finish), by outcome.",
    ["outcome"],
    buckets=RUN_BUCKETS,
)
ROLLOUT_SECONDS: Final = Histogram(
    "rollouts_rollout_duration_seconds",
    "CollaSet rollouts, from the new revision to every pod on it, by outcome.",
    ["outcome"],
    buckets=RUN_BUCKETS,
)
RECONCILE_SECONDS: Final = Histogram(
    "rollouts_reconcile_duration_seconds",
    "Time one reconcile took, by controller.",
    ["controller"],
    buckets=RECONCILE_BUCKETS,
)


# -- collectors read at scrape time ---------------------------------------------------------------


class _Sources:
    """Named callables a collector reads at scrape time; an operator run sets and clears them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, Callable[[], Mapping[str, float]]] = {}

    def set(self, name: str, source: Callable[[], Mapping[str, float]]) -> None:
        with self._lock:
            self._sources[name] = source

    def clear(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def read(self) -> dict[str, Mapping[str, float]]:
        with self._lock:
            sources = dict(self._sources)
        found: dict[str, Mapping[str, float]] = {}
        for name, source in sources.items():
            # Read from the scrape thread while the loop changes it: a torn read is retried once.
            for _ in range(2):
                try:
                    found[name] = dict(source())
                    break
                except RuntimeError:
                    continue
        return found


#: ``rollouts_reconcile_queue_depth``: controller -> {"": depth}.
QUEUES: Final = _Sources()
#: ``rollouts_lifecycle_pods``: "lifecycle" -> {phase: pods}.
POD_PHASES: Final = _Sources()


class _StateCollector(Collector):
    """Gauges read from the live controllers, and the API request counts."""

    def __init__(self, calls: ApiCalls) -> None:
        self.calls = calls

    def collect(self) -> Iterator[Metric]:
        pods = GaugeMetricFamily(
            "rollouts_lifecycle_pods", "Control pods per lifecycle pod phase.", labels=["phase"]
        )
        counts: Tally[str] = Tally({phase.value: 0 for phase in PodPhase})
        for phases in POD_PHASES.read().values():
            counts.update({k: int(v) for k, v in phases.items()})
        for phase, value in sorted(counts.items()):
            pods.add_metric([phase], value)
        yield pods

        queue = GaugeMetricFamily(
            "rollouts_reconcile_queue_depth",
            "Objects woken for a reconcile that has not started yet, by controller.",
            labels=["controller"],
        )
        for controller, depth in sorted(QUEUES.read().items()):
            queue.add_metric([controller], sum(depth.values()))
        yield queue

        requests = CounterMetricFamily(
            "rollouts_api_requests",
            "Kubernetes API requests of the operator, by verb, API group, resource and status code.",
            labels=["verb", "group", "resource", "code"],
        )
        for key, value in sorted(self.calls.snapshot().items()):
            requests.add_metric([key.verb, key.group, key.resource, key.code], value)
        yield requests


REGISTRY.register(_StateCollector(API_CALLS))


def render() -> bytes:
    """Every family of the process in the Prometheus text format (the ``/metrics`` page)."""
    return generate_latest(REGISTRY)


@contextlib.contextmanager
def reconciling(controller: str) -> Iterator[None]:
    """Time one reconcile of ``controller`` (errors included)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        RECONCILE_SECONDS.labels(controller=controller).observe(time.perf_counter() - started)


# -- PodTransitionRules ---------------------------------------------------------------------------


def count_verdicts(rule_obj: PodTransitionRule, stages: Iterable[StageVerdicts]) -> None:
    """Count each rule's verdict on each pod it judged in this evaluation."""
    kinds = {rule.name: rule.kind() for rule in rule_obj.spec.rules}
    for verdicts in stages:
        for name, verdict in verdicts.rules.items():
            kind = kinds.get(name)
            if kind is None:
                continue
            stage = verdicts.stage.value
            if verdict.passed:
                RULE_VERDICTS.labels(kind=kind, stage=stage, outcome="passed").inc(len(verdict.passed))
            if verdict.rejected:
                RULE_VERDICTS.labels(kind=kind, stage=stage, outcome="rejected").inc(len(verdict.rejected))


def _call_of(method: str) -> str:
    return "poll" if method.upper() == "GET" else "request"


def webhook_trace_config() -> aiohttp.TraceConfig:
    """Time every rule webhook call and count the failed ones (for the PTR controller's session)."""

    async def on_start(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
        context.started = time.perf_counter()

    def elapsed(context: SimpleNamespace) -> float:
        return time.perf_counter() - float(getattr(context, "started", time.perf_counter()))

    async def on_end(_: aiohttp.ClientSession, context: SimpleNamespace, params: Any) -> None:
        call = _call_of(params.method)
        RULE_WEBHOOK_SECONDS.labels(call=call).observe(elapsed(context))
        if not 200 <= params.response.status < 300:
            RULE_WEBHOOK_ERRORS.labels(call=call, kind="status").inc()

    async def on_exception(_: aiohttp.ClientSession, context: SimpleNamespace, params: Any) -> None:
        call = _call_of(params.method)
        RULE_WEBHOOK_SECONDS.labels(call=call).observe(elapsed(context))
        RULE_WEBHOOK_ERRORS.labels(call=call, kind="transport").inc()

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_start)
    config.on_request_end.append(on_end)
    config.on_request_exception.append(on_exception)
    config.freeze()
    return config


# -- the lifecycle, from the pod watch ------------------------------------------------------------

_types_seen: set[str] = set()


def _bounded_type(op_type: str) -> str:
    """The operation type as a label value; past :data:`MAX_TYPES` distinct ones, ``other``."""
    if op_type in _types_seen:
        return op_type
    if len(_types_seen) >= MAX_TYPES or not op_type:
        return "other" if op_type else "unknown"
    _types_seen.add(op_type)
    return op_type


@dataclass
class _Run:
    """One run of one operation as last seen: phase entry times, phases already timed, how it ended."""

    type: str
    entered: dict[OperationPhase, int]
    ended: int | None = None
    outcome: str | None = None
    timed: set[OperationPhase] = field(default_factory=set)

    def timeline(self) -> list[tuple[OperationPhase | None, int]]:
        """Phase entries in order, then ``(None, end)`` once the run ended."""
        rank = {phase: i for i, phase in enumerate(PHASE_ORDER)}
        steps: list[tuple[OperationPhase | None, int]] = [
            (phase, millis)
            for phase, millis in sorted(
                self.entered.items(), key=lambda item: (item[1], rank.get(item[0], 99))
            )
        ]
        if self.ended is not None:
            steps.append((None, self.ended))
        return steps


RunKey = tuple[str, int | None]  # (operation id, Begun ms)


def _runs_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[RunKey, _Run]:
    """Every run the pod shows: live ones (labels and history) and finished ones (history)."""
    history = parse_history(annotations.get(HISTORY_ANNOTATION))
    recorded = {r.id: r for r in history.live}
    runs: dict[RunKey, _Run] = {}

    def add(
        rec: OperationRecord | None, op_id: str, op_type: str, stamps: Mapping[OperationPhase, int]
    ) -> None:
        entered = dict(rec.entered) if rec is not None else {}
        entered.update(stamps)
        run = _Run(type=op_type, entered=entered)
        if rec is not None and rec.outcome is not None:
            run.outcome, run.ended = rec.outcome.value, rec.ended_ms
        runs[(op_id, entered.get(OperationPhase.BEGUN))] = run

    for op in parse_state(labels):
        rec = recorded.get(op.id)
        stamps = phase_stamps(op)
        if rec is not None and OPERATING in op.values:
            begun = rec.entered.get(OperationPhase.BEGUN)
            if begun is not None and begun != stamps.get(OperationPhase.BEGUN):
                rec = None  # the history describes an earlier run of the id
        add(rec, op.id, str(op.type or op.undo_type or (rec.type if rec else "")), stamps)
    for rec in history.done:
        add(rec, rec.id, rec.type, {})
    return runs


class LifecycleObserver:
    """Counts transitions and times phases from successive versions of control pods.

    One per operator run. The first version of a pod seen in the initial listing is the
    baseline; after that every phase entry the pod shows for the first time is a transition,
    and a phase is timed once the entry of the next one (or the end) is known.
    """

    def __init__(self) -> None:
        self._runs: dict[str, dict[RunKey, _Run]] = {}
        self._phases: dict[str, str] = {}

    def phases(self) -> Mapping[str, float]:
        """Pods per pod phase, for ``rollouts_lifecycle_pods``."""
        return Tally(self._phases.values())

    def forget(self, uid: str) -> None:
        self._runs.pop(uid, None)
        self._phases.pop(uid, None)

    def observe(self, *, kind: str | None, pod: Mapping[str, Any]) -> None:
        """One watch event of a control pod (``kind`` None: the initial listing)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if kind == "DELETED":
            self.forget(uid)
            return
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        try:
            phase = parse_state(labels).phase.value
            runs = _runs_of(labels, annotations)
        except InvalidLifecycleLabel:
            return
        self._phases[uid] = phase
        previous = self._runs.get(uid)
        if previous is None and kind is None:
            for run in runs.values():
                # phases that ended before this run are not timed; the current one will be
                run.timed = {phase for phase, _ in run.timeline()[:-1] if phase is not None}
            self._runs[uid] = runs
            return
        previous = previous or {}
        for (op_id, begun), run in runs.items():
            before = previous.get((op_id, begun))
            if before is None and begun is None:
                # ``operating`` is gone (finished) and no history names the start: the same run
                before = next((r for (i, _), r in previous.items() if i == op_id and r.outcome is None), None)
            self._count(run, before)
        self._runs[uid] = runs

    @staticmethod
    def _count(run: _Run, before: _Run | None) -> None:
        op_type = _bounded_type(run.type)
        known = set(before.entered) if before is not None else set()
        if before is not None:
            # phases seen earlier whose labels are gone since (no history annotation to keep them)
            run.entered = {**before.entered, **run.entered}
            run.timed = set(before.timed)
        timeline = run.timeline()
        for phase, _ in timeline:
            if phase is not None and phase not in known:
                LIFECYCLE_TRANSITIONS.labels(phase=phase.value, type=op_type).inc()
        for (phase, entered), (_, left) in itertools.pairwise(timeline):
            if phase is None or phase in run.timed:
                continue
            run.timed.add(phase)
            seconds = max(0, left - entered) / 1000
            LIFECYCLE_PHASE_SECONDS.labels(phase=phase.value, type=op_type).observe(seconds)
        if run.outcome is not None and (before is None or before.outcome is None):
            LIFECYCLE_TRANSITIONS.labels(phase=run.outcome, type=op_type).inc()


# -- CollaSets: hooks and rollouts, from the CollaSet watch ---------------------------------------

_FINISHED_HOOK_PHASES: Final = frozenset({"Succeeded", "Failed", "Cancelled"})


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class _Rollout:
    revision: str
    started: float | None
    finished: bool = False


class RolloutObserver:
    """Counts finished hook runs and times rollouts from successive CollaSet statuses.

    One per operator run; the initial listing is the baseline (hooks already finished then
    are not counted; a rollout under way then is not timed, its start being unknown).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._hooks: dict[str, set[tuple[str, str]]] = {}
        self._rollouts: dict[str, _Rollout] = {}

    def forget(self, uid: str) -> None:
        self._hooks.pop(uid, None)
        self._rollouts.pop(uid, None)

    def observe(self, *, kind: str | None, collaset: Mapping[str, Any]) -> None:
        meta = collaset.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if kind == "DELETED":
            self.forget(uid)
            return
        status = collaset.get("status") or {}
        self._observe_hooks(uid, status, baseline=kind is None and uid not in self._hooks)
        self._observe_rollout(uid, status, baseline=kind is None and uid not in self._rollouts)

    def _observe_hooks(self, uid: str, status: Mapping[str, Any], *, baseline: bool) -> None:
        counted = self._hooks.setdefault(uid, set())
        present: set[tuple[str, str]] = set()
        for record in status.get("hooks") or []:
            key = (str(record.get("revision")), str(record.get("name")))
            present.add(key)
            phase = str(record.get("phase"))
            if phase not in _FINISHED_HOOK_PHASES or key in counted:
                continue
            counted.add(key)
            if baseline:
                continue
            HOOK_RUNS.labels(outcome=phase).inc()
            start, finish = _time(record.get("startTime")), _time(record.get("finishTime"))
            if start is not None and finish is not None:
                HOOK_SECONDS.labels(outcome=phase).observe(max(0.0, (finish - start).total_seconds()))
        counted &= present

    def _observe_rollout(self, uid: str, status: Mapping[str, Any], *, baseline: bool) -> None:
        current, updated = status.get("currentRevision"), status.get("updatedRevision")
        if not updated:
            return
        now = self.clock()
        tracked = self._rollouts.get(uid)
        if current != updated and (tracked is None or tracked.revision != updated):
            if tracked is not None and not tracked.finished:
                self._finish(tracked, "Superseded", now)
            self._rollouts[uid] = _Rollout(revision=str(updated), started=None if baseline else now)
            tracked = self._rollouts[uid]
        if tracked is None:
            self._rollouts[uid] = _Rollout(revision=str(updated), started=None, finished=True)
            return
        if tracked.finished or tracked.revision != updated:
            return
        failed = any(
            c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if failed:
            self._finish(tracked, "Failed", now)
        elif current == updated:
            self._finish(tracked, "Completed", now)

    @staticmethod
    def _finish(rollout: _Rollout, outcome: str, now: float) -> None:
        rollout.finished = True
        if rollout.started is not None:
            ROLLOUT_SECONDS.labels(outcome=outcome).observe(max(0.0, now - rollout.started))
