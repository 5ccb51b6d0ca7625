"""The benchmark scenarios: each sets up N pods, changes them once, and measures that change.

Every scenario runs in a namespace of its own on the shared cluster and follows the
same shape: set up and wait until the pods are settled (not measured), wait until the
operator is quiet, reset its counters, make **the change** at ``t0``, wait from the pod
watch until every pod is updated and available (``wall_s``), wait for the owner's status
to say the rollout is complete (``complete_s``), wait until the operator is quiet again,
then read its counters. The namespace is deleted and waited for before the next one.

* ``deployment-update``: a Deployment, ``RollingUpdate`` with ``maxUnavailable`` = the
  budget and ``maxSurge`` 0 by default (a CollaSet updates in place and never surges);
  kube-controller-manager does the work. The operator still runs (cluster-wide watches,
  as in a real cluster) and its cost during this scenario is reported too.
* ``collaset-update``: a CollaSet, in-place image update, and a PodTransitionRule budget
  (``availablePolicy.maxUnavailableValue`` = the budget) over its pods.
* ``collaset-hooks``: the same with hook Jobs at 25/50/75/100% that complete at once
  (Jobs run by kube-controller-manager, their pods completed by kwok).
* ``lifecycle-only``: N bare controlled pods; a minimal operation controller here (watch
  driven, using :mod:`lifecycle.operations`) begins an operation on every pod and finishes
  each as soon as ``allow_ops`` says so; the operator does the rest.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from bench.figures import api_figures, latency_figures, writes_seen
from bench.operator_child import OperatorProcess
from bench.podwatch import PodRecord, PodWatch, image_of, is_ready, is_service_available, lifecycle_keys
from lifecycle import labels as L
from lifecycle.operations import LabelAdapter, allow_ops, begin, finish, is_during_ops

GROUP, VERSION = "apps.kusionstack.io", "v1alpha1"
OLD, NEW = "example.com/app:1", "example.com/app:2"
APP = "web"
HOOK_POINTS = ("25%", "50%", "75%", "100%")
SCENARIOS = ("deployment-update", "collaset-update", "collaset-hooks", "lifecycle-only")
BUDGETED = ("deployment-update", "collaset-update", "collaset-hooks")
LIFECYCLE_ADAPTER = LabelAdapter(id=L.OperationId("bench"), type=L.UPDATE)
CONCURRENCY = 64  # the benchmark's own writes in flight


@dataclass
class Context:
    """What every scenario needs: the API, the operator child, the cluster's process ids."""

    api: client.ApiClient
    operator: OperatorProcess
    component_pids: dict[str, int]
    timeout_per_pod: float = 1.0
    deployment_max_surge: str = "0"
    #: Progress points of the collaset-hooks scenario's hooks (one zero-duration hook each).
    hook_points: tuple[str, ...] = HOOK_POINTS
    profile_hook: Callable[[str, int, str | None], Awaitable[Any]] | None = None
    profile_stop: Callable[[], Awaitable[Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def timeout(self, pods: int) -> float:
        return max(180.0, pods * self.timeout_per_pod)


# -- the cluster's processes ---------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process from /proc (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float | None]:
    return {name: process_cpu_seconds(pid) for name, pid in pids.items()}


def cpu_delta(before: Mapping[str, float | None], after: Mapping[str, float | None]) -> dict[str, float]:
    out = {}
    for name, start in before.items():
        end = after.get(name)
        if start is not None and end is not None:
            out[name] = round(end - start, 2)
    return out


# -- helpers ------------------------------------------------------------------------------


async def new_namespace(ctx: Context, prefix: str) -> str:
    name = f"{prefix}-{int(time.time() * 1000) % 100_000_000}"
    await ctx.core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while True:  # kube-controller-manager creates the default ServiceAccount; pods wait for it
        try:
            await ctx.core.read_namespaced_service_account("default", name)
            return name
        except ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def delete_namespace(ctx: Context, name: str, *, timeout: float = 600) -> None:
    """Delete and wait until it is gone, so its pods' deletions do not load the next scenario."""
    try:
        await ctx.core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await ctx.core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        await asyncio.sleep(0.5)
    raise TimeoutError(f"namespace {name} still there after {timeout:.0f}s")


async def wait_quiet(ctx: Context, *, quiet: float = 1.5, timeout: float = 120) -> None:
    """Until the operator made no API request for ``quiet`` seconds (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    last = await asyncio.to_thread(ctx.operator.total_calls)
    since = time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now_total = await asyncio.to_thread(ctx.operator.total_calls)
        if now_total != last:
            last, since = now_total, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


async def retry_webhook(create: Callable[[], Awaitable[Any]], *, timeout: float = 60) -> Any:
    """Create, retrying while the operator's admission webhook is not reachable yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await create()
        except ApiException as e:
            if e.status != 500 or "webhook" not in str(e.body) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


async def poll(
    probe: Callable[[], Awaitable[bool]], *, timeout: float, what: str, interval: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def raw_json(call: Awaitable[Any]) -> dict[str, Any]:
    """The JSON of a ``_preload_content=False`` call, raising ``ApiException`` for a non-2xx answer
    (the client only checks the code when it parses the answer itself)."""
    response: Any = await call
    text = await response.read()
    if response.status >= 300:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = text.decode(errors="replace")
        raise error
    document: dict[str, Any] = json.loads(text)
    return document


def pod_template(image: str, *, control: bool) -> dict[str, Any]:
    labels = {"app": APP}
    if control:
        labels[L.CONTROL] = L.CONTROL_VALUE
    return {
        "metadata": {"labels": labels},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "app", "image": image}]},
    }


def budget_rule(budget: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodTransitionRule",
        "metadata": {"name": "budget"},
        "spec": {
            "selector": {"matchLabels": {"app": APP}},
            "rules": [{"name": "budget", "availablePolicy": {"maxUnavailableValue": budget}}],
        },
    }


def hook(point: str) -> dict[str, Any]:
    """A hook whose Job's pod completes at once on kwok."""
    return {
        "name": f"at-{point.rstrip('%')}",
        "trigger": {
            "type": "ProgressAvailable",
            # "50%" is a share of replicas, "3" a number of new available pods.
            "progressAvailableParams": {"progressPoint": point if point.endswith("%") else int(point)},
        },
        "failurePolicy": "Abort",
        "retainPolicy": "Always",
        "jobSpec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "hook", "image": "example.com/hook:1"}],
                }
            },
        },
    }


def collaset(replicas: int, *, hooks: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": APP}},
        "template": pod_template(OLD, control=True),
    }
    if hooks:
        spec["lifecycleHooks"] = [hook(p) for p in hooks]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CollaSet", "metadata": {"name": APP}, "spec": spec}


def deployment(replicas: int, *, budget: str, max_surge: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": budget, "maxSurge": _int_or_string(max_surge)},
            },
            "template": pod_template(OLD, control=False),
        },
    }


def _int_or_string(value: str) -> int | str:
    return int(value) if value.isdigit() else value


# -- measuring ------------------------------------------------------------------------------


@dataclass
class Measure:
    """The bookkeeping around the change: counters reset before, read after."""

    ctx: Context
    watch: PodWatch
    name: str
    pods: int
    budget: str | None
    t0: float = 0.0
    cpu_before: dict[str, float | None] = field(default_factory=dict)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)

    async def start(self) -> None:
        await wait_quiet(self.ctx)
        await asyncio.to_thread(self.ctx.operator.stats, reset=True)
        self.cpu_before = cpu_snapshot(self.ctx.component_pids)
        self.load_before = os.getloadavg()
        self.watch.start_counting_writes()
        if self.ctx.profile_hook is not None:
            await self.ctx.profile_hook(self.name, self.pods, self.budget)
        self.t0 = time.monotonic()

    async def finish(
        self, *, wall_s: float, complete_s: float | None, setup_s: float, notes: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        await wait_quiet(self.ctx)
        stats = await asyncio.to_thread(self.ctx.operator.stats, reset=True)
        if self.ctx.profile_stop is not None:
            await self.ctx.profile_stop()
        cpu = cpu_delta(self.cpu_before, cpu_snapshot(self.ctx.component_pids))
        budgeted = self.budget is not None and self.name != "deployment-update"
        return {
            "scenario": self.name,
            "pods": self.pods,
            "budget": self.budget,
            "wall_s": round(wall_s, 2),
            "complete_s": None if complete_s is None else round(complete_s, 2),
            "setup_s": round(setup_s, 2),
            "ratio_to_deployment": None,
            "api": api_figures(stats.calls, self.pods),
            "operator": {
                "cpu_s": round(stats.cpu_seconds, 2),
                "cpu_s_per_pod_ms": round(stats.cpu_seconds / self.pods * 1000, 2),
                "peak_rss_mb": round(stats.peak_rss_mb, 1),
                "rss_mb": round(stats.rss_mb, 1),
            },
            "control_plane_cpu_s": cpu,
            "latency": latency_figures(self.watch.pods.values(), since=self.t0, budgeted=budgeted),
            "pod_writes_seen_per_pod": writes_seen(self.watch.writes, self.pods),
            "watch_events": self.watch.events,
            "load_avg_before": [round(x, 2) for x in self.load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "notes": notes or {},
        }


def _updated_available(pod: Mapping[str, Any]) -> bool:
    return image_of(pod) == NEW and is_service_available(pod)


# -- the scenarios --------------------------------------------------------------------------


async def deployment_update(ctx: Context, pods: int, budget: str) -> dict[str, Any]:
    apps = client.AppsV1Api(ctx.api)
    ns = await new_namespace(ctx, f"bench-deploy-{pods}")
    try:
        async with PodWatch(ctx.api, ns, label_selector=f"app={APP}") as watch:
            started = time.monotonic()
            watch.set_goal(lambda pod: image_of(pod) == OLD and is_ready(pod))
            manifest = deployment(pods, budget=budget, max_surge=ctx.deployment_max_surge)
            await apps.create_namespaced_deployment(ns, manifest)  # type: ignore[arg-type]
            await watch.wait_goal(pods, timeout=ctx.timeout(pods), what="Deployment pods ready")
            setup = time.monotonic() - started
            measure = Measure(ctx, watch, "deployment-update", pods, budget)
            watch.set_goal(lambda pod: image_of(pod) == NEW and is_ready(pod))
            await measure.start()
            await apps.patch_namespaced_deployment(
                APP, ns, {"spec": {"template": pod_template(NEW, control=False)}}
            )
            done = await watch.wait_goal(pods, timeout=ctx.timeout(pods), what="Deployment updated")
            wall = done - measure.t0

            async def complete() -> bool:
                d = await apps.read_namespaced_deployment_status(APP, ns)
                s = d.status
                return bool(
                    (s.observed_generation or 0) >= (d.metadata.generation or 0)
                    and s.updated_replicas == pods
                    and s.available_replicas == pods
                    and (s.replicas or 0) == pods
                )

            await poll(complete, timeout=ctx.timeout(pods), what="Deployment status complete")
            complete_s = time.monotonic() - measure.t0
            return await measure.finish(
                wall_s=wall,
                complete_s=complete_s,
                setup_s=setup,
                notes={"max_surge": ctx.deployment_max_surge},
            )
    finally:
        await delete_namespace(ctx, ns)


async def collaset_update(ctx: Context, pods: int, budget: str, *, hooks: bool) -> dict[str, Any]:
    name = "collaset-hooks" if hooks else "collaset-update"
    ns = await new_namespace(ctx, f"bench-cls-{pods}")
    custom = ctx.custom
    try:
        async with PodWatch(ctx.api, ns, label_selector=f"app={APP}") as watch:
            started = time.monotonic()
            watch.set_goal(lambda pod: image_of(pod) == OLD and is_service_available(pod))
            await retry_webhook(
                lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, "podtransitionrules", budget_rule(budget)
                )
            )
            await retry_webhook(
                lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, "collasets", collaset(pods, hooks=ctx.hook_points if hooks else ())
                )
            )
            await watch.wait_goal(pods, timeout=ctx.timeout(pods), what="CollaSet pods available")

            async def settled() -> bool:
                obj = await custom.get_namespaced_custom_object(GROUP, VERSION, ns, "collasets", APP)
                status = obj.get("status") or {}
                return bool(
                    status.get("observedGeneration") == obj["metadata"]["generation"]
                    and status.get("updatedAvailableReplicas") == pods
                    and status.get("currentRevision") == status.get("updatedRevision")
                )

            await poll(settled, timeout=ctx.timeout(pods), what="CollaSet status settled")
            setup = time.monotonic() - started
            measure = Measure(ctx, watch, name, pods, budget)
            watch.set_goal(_updated_available)
            await measure.start()
            patch = {"spec": {"template": pod_template(NEW, control=True)}}
            await custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
                GROUP, VERSION, ns, "collasets", APP, patch, _content_type="application/merge-patch+json"
            )
            done = await watch.wait_goal(pods, timeout=ctx.timeout(pods), what=f"{name}: pods updated")
            wall = done - measure.t0
            hook_phases: dict[str, str] = {}

            async def complete() -> bool:
                obj = await custom.get_namespaced_custom_object(GROUP, VERSION, ns, "collasets", APP)
                status = obj.get("status") or {}
                updated = status.get("updatedRevision")
                hook_phases.clear()
                hook_phases.update(
                    {h["name"]: h["phase"] for h in status.get("hooks") or [] if h.get("revision") == updated}
                )
                hooks_done = not hooks or (
                    len(hook_phases) == len(ctx.hook_points) and set(hook_phases.values()) == {"Succeeded"}
                )
                return bool(
                    status.get("observedGeneration") == obj["metadata"]["generation"]
                    and status.get("updatedAvailableReplicas") == pods
                    and status.get("currentRevision") == updated
                    and hooks_done
                )

            await poll(complete, timeout=ctx.timeout(pods), what=f"{name}: status complete")
            complete_s = time.monotonic() - measure.t0
            notes: dict[str, Any] = {"budget_rule": "PodTransitionRule availablePolicy.maxUnavailableValue"}
            if hooks:
                notes["hooks"] = dict(hook_phases)
            return await measure.finish(wall_s=wall, complete_s=complete_s, setup_s=setup, notes=notes)
    finally:
        await delete_namespace(ctx, ns)


class MinimalOperationController:
    """An operation controller in a few lines of the library, driven by the pod watch.

    ``begin`` on every pod at once, then ``finish`` on each pod as soon as ``allow_ops``
    says so; writes are merge patches guarded by the pod's resourceVersion (a 409 waits
    for the next event). The versions its writes produce are marked as the benchmark's.
    """

    def __init__(self, ctx: Context, watch: PodWatch, namespace: str) -> None:
        self.ctx = ctx
        self.watch = watch
        self.namespace = namespace
        self.begun: set[str] = set()
        self.finished: set[str] = set()
        self.in_flight: set[str] = set()
        self.gate = asyncio.Semaphore(CONCURRENCY)
        self.tasks: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []

    def goal(self, pod: Mapping[str, Any]) -> bool:
        name = (pod.get("metadata") or {}).get("name")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return (
            name in self.finished
            and not is_during_ops(LIFECYCLE_ADAPTER, labels)
            and not any(k.endswith(f"/{LIFECYCLE_ADAPTER.id}") for k in lifecycle_keys(labels))
            and is_service_available(pod)
        )

    async def _patch(self, pod: Mapping[str, Any], body: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        async with self.gate:
            # Raw answer (no model parsing); the client does not raise for it, so check the code.
            response: Any = await self.ctx.core.patch_namespaced_pod(  # type: ignore[call-arg]
                meta["name"],
                self.namespace,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
            written = json.loads(await response.read())
        if response.status in (404, 409):
            return False
        if response.status >= 300:
            raise RuntimeError(f"patch pod {meta['name']}: {response.status} {written.get('message')}")
        self.watch.bench_versions.add(str(written["metadata"]["resourceVersion"]))
        return True

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(repr(task.exception()))

    async def begin_all(self) -> None:
        now = time.time_ns()

        async def one(record: PodRecord) -> None:
            pod = record.pod
            labels = pod["metadata"].get("labels") or {}
            change = begin(LIFECYCLE_ADAPTER, labels, now_ns=now)
            body = change.to_merge_patch(resource_version=pod["metadata"]["resourceVersion"])
            self.begun.add(record.name)
            while not await self._patch(pod, body):  # 409: the pod moved on, write on its latest version
                await asyncio.sleep(0.05)
                pod = self.watch.pods[record.name].pod
                labels = pod["metadata"].get("labels") or {}
                body = begin(LIFECYCLE_ADAPTER, labels, now_ns=now).to_merge_patch(
                    resource_version=pod["metadata"]["resourceVersion"]
                )

        await asyncio.gather(*(one(r) for r in list(self.watch.pods.values()) if r.live))

    def on_event(self, record: PodRecord) -> None:
        name = record.name
        if name not in self.begun or name in self.finished or name in self.in_flight:
            return
        labels = record.pod["metadata"].get("labels") or {}
        if not is_during_ops(LIFECYCLE_ADAPTER, labels):
            return
        if not allow_ops(LIFECYCLE_ADAPTER, labels, now_ns=time.time_ns()).allowed:
            return
        self.in_flight.add(name)

        async def write() -> None:
            try:
                pod = record.pod
                while True:
                    labels = pod["metadata"].get("labels") or {}
                    if not is_during_ops(LIFECYCLE_ADAPTER, labels):
                        return
                    body = finish(LIFECYCLE_ADAPTER, labels).to_merge_patch(
                        resource_version=pod["metadata"]["resourceVersion"]
                    )
                    if await self._patch(pod, body):
                        self.finished.add(name)
                        self.watch.refresh(name)
                        return
                    # 409: someone wrote the pod meanwhile; try again on the version the watch has
                    await asyncio.sleep(0.05)
                    pod = self.watch.pods[name].pod
            finally:
                self.in_flight.discard(name)

        self._spawn(write())


async def lifecycle_only(ctx: Context, pods: int) -> dict[str, Any]:
    ns = await new_namespace(ctx, f"bench-lc-{pods}")
    try:
        async with PodWatch(ctx.api, ns, label_selector=f"app={APP}") as watch:
            started = time.monotonic()
            watch.set_goal(is_service_available)
            gate = asyncio.Semaphore(CONCURRENCY)

            async def create(i: int) -> None:
                body = copy.deepcopy(pod_template(OLD, control=True))
                body["metadata"]["name"] = f"p{i:05d}"
                async with gate:
                    await retry_webhook(
                        lambda: raw_json(
                            ctx.core.create_namespaced_pod(ns, body, _preload_content=False)  # type: ignore[arg-type]
                        )
                    )

            await asyncio.gather(*(create(i) for i in range(pods)))
            await watch.wait_goal(pods, timeout=ctx.timeout(pods), what="bare pods available")
            setup = time.monotonic() - started
            controller = MinimalOperationController(ctx, watch, ns)
            measure = Measure(ctx, watch, "lifecycle-only", pods, None)
            watch.set_goal(controller.goal)
            watch.listeners.append(controller.on_event)
            await measure.start()
            await controller.begin_all()
            done = await watch.wait_goal(
                pods,
                timeout=ctx.timeout(pods),
                what="lifecycle-only: pods done",
                abort=lambda: "; ".join(controller.errors[:3]) or None,
            )
            wall = done - measure.t0
            return await measure.finish(
                wall_s=wall,
                complete_s=wall,
                setup_s=setup,
                notes={"operation_controller": "the benchmark (begin/finish), not counted as the operator"},
            )
    finally:
        await delete_namespace(ctx, ns)
