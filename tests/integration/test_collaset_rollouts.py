"""CollaSet rollouts among the other actors of PodOpsLifecycle, on the real control plane.

Where :mod:`tests.integration.test_collasets` checks the CollaSet alone, these tests put it
next to what it has to cooperate with: a user choosing pods by label, a traffic controller
holding pods with a protection finalizer, a PodTransitionRule budget watched event by event,
``scaleStrategy.podToDelete`` and an operator restart in the middle of an update.

The traffic controller and the availability tracker below are small list-then-watch loops
on the test's event loop, like real controllers: every pod event is seen, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle import labels as lc
from rollouts.api.collasets import REVISION_LABEL, UPDATE_INCLUDED_LABEL
from rollouts.planning.updating import UPDATE_ID
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import Cluster, rule_manifest
from tests.integration.test_collaset_support import STEP_TIMEOUT, Workload, images, manifest, uids

pytestmark = pytest.mark.integration

#: The protection finalizer of the test traffic controller.
TRAFFIC = f"{lc.PROTECTION_FINALIZER_PREFIX}/traffic"
MERGE_PATCH = "application/merge-patch+json"
#: Deadline of a whole rollout of several pods one at a time under a budget of 1.
ROLLOUT_TIMEOUT = 240.0

RawPod = dict[str, Any]


def condition(pod: Mapping[str, Any], kind: str) -> str | None:
    """The status ("True"/"False") of the pod condition ``kind`` of a raw pod, None when absent."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def lifecycle_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The PodOpsLifecycle labels of a pod (every ``*podopslifecycle.kusionstack.io*`` key)."""
    return {k: v for k, v in labels.items() if lc.DOMAIN in k.split("/")[0]}


def operation_label(prefix: str) -> str:
    """A lifecycle label of the CollaSet's update operation (``<prefix>/collaset-update``)."""
    return lc.id_key(prefix, UPDATE_ID)


# -- a pod watch: latest state per pod from every event --------------------------------------------


@dataclass
class PodWatch:
    """Lists, then watches the pods matching ``selector`` and keeps the latest state of each.

    ``on_change(event_type, pod, pods)`` runs after every event, in order, with ``pods`` the
    state of every pod after that event. A watch that expired (410) lists again.
    """

    api: client.ApiClient
    namespace: str
    selector: str
    on_change: Callable[[str, RawPod, Mapping[str, RawPod]], Coroutine[Any, Any, None]]
    pods: dict[str, RawPod] = field(default_factory=dict)
    #: Set once the first listing has been handed to ``on_change``.
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    events: int = 0

    async def run(self) -> None:
        core = client.CoreV1Api(self.api)
        while True:
            listed = await core.list_namespaced_pod(self.namespace, label_selector=self.selector)
            self.pods = {}
            for item in listed.items:
                await self._apply("ADDED", self.api.sanitize_for_serialization(item))
            self.synced.set()
            try:
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        core.list_namespaced_pod,
                        self.namespace,
                        label_selector=self.selector,
                        resource_version=listed.metadata.resource_version,
                        allow_watch_bookmarks=True,
                    ):
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            await self._apply(event["type"], event["raw_object"])
            except ApiException as error:
                if error.status != 410:
                    raise

    async def _apply(self, kind: str, pod: RawPod) -> None:
        self.events += 1
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = pod
        await self.on_change(kind, pod, self.pods)


@contextlib.asynccontextmanager
async def running(watcher: PodWatch) -> AsyncIterator[PodWatch]:
    """Run ``watcher`` in a task for the block; its own failure, if any, fails the test."""
    task = asyncio.create_task(watcher.run())
    try:
        synced = asyncio.create_task(watcher.synced.wait())
        done, _ = await asyncio.wait({task, synced}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        synced.cancel()
        if task in done:
            task.result()
        assert watcher.synced.is_set(), "the pod watch did not list the pods within 30s"
        yield watcher
    finally:
        if task.done():
            task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- what a PodTransitionRule budget counts ---------------------------------------------------------


def unavailable(pod: RawPod) -> bool:
    """Unavailable as a budget counts it, and stricter.

    The PTR controller counts a pod available iff it carries ``service-available``
    (:meth:`lifecycle.rules.subjects.PodView.from_pod`); the label is removed as the pod
    enters Preparing and added back only once the pod is Ready again (its readiness gate
    ``pod.kusionstack.io/service-ready`` back on). A pod that is not Ready or is being
    deleted counts as unavailable here too, whatever its labels say.
    """
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return True
    if lc.SERVICE_AVAILABLE not in (meta.get("labels") or {}):
        return True
    return condition(pod, "Ready") != "True"


@dataclass
class Unavailability:
    """The most pods seen unavailable at once, recomputed after every pod event."""

    most: int = 0
    #: The pods unavailable at the moment ``most`` was first reached.
    worst: tuple[str, ...] = ()
    #: Every pod seen unavailable at least once.
    ever: set[str] = field(default_factory=set)

    async def observe(self, kind: str, pod: RawPod, pods: Mapping[str, RawPod]) -> None:
        down = tuple(sorted(name for name, p in pods.items() if unavailable(p)))
        self.ever.update(down)
        if len(down) > self.most:
            self.most, self.worst = len(down), down


# -- a cooperation controller -----------------------------------------------------------------------


@dataclass
class TrafficController:
    """A cooperation controller in the PodOpsLifecycle guide's shape, with traffic as a finalizer.

    Traffic goes on (finalizer added) when the pod is Ready with its ``service-ready`` gate
    on; it goes off (finalizer removed) when the gate is turned off, which the lifecycle does
    when the pod enters Preparing, or when the pod is being deleted. While ``hold`` is set it
    keeps traffic on a preparing pod, like a load balancer that does not answer.
    """

    api: client.ApiClient
    namespace: str
    hold: bool = False
    #: Pods whose traffic it turned off.
    released: list[str] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def wants(self, pod: RawPod) -> bool:
        on = TRAFFIC in (pod["metadata"].get("finalizers") or [])
        if pod["metadata"].get("deletionTimestamp"):
            return False
        gate = condition(pod, lc.SERVICE_READY)
        if gate == "False":
            return on and self.hold
        if gate == "True" and condition(pod, "Ready") == "True":
            return True
        return on

    async def observe(self, kind: str, pod: RawPod, pods: Mapping[str, RawPod]) -> None:
        if kind != "DELETED":
            await self.reconcile(pod)

    async def reconcile(self, pod: RawPod) -> None:
        """Add or remove the finalizer, guarded by resourceVersion; on a conflict read again."""
        name = pod["metadata"]["name"]
        for _ in range(20):
            finalizers = list(pod["metadata"].get("finalizers") or [])
            want = self.wants(pod)
            if want == (TRAFFIC in finalizers):
                return
            new = [f for f in finalizers if f != TRAFFIC] + ([TRAFFIC] if want else [])
            body = {"metadata": {"finalizers": new, "resourceVersion": pod["metadata"]["resourceVersion"]}}
            try:
                await self.core.patch_namespaced_pod(  # type: ignore[call-arg]
                    name, self.namespace, body, _content_type=MERGE_PATCH
                )
            except ApiException as error:
                if error.status == 404:
                    return
                if error.status != 409:
                    raise
                pod = self.api.sanitize_for_serialization(
                    await self.core.read_namespaced_pod(name, self.namespace)
                )
                continue
            if not want:
                self.released.append(name)
            return
        raise AssertionError(f"traffic controller: too many conflicts on pod {name}")

    async def release(self) -> None:
        """Stop holding: turn traffic off on every preparing pod now (no event would say so)."""
        self.hold = False
        for pod in (await self.core.list_namespaced_pod(self.namespace)).items:
            await self.reconcile(self.api.sanitize_for_serialization(pod))

    async def let_go(self) -> None:
        """Test teardown: drop the finalizer everywhere so the namespace can go."""
        for pod in (await self.core.list_namespaced_pod(self.namespace)).items:
            if TRAFFIC in (pod.metadata.finalizers or []):
                with contextlib.suppress(ApiException):
                    await self.core.patch_namespaced_pod(  # type: ignore[call-arg]
                        pod.metadata.name,
                        self.namespace,
                        {"metadata": {"finalizers": [f for f in pod.metadata.finalizers if f != TRAFFIC]}},
                        _content_type=MERGE_PATCH,
                    )


# -- helpers ----------------------------------------------------------------------------------------


async def label_pod(web: Workload, pod: str, labels: Mapping[str, str | None]) -> None:
    await web.core.patch_namespaced_pod(pod, web.namespace, {"metadata": {"labels": dict(labels)}})


async def create_budget(api: client.ApiClient, namespace: str, *, app: str, max_unavailable: int) -> None:
    rule = {"name": "budget", "availablePolicy": {"maxUnavailableValue": max_unavailable}}
    await Cluster(api=api, namespace=namespace).create_rule(rule_manifest("budget", [rule], app=app))


def by_name(pods: list[Any]) -> dict[str, Any]:
    return {p.metadata.name: p for p in pods}


async def pods_named(web: Workload, expected: set[str]) -> bool:
    """Exactly ``expected`` pods exist (none terminating) and the status counted them."""
    pods = await web.pods(live=False)
    if {p.metadata.name for p in pods} != expected or any(p.metadata.deletion_timestamp for p in pods):
        return False
    obj = await web.get()
    status = obj.get("status") or {}
    return bool(
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and status.get("replicas") == len(expected)
    )


async def scaled_in_pods(web: Workload) -> set[str]:
    """Pods named by the CollaSet's ScaledIn Events ("pod a: ..." or "pods a, b: ...")."""
    named: set[str] = set()
    for event in await web.events("ScaledIn"):
        head = (event.message or "").split(": ")[0]
        named.update(head.split(" ", 1)[1].split(", "))
    return named


# -- byLabel ----------------------------------------------------------------------------------------


async def test_by_label_updates_only_the_labelled_pods(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3, updateStrategy={"rollingUpdate": {"byLabel": {}}}))
    before = await web.settled(replicas=3)
    old_revision = (await web.status())["updatedRevision"]
    first, second, third = sorted(p.metadata.name for p in before)

    await label_pod(web, first, {UPDATE_INCLUDED_LABEL: "true"})
    await web.set_image("example.com/app:2")

    def updated_exactly(names: set[str]) -> Callable[[], Coroutine[Any, Any, bool]]:
        async def probe() -> bool:
            obj = await web.get()
            status = obj.get("status") or {}
            conditions: list[dict[str, Any]] = status.get("conditions") or []
            update = next((c for c in conditions if c.get("type") == "Update"), {})
            pods = by_name(await web.pods())
            new = {n for n, p in pods.items() if p.spec.containers[0].image == "example.com/app:2"}
            return (
                status.get("observedGeneration") == obj["metadata"]["generation"]
                and update.get("reason") == "Partitioned"
                and status.get("updatedAvailableReplicas") == len(names)
                and new == names
                and all(lc.SERVICE_AVAILABLE in (p.metadata.labels or {}) for p in pods.values())
            )

        return probe

    await eventually(updated_exactly({first}), timeout=STEP_TIMEOUT, what=f"only {first} updated")
    pods = by_name(await web.pods())
    assert uids(pods.values()) == uids(before), "InPlaceIfPossible keeps the pods"
    new_revision = (await web.status())["updatedRevision"]
    assert new_revision != old_revision
    assert pods[first].metadata.labels[REVISION_LABEL] == new_revision
    assert UPDATE_INCLUDED_LABEL not in pods[first].metadata.labels, "the opt-in is dropped on finish"
    assert {pods[n].metadata.labels[REVISION_LABEL] for n in (second, third)} == {old_revision}

    await label_pod(web, second, {UPDATE_INCLUDED_LABEL: "true"})
    await eventually(
        updated_exactly({first, second}), timeout=STEP_TIMEOUT, what=f"{first} and {second} updated"
    )
    pods = by_name(await web.pods())
    assert images(pods.values()) == ["example.com/app:1", "example.com/app:2", "example.com/app:2"]
    assert pods[third].spec.containers[0].image == "example.com/app:1"
    assert pods[third].metadata.labels[REVISION_LABEL] == old_revision
    assert not lifecycle_labels(pods[third].metadata.labels).keys() - {lc.SERVICE_AVAILABLE}
    status = await web.status()
    assert status["currentRevision"] == old_revision, "the rollout is not complete while a pod is left"
    assert status["updatedReplicas"] == 2


# -- a protection finalizer -------------------------------------------------------------------------


async def test_a_held_protection_finalizer_makes_the_update_wait_and_resume(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    traffic = TrafficController(api, namespace)
    body = manifest("web", replicas=2)
    expected = json.dumps({"expectedFinalizers": {"traffic": TRAFFIC}})
    body["spec"]["template"]["metadata"]["annotations"] = {lc.AVAILABLE_CONDITIONS: expected}
    web = Workload(api, namespace, "web")
    try:
        async with running(PodWatch(api, namespace, "app=web", traffic.observe)):
            await web.create(body)
            before = await web.settled(replicas=2)  # service-available needs the traffic finalizer
            assert all(TRAFFIC in (p.metadata.finalizers or []) for p in before)

            traffic.hold = True
            template = dict(body["spec"]["template"])
            template["spec"] = {"containers": [{"name": "app", "image": "example.com/app:2"}]}
            await web.patch_spec({"template": template})

            async def held() -> str | None:
                update = await web.condition("Update") or {}
                message = str(update.get("message") or "")
                pods = await web.pods()
                preparing = [
                    p
                    for p in pods
                    if operation_label(lc.PREPARING) in (p.metadata.labels or {})
                    and condition(api.sanitize_for_serialization(p), lc.SERVICE_READY) == "False"
                ]
                if update.get("reason") != "Updating" or "to finish Preparing" not in message:
                    return None
                return message if len(preparing) == 2 else None

            message = await eventually(held, timeout=STEP_TIMEOUT, what="the update to wait in Preparing")
            assert "protection finalizers gone" in message
            pods = await web.pods()
            assert images(pods) == ["example.com/app:1"] * 2, "nothing is updated while traffic is on"
            assert uids(pods) == uids(before)
            for pod in pods:
                labels = pod.metadata.labels or {}
                assert TRAFFIC in (pod.metadata.finalizers or [])
                assert operation_label(lc.OPERATE) not in labels, f"{pod.metadata.name} may not operate"
                assert lc.SERVICE_AVAILABLE not in labels
            assert not traffic.released

            await traffic.release()
            after = await web.settled(replicas=2, image="example.com/app:2")
            assert uids(after) == uids(before)
            assert sorted(traffic.released) == sorted(p.metadata.name for p in before)
            assert all(TRAFFIC in (p.metadata.finalizers or []) for p in after), "traffic is back on"
            assert (await web.condition("Update") or {}).get("reason") == "Updated"
    finally:
        await traffic.let_go()


# -- a PodTransitionRule budget, from a watch -------------------------------------------------------


async def test_a_budget_of_one_keeps_at_most_one_pod_unavailable_during_the_update(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    await create_budget(api, namespace, app="web", max_unavailable=1)
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=6))
    before = await web.settled(replicas=6)

    seen = Unavailability()
    async with running(PodWatch(api, namespace, "app=web", seen.observe)) as watcher:
        assert seen.most == 0, f"pods unavailable before the update: {seen.worst}"
        await web.set_image("example.com/app:2")
        after = await web.settled(replicas=6, image="example.com/app:2", timeout=ROLLOUT_TIMEOUT)
    assert uids(after) == uids(before)
    assert seen.most <= 1, f"{seen.most} pods unavailable at once: {seen.worst}"
    # Not vacuous: the watch saw every pod go through the update, one at a time.
    assert seen.ever == {p.metadata.name for p in before}, seen.ever
    assert seen.most == 1
    assert watcher.events > 6 * 3


# -- scaleStrategy.podToDelete ----------------------------------------------------------------------


async def test_pod_to_delete_goes_first_then_not_ready_pods_then_the_newest(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    """The documented victim order (``rollouts.planning.updating._victim_order``)."""
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=1))
    pods = await web.settled(replicas=1)
    # Pods one second apart: creationTimestamp has a resolution of one second.
    for replicas in (2, 3, 4):
        newest: datetime = max(p.metadata.creation_timestamp for p in pods)

        def next_second(newest: datetime = newest) -> bool:
            return datetime.now(UTC).replace(microsecond=0) > newest

        await eventually(next_second, what="the next second")
        await web.scale(replicas)
        pods = await web.settled(replicas=replicas)
    oldest, not_ready, kept, newest_pod = (
        p.metadata.name for p in sorted(pods, key=lambda p: p.metadata.creation_timestamp)
    )

    # Take the second oldest out of service: stay-offline keeps the lifecycle from turning its
    # readiness gate back on, so the pod stays not Ready.
    await label_pod(web, not_ready, {lc.STAY_OFFLINE: "true"})
    await web.core.patch_namespaced_pod_status(
        not_ready, namespace, {"status": {"conditions": [{"type": lc.SERVICE_READY, "status": "False"}]}}
    )

    async def out_of_service() -> bool:
        pod = api.sanitize_for_serialization(await web.core.read_namespaced_pod(not_ready, namespace))
        return condition(pod, "Ready") == "False" and (await web.status()).get("readyReplicas") == 3

    await eventually(out_of_service, what=f"{not_ready} not Ready")

    # podToDelete beats both the not-ready pod and the newest one.
    await web.patch_spec({"replicas": 3, "scaleStrategy": {"podToDelete": [oldest]}})
    await eventually(
        lambda: pods_named(web, {not_ready, kept, newest_pod}),
        timeout=STEP_TIMEOUT,
        what=f"{oldest} (podToDelete) scaled in",
    )
    # A not-ready pod goes before the newest one.
    await web.scale(2)
    await eventually(
        lambda: pods_named(web, {kept, newest_pod}), timeout=STEP_TIMEOUT, what=f"{not_ready} scaled in"
    )
    # Then the newest.
    await web.scale(1)
    await eventually(lambda: pods_named(web, {kept}), timeout=STEP_TIMEOUT, what=f"{newest_pod} scaled in")
    assert await scaled_in_pods(web) == {oldest, not_ready, newest_pod}

    async def forgotten() -> bool:
        spec = (await web.get())["spec"]
        return not (spec.get("scaleStrategy") or {}).get("podToDelete")

    await eventually(forgotten, what=f"{oldest} removed from spec.scaleStrategy.podToDelete once gone")


async def test_pod_to_delete_replaces_the_pod_when_replicas_stay(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3))
    before = await web.settled(replicas=3)
    victim = sorted(p.metadata.name for p in before)[1]

    await web.patch_spec({"scaleStrategy": {"podToDelete": [victim]}})

    async def replaced() -> list[Any] | None:
        pods = await web.pods(live=False)
        status = await web.status()
        done = (
            len(pods) == 3
            and victim not in {p.metadata.name for p in pods}
            and not any(p.metadata.deletion_timestamp for p in pods)
            and all(lc.SERVICE_AVAILABLE in (p.metadata.labels or {}) for p in pods)
            and (status.get("replicas"), status.get("availableReplicas")) == (3, 3)
        )
        return pods if done else None

    after = await eventually(replaced, timeout=STEP_TIMEOUT, what=f"{victim} replaced")
    kept = {p.metadata.uid for p in before if p.metadata.name != victim}
    assert kept < uids(after) and len(uids(after) - kept) == 1, "the others stay; one new pod"
    assert any(victim in (e.message or "") for e in await web.events("PodToDelete"))

    async def forgotten() -> bool:
        spec = (await web.get())["spec"]
        return not (spec.get("scaleStrategy") or {}).get("podToDelete")

    await eventually(forgotten, what=f"{victim} removed from spec.scaleStrategy.podToDelete once gone")


# -- an operator restart mid-update -----------------------------------------------------------------


async def test_operator_restart_with_pods_in_precheck_under_a_budget_finishes_the_update(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    await create_budget(api, namespace, app="web", max_unavailable=1)
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=4))
    before = await web.settled(replicas=4)

    seen = Unavailability()
    async with running(PodWatch(api, namespace, "app=web", seen.observe)):
        await web.set_image("example.com/app:2")

        async def held_in_precheck() -> list[str] | None:
            held = [
                p.metadata.name
                for p in await web.pods()
                if operation_label(lc.PRE_CHECK) in (p.metadata.labels or {})
                and operation_label(lc.PRE_CHECKED) not in (p.metadata.labels or {})
            ]
            return held if len(held) >= 2 else None

        held = await eventually(held_in_precheck, timeout=STEP_TIMEOUT, what="pods held in PreCheck")
        operator.restart()
        after = await web.settled(replicas=4, image="example.com/app:2", timeout=ROLLOUT_TIMEOUT)

    assert uids(after) == uids(before)
    stuck = {
        p.metadata.name: lifecycle_labels(p.metadata.labels or {})
        for p in after
        if lifecycle_labels(p.metadata.labels or {}).keys() != {lc.SERVICE_AVAILABLE}
    }
    assert not stuck, f"pods left with lifecycle labels: {stuck}"
    assert (await web.condition("Update") or {}).get("reason") == "Updated"
    assert seen.most <= 1, f"{seen.most} pods unavailable at once across the restart: {seen.worst} ({held})"
