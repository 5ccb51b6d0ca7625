"""PodOpsLifecycle end to end on the real control plane: webhooks, controller, library."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle import labels as L
from lifecycle.changes import LabelChange
from lifecycle.operations import LabelAdapter, allow_ops, begin, finish, is_during_ops, undo
from tests.cluster_support import Operator, eventually

pytestmark = pytest.mark.integration

UPDATE = LabelAdapter(id="test-update", type="update")
RESTART = LabelAdapter(id="test-restart", type="restart")
TRAFFIC = f"{L.PROTECTION_FINALIZER_PREFIX}/traffic"


def _pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {L.CONTROL: "true", "app": "web"}, **meta},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
    }


class Pods:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.ns = namespace

    async def create(self, name: str, **meta: Any) -> None:
        await self.core.create_namespaced_pod(self.ns, _pod(name, **meta))

    async def get(self, name: str) -> Any:
        return await self.core.read_namespaced_pod(name, self.ns)

    async def labels(self, name: str) -> dict[str, str]:
        return dict((await self.get(name)).metadata.labels or {})

    async def change(self, name: str, change: LabelChange) -> None:
        """Apply a library change the way an operation controller would: guarded, retried on conflict."""
        for _ in range(20):
            pod = await self.get(name)
            body = change.to_merge_patch(resource_version=pod.metadata.resource_version)
            try:
                await self.core.patch_namespaced_pod(
                    name, self.ns, body, _content_type="application/merge-patch+json"
                )
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise AssertionError("too many conflicts")

    async def set_finalizers(self, name: str, finalizers: list[str]) -> None:
        await self.core.patch_namespaced_pod(
            name,
            self.ns,
            {"metadata": {"finalizers": finalizers}},
            _content_type="application/merge-patch+json",
        )

    async def available(self, name: str) -> bool:
        labels = await self.labels(name)
        lifecycle = [k for k in labels if k.split("/")[0].endswith(L.DOMAIN) and "/" in k]
        return L.SERVICE_AVAILABLE in labels and all(k == L.SERVICE_AVAILABLE for k in lifecycle)

    async def has(self, name: str, key: str) -> bool:
        return key in await self.labels(name)

    async def service_ready(self, name: str) -> str | None:
        pod = await self.get(name)
        for c in pod.status.conditions or []:
            if c.type == L.SERVICE_READY:
                return str(c.status)
        return None


@pytest.fixture
async def pods(api: client.ApiClient, namespace: str, operator: Operator) -> Pods:
    return Pods(api, namespace)


async def _operate(pods: Pods, name: str, adapter: LabelAdapter) -> None:
    """What an operation controller does: begin, wait for permission, (work), finish."""
    await pods.change(name, begin(adapter, await pods.labels(name), now_ns=time.time_ns()))

    async def allowed() -> bool:
        return allow_ops(adapter, await pods.labels(name), now_ns=time.time_ns()).allowed

    await eventually(allowed, what=f"{adapter.id} allowed to operate")
    await pods.change(name, finish(adapter, await pods.labels(name)))


async def test_new_pod_gets_gate_and_becomes_service_available(pods: Pods) -> None:
    await pods.create("web")
    pod = await pods.get("web")
    assert [g.condition_type for g in pod.spec.readiness_gates] == [L.SERVICE_READY]
    await eventually(lambda: pods.available("web"), what="service-available")
    assert await pods.service_ready("web") == "True"


async def test_one_operation_end_to_end(pods: Pods) -> None:
    await pods.create("web")
    await eventually(lambda: pods.available("web"), what="service-available")
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=time.time_ns()))

    async def operating() -> bool:
        return await pods.has("web", L.id_key(L.OPERATE, UPDATE.id))

    await eventually(operating, what="operate label")
    labels = await pods.labels("web")
    assert L.SERVICE_AVAILABLE not in labels
    assert labels[L.permission_key("update")]
    assert await pods.service_ready("web") == "False"  # traffic is off while operated
    assert is_during_ops(UPDATE, labels)
    await pods.change("web", finish(UPDATE, labels))
    await eventually(lambda: pods.available("web"), what="service-available again")
    assert await pods.service_ready("web") == "True"
    assert not any(k.startswith(L.OPERATION_PERMISSION) for k in await pods.labels("web"))


async def test_protection_finalizer_holds_preparing_and_completing(pods: Pods) -> None:
    expected = json.dumps({"expectedFinalizers": {"traffic": TRAFFIC}})
    await pods.create("web", annotations={L.AVAILABLE_CONDITIONS: expected}, finalizers=[TRAFFIC])
    await eventually(lambda: pods.available("web"), what="service-available with traffic on")
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=time.time_ns()))
    await eventually(lambda: pods.has("web", L.id_key(L.PREPARING, UPDATE.id)), what="preparing")
    # The traffic controller still holds the pod: it must stay in Preparing.
    await eventually(lambda: pods.service_ready("web"), what="condition written")
    assert not await pods.has("web", L.id_key(L.OPERATE, UPDATE.id))
    await pods.set_finalizers("web", [])  # traffic off
    await eventually(
        lambda: pods.has("web", L.id_key(L.OPERATE, UPDATE.id)), what="operate after traffic off"
    )
    await pods.change("web", finish(UPDATE, await pods.labels("web")))
    await eventually(lambda: pods.has("web", L.id_key(L.COMPLETING, UPDATE.id)), what="completing")
    assert not await pods.available("web")  # waits for the traffic finalizer to come back
    await pods.set_finalizers("web", [TRAFFIC])  # traffic on
    await eventually(lambda: pods.available("web"), what="service-available after traffic on")


async def test_two_operations_of_different_types(pods: Pods) -> None:
    await pods.create("web")
    await eventually(lambda: pods.available("web"), what="service-available")
    now = time.time_ns()
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=now))
    await pods.change("web", begin(RESTART, await pods.labels("web"), now_ns=now))
    for adapter in (UPDATE, RESTART):

        async def allowed(a: LabelAdapter = adapter) -> bool:
            return allow_ops(a, await pods.labels("web"), now_ns=time.time_ns()).allowed

        await eventually(allowed, what=f"{adapter.id} allowed")
    await pods.change("web", finish(UPDATE, await pods.labels("web")))
    # The barrier: nothing is operated while the other id still operates.
    assert not await pods.has("web", L.id_key(L.OPERATED, UPDATE.id))
    await pods.change("web", finish(RESTART, await pods.labels("web")))
    await eventually(lambda: pods.available("web"), what="both operations done")


async def test_undo_one_operation_while_another_goes_on(pods: Pods) -> None:
    await pods.create("web", finalizers=[TRAFFIC])
    await eventually(lambda: pods.available("web"), what="service-available")
    now = time.time_ns()
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=now))
    await pods.change("web", begin(RESTART, await pods.labels("web"), now_ns=now))
    await eventually(lambda: pods.has("web", L.id_key(L.PREPARING, RESTART.id)), what="preparing")
    await pods.change("web", undo(UPDATE, await pods.labels("web")))

    async def update_gone() -> bool:
        return not any(k.endswith(f"/{UPDATE.id}") for k in await pods.labels("web"))

    await eventually(update_gone, what="undone id wiped")
    await pods.set_finalizers("web", [])
    await _finish_when_allowed(pods, "web", RESTART)
    await eventually(lambda: pods.available("web"), what="the other operation completes")


async def _finish_when_allowed(pods: Pods, name: str, adapter: LabelAdapter) -> None:
    async def allowed() -> bool:
        return allow_ops(adapter, await pods.labels(name), now_ns=time.time_ns()).allowed

    await eventually(allowed, what=f"{adapter.id} allowed")
    await pods.change(name, finish(adapter, await pods.labels(name)))


async def test_lifecycle_completes_without_the_webhook(pods: Pods, operator: Operator) -> None:
    operator.restart(pod_webhooks=False)
    try:
        await pods.create("web")
        pod = await pods.get("web")
        assert not pod.spec.readiness_gates  # no webhook, no gate: the controller still runs
        await eventually(lambda: pods.available("web"), what="service-available via the controller")
        await _operate(pods, "web", UPDATE)
        await eventually(lambda: pods.available("web"), what="operation completed via the controller")
    finally:
        operator.restart(pod_webhooks=True)


@pytest.mark.parametrize(
    "stop_at",
    [
        pytest.param(L.PRE_CHECK, id="precheck"),
        pytest.param(L.PREPARING, id="preparing"),
        pytest.param(L.OPERATE, id="operating"),
        pytest.param(L.COMPLETING, id="completing"),
    ],
)
async def test_operator_restart_in_each_phase(pods: Pods, operator: Operator, stop_at: str) -> None:
    expected = json.dumps({"expectedFinalizers": {"traffic": TRAFFIC}})
    await pods.create("web", annotations={L.AVAILABLE_CONDITIONS: expected}, finalizers=[TRAFFIC])
    await eventually(lambda: pods.available("web"), what="service-available")
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=time.time_ns()))
    if stop_at == L.PRE_CHECK:
        operator.stop()
        await pods.set_finalizers("web", [])
        operator.start()
    elif stop_at == L.PREPARING:
        await eventually(lambda: pods.has("web", L.id_key(L.PREPARING, UPDATE.id)), what="preparing")
        operator.stop()
        await pods.set_finalizers("web", [])
        operator.start()
    else:
        await pods.set_finalizers("web", [])
    await _finish_when_allowed(pods, "web", UPDATE) if stop_at != L.OPERATE else None
    if stop_at == L.OPERATE:
        await eventually(lambda: pods.has("web", L.id_key(L.OPERATE, UPDATE.id)), what="operate")
        operator.stop()
        await pods.change("web", finish(UPDATE, await pods.labels("web")))
        operator.start()
    if stop_at == L.COMPLETING:
        await eventually(lambda: pods.has("web", L.id_key(L.COMPLETING, UPDATE.id)), what="completing")
        operator.stop()
        await pods.set_finalizers("web", [TRAFFIC])
        operator.start()
    else:
        await pods.set_finalizers("web", [TRAFFIC])
    await eventually(lambda: pods.available("web"), timeout=60, what="lifecycle completed after restart")


async def test_to_delete_label_deletes_through_the_lifecycle(pods: Pods) -> None:
    await pods.create("web", finalizers=[TRAFFIC])
    await eventually(lambda: pods.available("web"), what="service-available")
    await pods.change("web", LabelChange(set_labels={L.TO_DELETE: str(time.time_ns())}))
    await eventually(
        lambda: pods.has("web", L.id_key(L.PREPARING, "pod-delete")), what="delete operation preparing"
    )
    pod = await pods.get("web")
    assert pod.metadata.deletion_timestamp is None  # the traffic controller still holds it
    await pods.set_finalizers("web", [])

    async def gone() -> bool:
        try:
            await pods.get("web")
        except ApiException as e:
            return e.status == 404
        return False

    await eventually(gone, what="pod deleted once it may operate")


@pytest.mark.parametrize(
    ("labels", "annotations", "message"),
    [
        pytest.param(
            {f"{L.OPERATED}/x": "1"}, {}, f"{L.DONE_OPERATION_TYPE}/x", id="operated-without-done-type"
        ),
        pytest.param(
            {f"{L.PRE_CHECKED}/x": "1", f"{L.OPERATING}/x": "1", f"{L.OPERATION_TYPE}/x": "update"},
            {},
            L.OPERATION_PERMISSION,
            id="pre-checked-without-permission",
        ),
        pytest.param({L.OPERATING: "1"}, {}, f"invalid label {L.OPERATING}", id="label-without-id"),
        pytest.param({}, {L.AVAILABLE_CONDITIONS: "{not json"}, L.AVAILABLE_CONDITIONS, id="bad-json"),
    ],
)
async def test_validating_webhook_rejects_inconsistent_labels(
    pods: Pods, labels: dict[str, str], annotations: dict[str, str], message: str
) -> None:
    body = _pod("bad")
    body["metadata"]["labels"].update(labels)
    body["metadata"]["annotations"] = annotations
    with pytest.raises(ApiException) as err:
        await pods.core.create_namespaced_pod(pods.ns, body)
    assert err.value.status == 422
    assert message in json.loads(err.value.body)["message"]


async def test_grace_delete_turns_delete_into_the_lifecycle(pods: Pods, operator: Operator) -> None:
    operator.restart(grace_delete=True)
    try:
        await pods.create("web", finalizers=[TRAFFIC])
        await eventually(lambda: pods.available("web"), what="service-available")
        with pytest.raises(ApiException) as err:
            await pods.core.delete_namespaced_pod("web", pods.ns)
        assert "deletion is underway through PodOpsLifecycle" in json.loads(err.value.body)["message"]
        assert L.TO_DELETE in await pods.labels("web")
        await eventually(
            lambda: pods.has("web", L.id_key(L.PREPARING, "pod-delete")), what="delete operation"
        )
        await pods.set_finalizers("web", [])

        async def gone() -> bool:
            try:
                await pods.get("web")
            except ApiException as e:
                return e.status == 404
            return False

        await eventually(gone, what="pod deleted by the lifecycle")
    finally:
        operator.restart(grace_delete=False)


async def test_transition_rule_holds_precheck_until_it_passes(pods: Pods, api: client.ApiClient) -> None:
    """The lifecycle controller honours PodTransitionRule verdicts: no pre-checked until the rule passes."""
    rule = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": "gate"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "rules": [{"name": "approved", "labelCheck": {"requires": {"matchLabels": {"approved": "yes"}}}}],
        },
    }
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "apps.kusionstack.io", "v1alpha1", pods.ns, "podtransitionrules", rule
    )
    await pods.create("web")
    await eventually(lambda: pods.available("web"), what="service-available")
    await pods.change("web", begin(UPDATE, await pods.labels("web"), now_ns=time.time_ns()))
    await eventually(lambda: pods.has("web", L.id_key(L.PRE_CHECK, UPDATE.id)), what="pre-check")

    async def rejected() -> bool:
        pod = await pods.get("web")
        detail = (pod.metadata.annotations or {}).get("detail.podtransitionrule.kusionstack.io/gate")
        return detail is not None and json.loads(detail) == {"stage": "PreCheck", "passed": False}

    await eventually(rejected, what="the rule's rejection on the pod")
    assert not await pods.has("web", L.id_key(L.PRE_CHECKED, UPDATE.id))
    await pods.change("web", LabelChange(set_labels={"approved": "yes"}))
    await _finish_when_allowed(pods, "web", UPDATE)
    await eventually(lambda: pods.available("web"), what="operation completed once the rule passed")
