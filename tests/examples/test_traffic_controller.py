"""examples/traffic-controller/: the ConfigMap load balancer follows the pods through a CollaSet update.

The safety property is checked without timing: the controller takes a pod out of the
ConfigMap *before* it drops the protection finalizer, and the lifecycle moves a pod to
Operating only once that finalizer is gone. So a GET of the ConfigMap issued after we
see a pod in Operating must not list it; a pod listed there while it is being operated
would have taken traffic during its update.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import AVAILABLE_CONDITIONS
from lifecycle.states import PodPhase, parse_state
from tests.cluster_support import Operator, eventually
from tests.examples.traffic_support import EXAMPLES, backends, following, running_traffic_controller
from tests.integration.test_collaset_support import Workload, manifest

pytestmark = [pytest.mark.integration, pytest.mark.examples]
TRAFFIC_CONTROLLER = EXAMPLES / "traffic-controller" / "traffic.py"

NEW = "example.com/app:2"


async def test_configmap_and_finalizer_follow_service_ready_pods(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    core = client.CoreV1Api(api)
    async with running_traffic_controller(api, namespace, path=TRAFFIC_CONTROLLER) as traffic:
        finalizer = traffic.FINALIZER
        body = manifest("web", replicas=4)
        expected = json.dumps({"expectedFinalizers": {"traffic": finalizer}})
        body["spec"]["template"]["metadata"]["annotations"] = {AVAILABLE_CONDITIONS: expected}
        await web.create(body)
        # Service-available needs the expected finalizer: only the controller puts it there.
        pods = await web.settled(replicas=4)
        assert all(finalizer in (p.metadata.finalizers or []) for p in pods)
        assert await backends(api, namespace) == {p.metadata.name: p.status.pod_ip for p in pods}

        operated: set[str] = set()
        listed_while_operated: list[str] = []
        removed: set[str] = set()

        async def on_pod(kind: str, pod: dict[str, Any]) -> None:
            name = pod["metadata"]["name"]
            if kind != "DELETED" and parse_state(pod["metadata"].get("labels")).phase == PodPhase.OPERATING:
                operated.add(name)
                if name in await backends(api, namespace):
                    listed_while_operated.append(name)

        async def on_configmap(kind: str, configmap: dict[str, Any]) -> None:
            removed.update(
                p.metadata.name for p in pods if p.metadata.name not in (configmap.get("data") or {})
            )

        async with (
            following(core.list_namespaced_pod, namespace, label_selector="app=web", on_event=on_pod),
            following(
                core.list_namespaced_config_map,
                namespace,
                field_selector="metadata.name=traffic-lb",
                on_event=on_configmap,
            ),
        ):
            await web.set_image(NEW)
            updated = await web.settled(replicas=4, image=NEW)

        assert listed_while_operated == []
        assert operated == {p.metadata.name for p in pods}  # in place: same pods, each one operated
        assert removed == operated  # each left the load balancer during its update
        assert all(finalizer in (p.metadata.finalizers or []) for p in updated)
        assert await backends(api, namespace) == {p.metadata.name: p.status.pod_ip for p in updated}

        # Scale in: the pod leaves the load balancer, releases the finalizer and is deleted.
        await web.scale(3)
        kept = await web.settled(replicas=3, image=NEW)
        want = {p.metadata.name: p.status.pod_ip for p in kept}

        async def in_sync() -> bool:
            return await backends(api, namespace) == want

        await eventually(in_sync, what="the ConfigMap lists exactly the 3 remaining pods")
