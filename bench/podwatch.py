"""What the benchmark sees of the pods: one watch per scenario namespace, with receive times.

A :class:`PodWatch` streams the pods of a namespace (raw JSON, no client models: the
parent process must stay cheap next to the operator and the control plane on two cores)
and keeps, per pod, what the figures need:

* the latest state (labels, image, Ready, deletion) for the scenario's **goal**: a
  predicate over a pod; :meth:`PodWatch.wait_goal` returns when ``count`` live pods meet
  it and no live pod misses it. Counts are kept incrementally, so an event costs O(1);
* every **lifecycle transition**: a version whose lifecycle labels (the id-keyed and
  permission labels and ``service-available``) differ from the previous version's, with
  its receive time, the pod phase before and after, and who wrote it;
* **writes by manager**: each new resourceVersion is charged to the field manager whose
  ``managedFields`` entry changed (``bench`` for the versions our own patches returned).

A label step that the operator's mutating webhook folds into someone else's write (a
kubelet status update, our own ``begin``) is still the operator's decision; the
transition records the request's writer all the same, so callers decide what to count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from lifecycle import labels as L
from lifecycle.states import InvalidLifecycleLabel, parse_state

_LIFECYCLE_PREFIXES = tuple(f"{p}/" for p in (*L.ID_PREFIXES, L.OPERATION_PERMISSION))

#: Field managers that are not the operator (kwok plays the kubelet).
KNOWN_MANAGERS = {
    "kwok-controller": "kubelet (kwok)",
    "kwok": "kubelet (kwok)",
    "kube-scheduler": "scheduler",
    "kube-controller-manager": "kube-controller-manager",
    "kube-apiserver": "apiserver",
}
BENCH_MANAGER = "rollouts-bench"


def lifecycle_keys(labels: Mapping[str, str]) -> frozenset[str]:
    return frozenset(k for k in labels if k == L.SERVICE_AVAILABLE or k.startswith(_LIFECYCLE_PREFIXES))


def pod_phase(labels: Mapping[str, str]) -> str:
    try:
        return str(parse_state(labels).phase)
    except InvalidLifecycleLabel:
        return "Invalid"


def condition(pod: Mapping[str, Any], kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


@dataclass(frozen=True)
class Transition:
    at: float  # time.monotonic() when the event arrived
    writer: str
    before: frozenset[str]
    after: frozenset[str]
    phase_before: str
    phase_after: str
    bench: bool  # the version came from one of the benchmark's own writes


@dataclass
class PodRecord:
    name: str
    pod: dict[str, Any]
    #: (manager, operation, subresource) -> (time, fieldsV1) of the latest version.
    managers: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    goal: bool = False
    live: bool = True


def _managers(pod: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[str, str]]:
    out = {}
    for entry in (pod.get("metadata") or {}).get("managedFields") or []:
        key = (str(entry.get("manager")), str(entry.get("operation")), str(entry.get("subresource", "")))
        out[key] = (str(entry.get("time")), json.dumps(entry.get("fieldsV1"), sort_keys=True))
    return out


def writer_of(before: Mapping[tuple[str, str, str], Any], after: Mapping[tuple[str, str, str], Any]) -> str:
    """The field manager(s) whose managedFields entry is new or changed between two versions."""
    changed = sorted({key[0] for key, value in after.items() if before.get(key) != value})
    if not changed:
        return "unknown"
    names = [KNOWN_MANAGERS.get(m, BENCH_MANAGER if m == BENCH_MANAGER else "operator") for m in changed]
    return "+".join(sorted(set(names)))


class PodWatch:
    """Watch the pods of one namespace until closed; see the module docstring."""

    def __init__(self, api: client.ApiClient, namespace: str, *, label_selector: str = "") -> None:
        self.api = api
        self.namespace = namespace
        self.label_selector = label_selector
        self.pods: dict[str, PodRecord] = {}
        self.writes: dict[str, int] = {}
        self.counting_writes = False
        #: resourceVersions returned by the benchmark's own writes (their versions are ours).
        self.bench_versions: set[str] = set()
        self.goal: Callable[[Mapping[str, Any]], bool] = lambda pod: False
        self.goal_count = 0
        self.missing_count = 0  # live pods not meeting the goal
        self.listeners: list[Callable[[PodRecord], None]] = []
        self.events = 0
        self.last_event_at = 0.0
        #: The goal count :meth:`wait_goal` waits for, and when the watch first saw it met.
        self._target: int | None = None
        self.reached_at: float | None = None
        self._changed = asyncio.Event()
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PodWatch:
        self._task = asyncio.create_task(self._run(), name=f"podwatch-{self.namespace}")
        synced = asyncio.ensure_future(self._synced.wait())
        await asyncio.wait({synced, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            synced.cancel()
            self._task.result()  # raises what stopped the watch
        return self

    async def __aexit__(self, *_: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def set_goal(self, goal: Callable[[Mapping[str, Any]], bool]) -> None:
        self.goal = goal
        self.goal_count = self.missing_count = 0
        self._target, self.reached_at = None, None
        for record in self.pods.values():
            record.goal = record.live and goal(record.pod)
            self._count(record, +1)
        self._changed.set()

    def refresh(self, name: str) -> None:
        """Judge one pod against the goal again (the goal depends on more than the pod)."""
        record = self.pods.get(name)
        if record is not None:
            self._count(record, -1)
            record.goal = record.live and self.goal(record.pod)
            self._count(record, +1)
            self._check_reached(time.monotonic())
            self._changed.set()

    def _check_reached(self, now: float) -> None:
        if (
            self.reached_at is None
            and self._target is not None
            and self.goal_count == self._target
            and self.missing_count == 0
        ):
            self.reached_at = now

    def _count(self, record: PodRecord, sign: int) -> None:
        if not record.live:
            return
        if record.goal:
            self.goal_count += sign
        else:
            self.missing_count += sign

    def start_counting_writes(self) -> None:
        self.writes = {}
        self.counting_writes = True

    async def wait_goal(
        self, count: int, *, timeout: float, what: str, abort: Callable[[], str | None] = lambda: None
    ) -> float:
        """Wait until ``count`` live pods meet the goal and none misses it; returns the time it happened."""
        deadline = time.monotonic() + timeout
        self._target, self.reached_at = count, None
        self._check_reached(time.monotonic())
        while self.reached_at is None:
            problem = abort()
            if problem:
                raise RuntimeError(f"{what}: {problem}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{what}: {self.goal_count}/{count} pods after {timeout:.0f}s "
                    f"({self.missing_count} live pods not there yet)"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 5.0))
        return self.reached_at if self.reached_at is not None else time.monotonic()

    # -- the watch ------------------------------------------------------------------------

    async def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        resource_version = ""
        while True:
            if not resource_version:
                response: Any = await core.list_namespaced_pod(
                    self.namespace, label_selector=self.label_selector, _preload_content=False
                )
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"listing pods of {self.namespace}: {response.status} {body[:300]!r}")
                listed = json.loads(body)
                now = time.monotonic()
                for pod in listed.get("items") or []:
                    self._apply("ADDED", pod, now)
                resource_version = listed["metadata"]["resourceVersion"]
                self._synced.set()
            try:
                resource_version = await self._stream(core, resource_version)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)  # the watch dropped: resume from the last version seen

    async def _stream(self, core: client.CoreV1Api, resource_version: str) -> str:
        response: Any = await core.list_namespaced_pod(
            self.namespace,
            label_selector=self.label_selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=600,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        if response.status != 200:
            body = await response.read()
            if response.status == 410:
                return ""  # expired: list again
            raise aiohttp.ClientError(f"watching pods: {response.status} {body[:300]!r}")
        buffer = b""
        async with response:
            async for chunk in response.content.iter_any():
                now = time.monotonic()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            return ""  # expired: list again
                        raise aiohttp.ClientError(str(obj))
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
                    if kind != "BOOKMARK":
                        self._apply(str(kind), obj, now)
        return resource_version

    def _apply(self, kind: str, pod: dict[str, Any], now: float) -> None:
        self.events += 1
        self.last_event_at = now
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        record = self.pods.get(name)
        if record is None:
            record = PodRecord(name=name, pod=pod, managers=_managers(pod))
            record.live = kind != "DELETED" and not meta.get("deletionTimestamp")
            self.pods[name] = record
            record.goal = record.live and self.goal(pod)
            self._count(record, +1)
        else:
            self._update(kind, record, pod, now)
        for listener in self.listeners:
            listener(record)
        self._check_reached(now)
        self._changed.set()

    def _update(self, kind: str, record: PodRecord, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        previous = record.pod
        managers = _managers(pod)
        writer = writer_of(record.managers, managers)
        if writer == "unknown":
            writer = "unattributed " + _what_changed(previous, pod)
        # Our own writes: by the version a patch returned, or by our field manager when the
        # event arrives before the patch's answer.
        bench = str(meta.get("resourceVersion")) in self.bench_versions or BENCH_MANAGER in writer
        writer = BENCH_MANAGER if bench else writer
        if self.counting_writes and kind != "DELETED":
            self.writes[writer] = self.writes.get(writer, 0) + 1
        before_labels = (previous.get("metadata") or {}).get("labels") or {}
        after_labels = meta.get("labels") or {}
        before, after = lifecycle_keys(before_labels), lifecycle_keys(after_labels)
        if before != after and kind != "DELETED":
            record.transitions.append(
                Transition(
                    at=now,
                    writer=writer,
                    before=before,
                    after=after,
                    phase_before=pod_phase(before_labels),
                    phase_after=pod_phase(after_labels),
                    bench=bench,
                )
            )
        self._count(record, -1)
        record.pod, record.managers = pod, managers
        record.live = kind != "DELETED" and not meta.get("deletionTimestamp")
        record.goal = record.live and self.goal(pod)
        self._count(record, +1)


def _what_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``(labels)``, ``(status)``, ... for a version no managedFields entry explains."""
    parts = []
    old_meta, new_meta = before.get("metadata") or {}, after.get("metadata") or {}
    for key in ("labels", "annotations", "finalizers"):
        if old_meta.get(key) != new_meta.get(key):
            parts.append(key)
    for key in ("spec", "status"):
        if before.get(key) != after.get(key):
            parts.append(key)
    return f"({'+'.join(parts) or 'nothing'})"


def image_of(pod: Mapping[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(containers[0].get("image"))


def is_ready(pod: Mapping[str, Any]) -> bool:
    return condition(pod, "Ready") == "True"


def is_service_available(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return L.SERVICE_AVAILABLE in labels and is_ready(pod)
