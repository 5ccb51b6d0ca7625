"""The parts are real: kwok nodes run pods, kube-controller-manager runs Jobs and garbage
collection, and the operator installs CRDs and serves admission over TLS."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION
from tests.cluster_support import Operator, eventually

pytestmark = pytest.mark.integration


def _pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
    }


def _job(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "hook", "image": "example.com/hook:1"}],
                },
            },
        },
    }


def _condition(obj: Any, kind: str) -> str | None:
    for c in (obj.status and obj.status.conditions) or []:
        if c.type == kind:
            return str(c.status)
    return None


async def test_pod_becomes_ready_on_a_kwok_node(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(namespace, _pod("web"))

    async def ready() -> Any:
        pod = await core.read_namespaced_pod("web", namespace)
        return pod if _condition(pod, "Ready") == "True" else None

    pod = await eventually(ready, what="pod web Ready")
    node = await core.read_node(pod.spec.node_name)
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    assert pod.status.pod_ip


async def test_readiness_gate_holds_ready_until_its_condition_is_true(
    api: client.ApiClient, namespace: str
) -> None:
    """Like a kubelet (and unlike kwok's default stage), Ready honours readiness gates."""
    core = client.CoreV1Api(api)
    pod = _pod("gated")
    pod["spec"]["readinessGates"] = [{"conditionType": "pod.kusionstack.io/service-ready"}]
    await core.create_namespaced_pod(namespace, pod)

    async def running() -> Any:
        p = await core.read_namespaced_pod("gated", namespace)
        return p if p.status.phase == "Running" else None

    p = await eventually(running, what="pod gated Running")
    assert _condition(p, "Ready") == "False"
    assert _condition(p, "ContainersReady") == "True"

    async def set_gate(status: str) -> None:
        cond = {"type": "pod.kusionstack.io/service-ready", "status": status, "reason": "Test"}
        await core.patch_namespaced_pod_status("gated", namespace, {"status": {"conditions": [cond]}})

    async def ready_is(status: str) -> bool:
        return _condition(await core.read_namespaced_pod("gated", namespace), "Ready") == status

    await set_gate("True")
    await eventually(lambda: ready_is("True"), what="Ready True after the gate")
    await set_gate("False")
    await eventually(lambda: ready_is("False"), what="Ready False after the gate")


async def test_job_completes_through_the_job_controller(api: client.ApiClient, namespace: str) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(namespace, _job("ok"))

    async def complete() -> bool:
        return _condition(await batch.read_namespaced_job("ok", namespace), "Complete") == "True"

    await eventually(complete, what="Job ok Complete")
    job = await batch.read_namespaced_job("ok", namespace)
    assert job.status.succeeded == 1


async def test_job_with_exit_code_annotation_fails(api: client.ApiClient, namespace: str) -> None:
    batch = client.BatchV1Api(api)
    core = client.CoreV1Api(api)
    await batch.create_namespaced_job(namespace, _job("bad", {EXIT_CODE_ANNOTATION: "3"}))

    async def failed() -> bool:
        return _condition(await batch.read_namespaced_job("bad", namespace), "Failed") == "True"

    await eventually(failed, what="Job bad Failed")
    pods = await core.list_namespaced_pod(namespace, label_selector="job-name=bad")
    terminated = pods.items[0].status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3


async def test_job_with_run_for_annotation_runs_then_completes(api: client.ApiClient, namespace: str) -> None:
    batch = client.BatchV1Api(api)
    core = client.CoreV1Api(api)
    await batch.create_namespaced_job(namespace, _job("slow", {RUN_FOR_ANNOTATION: "4s"}))

    async def running_while_job_active() -> bool:
        pods = await core.list_namespaced_pod(namespace, label_selector="job-name=slow")
        job = await batch.read_namespaced_job("slow", namespace)
        return (
            bool(pods.items)
            and pods.items[0].status.phase == "Running"
            and _condition(job, "Complete") is None
        )

    await eventually(running_while_job_active, what="hook pod Running while its Job is active")

    async def complete() -> bool:
        return _condition(await batch.read_namespaced_job("slow", namespace), "Complete") == "True"

    await eventually(complete, timeout=60, what="Job slow Complete after its run time")


async def test_deleting_an_owner_garbage_collects_children(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    child = {
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
            ],
        }
    }
    await core.create_namespaced_config_map(namespace, child)
    await core.delete_namespaced_config_map("owner", namespace)

    async def child_gone() -> bool:
        try:
            await core.read_namespaced_config_map("child", namespace)
        except ApiException as e:
            return e.status == 404
        return False

    await eventually(child_gone, timeout=60, what="child ConfigMap garbage-collected")


async def test_operator_installs_crds_and_rejects_bad_objects(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    custom = client.CustomObjectsApi(api)
    bad = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "CollaSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "other"}},
                "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
            },
        },
    }

    async def rejected_by_webhook() -> str | None:
        try:
            await custom.create_namespaced_custom_object(
                "apps.kusionstack.io", "v1alpha1", namespace, "collasets", bad
            )
        except ApiException as e:
            return str(e.body) if "admission webhook" in str(e.body) else None
        await custom.delete_namespaced_custom_object(
            "apps.kusionstack.io", "v1alpha1", namespace, "collasets", "web"
        )
        return None

    message = await eventually(
        rejected_by_webhook, what="the CollaSet webhook to reject a mismatched selector"
    )
    assert "selector" in message


async def test_api_calls_of_both_clients_are_counted(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    """kopf's watches and our controllers' writes both pass the client-layer counter."""
    from rollouts.apicalls import API_CALLS

    core = client.CoreV1Api(api)
    pod = _pod("counted", labels={"kusionstack.io/control": "true"})
    await core.create_namespaced_pod(namespace, pod)

    def seen() -> set[tuple[str, str, str]]:
        return {(k.verb, k.group, k.resource) for k in API_CALLS.snapshot()}

    async def counted() -> bool:
        calls = seen()
        return ("watch", "", "pods") in calls and ("watch", "apps.kusionstack.io", "collasets") in calls

    await eventually(counted, what="kopf's watches counted")
    # The operator's own client (memo["api"]) is instrumented too: the lifecycle controller
    # sets the pod's service-ready condition through it.
    await eventually(lambda: ("patch", "", "pods/status") in seen(), what="our client's status patch counted")
