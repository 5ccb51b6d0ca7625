"""CollaSet status against a real control plane: blocked-update messages, the progress deadline and
the default PodTransitionRule of ``rollingUpdate.maxUnavailable``.

Pods are held in Preparing by a protection finalizer the test puts on them (as a traffic
controller would) and never lets go of until the test says so; the PodTransitionRule and
lifecycle controllers of the same operator do the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle.labels import PROTECTION_FINALIZER_PREFIX, SERVICE_AVAILABLE
from rollouts.api.collasets import GROUP, VERSION
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import kubectl_binary
from tests.integration.test_collaset_support import Workload, manifest

pytestmark = pytest.mark.integration

RULES = "podtransitionrules"
TRAFFIC = f"{PROTECTION_FINALIZER_PREFIX}/test-traffic"
#: progressDeadlineSeconds of the deadline test: longer than an operator restart takes.
DEADLINE = 20


async def hold(web: Workload, names: Iterable[str]) -> None:
    """Put the test's protection finalizer on the pods: they cannot finish Preparing."""
    await _edit_finalizers(web, names, add=True)


async def release(web: Workload, names: Iterable[str]) -> None:
    await _edit_finalizers(web, names, add=False)


async def _edit_finalizers(web: Workload, names: Iterable[str], *, add: bool) -> None:
    for name in names:

        async def attempt(name: str = name) -> bool:
            try:
                pod = await web.core.read_namespaced_pod(name, web.namespace)
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            finalizers = [f for f in pod.metadata.finalizers or [] if f != TRAFFIC]
            if add:
                finalizers.append(TRAFFIC)
            body = {"metadata": {"finalizers": finalizers, "resourceVersion": pod.metadata.resource_version}}
            try:
                await web.core.patch_namespaced_pod(  # type: ignore[call-arg]
                    name, web.namespace, body, _content_type="application/merge-patch+json"
                )
            except ApiException as e:
                if e.status == 409:
                    return False
                raise
            return True

        await eventually(attempt, what=f"finalizer {'added to' if add else 'removed from'} {name}")


async def create_rule(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api)

    async def attempt() -> bool:
        try:
            await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, RULES, body)
        except ApiException as e:
            if e.status == 500 and "webhook" in str(e.body):
                return False  # the operator's webhook is not reachable yet
            raise
        return True

    await eventually(attempt, what=f"PodTransitionRule {body['metadata']['name']} created")


async def read_rule(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, RULES, name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return found


async def kubectl(kubeconfig: Path, namespace: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        kubectl_binary(), "--kubeconfig", str(kubeconfig), "-n", namespace, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()


BLOCKED = re.compile(
    r"^0/3 updated, waiting for pod (web-\w+) to pass PreCheck: \[ptr web-budget\] \[budget\] blocked by max "
    r"unavailable policy: \[max unavailable\]=1/3, \[current unavailable\]=1/3 \(and 2 more\)$"
)


async def test_a_blocked_update_names_the_rule_and_the_pod(
    api: client.ApiClient, namespace: str, operator: Operator, kubeconfig: Path
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3))
    pods = await web.settled(replicas=3)
    names = [p.metadata.name for p in pods]
    budget = {"name": "budget", "availablePolicy": {"maxUnavailableValue": 1}}
    rule = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodTransitionRule",
        "metadata": {"name": "web-budget"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "rules": [budget]},
    }
    await create_rule(api, namespace, rule)
    # Whichever pod the budget lets through first stays in Preparing: the other two stay held.
    await hold(web, names)
    await web.set_image("example.com/app:2")

    async def blocked() -> re.Match[str] | None:
        status = await web.status()
        # The pod let through has left service and is no longer Ready: nothing moves from now on.
        if (status.get("availableReplicas"), status.get("readyReplicas")) != (2, 2):
            return None
        update = next((c for c in status.get("conditions") or [] if c["type"] == "Update"), {})
        return BLOCKED.match(str(update.get("message", "")))

    match = await eventually(blocked, timeout=60, what="the Update condition to name the budget and a pod")
    held_pod = match.group(1)
    assert held_pod in names
    before = (await web.get())["metadata"]["resourceVersion"]

    described = await kubectl(kubeconfig, namespace, "describe", "cls", "web")
    assert "[ptr web-budget] [budget] blocked by max unavailable policy" in described
    assert f"waiting for pod {held_pod} to pass PreCheck" in described
    # Nothing moves while the pods are held, so the status is not rewritten (the message does not flap).
    rule_now = await read_rule(api, namespace, "web-budget")
    assert rule_now is not None and (rule_now.get("status") or {}).get("details")
    assert (await web.get())["metadata"]["resourceVersion"] == before

    await release(web, names)
    await web.settled(replicas=3, image="example.com/app:2")
    assert (await web.condition("Update") or {}).get("reason") == "Updated"


async def test_progress_deadline_survives_a_restart_is_exceeded_and_clears(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2, progressDeadlineSeconds=DEADLINE))
    pods = await web.settled(replicas=2)
    progressing = await web.condition("Progressing") or {}
    assert (progressing.get("status"), progressing.get("reason")) == ("True", "Complete")
    names = [p.metadata.name for p in pods]
    await hold(web, names)
    await web.set_image("example.com/app:2")

    async def stuck() -> str | None:
        status = await web.status()
        update = next((c for c in status.get("conditions") or [] if c["type"] == "Update"), {})
        if status.get("availableReplicas") != 0 or "to finish Preparing" not in update.get("message", ""):
            return None
        return str(status["lastProgressTime"])

    last = await eventually(stuck, timeout=60, what="both pods held in Preparing")
    # A restart within the deadline keeps the clock: the new operator reads it from the status.
    operator.restart()
    progressing = await web.condition("Progressing") or {}
    assert (progressing.get("status"), progressing.get("reason")) == ("True", "Progressing")

    async def exceeded() -> dict[str, Any] | None:
        condition = await web.condition("Progressing") or {}
        return condition if condition.get("reason") == "ProgressDeadlineExceeded" else None

    # Nothing happens to the CollaSet or its pods while they are held: only the requeue notices.
    condition = await eventually(exceeded, timeout=60, what="Progressing False, ProgressDeadlineExceeded")
    assert condition["status"] == "False"
    assert (
        f"no progress for more than {DEADLINE}s (progressDeadlineSeconds) since {last}"
        in condition["message"]
    )
    assert "to finish Preparing" in condition["message"]
    assert (await web.status())["lastProgressTime"] == last
    (event,) = await web.events("ProgressDeadlineExceeded")
    assert event.type == "Warning"

    await release(web, names)
    await web.settled(replicas=2, image="example.com/app:2")

    async def cleared() -> bool:
        condition = await web.condition("Progressing") or {}
        return (condition.get("status"), condition.get("reason")) == ("True", "Complete")

    await eventually(cleared, what="Progressing True once the rollout completes")
    assert await web.events("ProgressResumed")
    assert (await web.status())["lastProgressTime"] > last
    assert len(await web.events("ProgressDeadlineExceeded")) == 1


class Availability:
    """Unavailable pods of a CollaSet at every pod event (a watch, not samples)."""

    def __init__(self, web: Workload, replicas: int) -> None:
        self.web = web
        self.replicas = replicas
        self.available: dict[str, bool] = {}
        self.worst = 0
        self.events = 0

    def see(self, pod: Any, kind: str) -> None:
        name = pod.metadata.name
        if kind == "DELETED" or pod.metadata.deletion_timestamp:
            self.available.pop(name, None)
        else:
            self.available[name] = SERVICE_AVAILABLE in (pod.metadata.labels or {})
        self.events += 1
        self.worst = max(self.worst, self.replicas - sum(self.available.values()))

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[Availability]:
        listed = await self.web.core.list_namespaced_pod(
            self.web.namespace, label_selector=f"app={self.web.name}"
        )
        for pod in listed.items:
            self.see(pod, "ADDED")
        self.worst = 0
        stream = watch.Watch()

        async def follow() -> None:
            async for event in stream.stream(
                self.web.core.list_namespaced_pod,
                self.web.namespace,
                label_selector=f"app={self.web.name}",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=600,
            ):
                self.see(event["object"], event["type"])

        task = asyncio.ensure_future(follow())
        try:
            yield self
        finally:
            stream.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_max_unavailable_owns_a_budget_that_holds_and_goes_when_unset(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    created = await web.create(
        manifest("web", replicas=4, updateStrategy={"rollingUpdate": {"maxUnavailable": 1}})
    )
    await web.settled(replicas=4)

    rule = await eventually(
        lambda: read_rule(api, namespace, "web-max-unavailable"), what="the default PodTransitionRule"
    )
    (owner,) = rule["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "CollaSet",
        "web",
        created["metadata"]["uid"],
        True,
    )
    assert rule["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert [r["availablePolicy"] for r in rule["spec"]["rules"]] == [{"maxUnavailableValue": 1}]

    async with Availability(web, replicas=4).watching() as seen:
        await web.set_image("example.com/app:2")
        await web.settled(replicas=4, image="example.com/app:2")
    assert seen.worst == 1, (
        f"at most one pod unavailable at any time (worst {seen.worst}, {seen.events} events)"
    )

    await web.patch_spec({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "50%"}}})

    async def raised() -> bool:
        found = await read_rule(api, namespace, "web-max-unavailable") or {}
        return [r.get("availablePolicy") for r in (found.get("spec") or {}).get("rules") or []] == [
            {"maxUnavailableValue": "50%"}
        ]

    await eventually(raised, what="the default rule to follow maxUnavailable")
    assert await web.events("RuleUpdated")

    await web.patch_spec({"updateStrategy": {"rollingUpdate": {"maxUnavailable": None}}})

    async def removed() -> bool:
        return await read_rule(api, namespace, "web-max-unavailable") is None

    await eventually(removed, what="the default rule deleted once maxUnavailable is unset")
    assert await web.events("RuleDeleted")
