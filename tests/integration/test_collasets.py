"""CollaSet controller against a real control plane: scaling, updates, rollback, pause, GC.

Pods are made Ready by kwok; the PodOpsLifecycle controller of the same operator moves
them through the lifecycle, so each update and scale-in here goes the full protocol.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts.api.collasets import GROUP, VERSION
from rollouts.planning.revisions import hash_revision, make_revision_data, name_revision
from tests.cluster_support import Operator, eventually
from tests.integration.test_collaset_support import Workload, hook, images, manifest, uids

pytestmark = pytest.mark.integration


async def test_scale_out_and_in_through_the_scale_subresource(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=0))
    await web.settled(replicas=0)
    await web.scale(5)
    pods = await web.settled(replicas=5)
    assert all(p.metadata.owner_references[0].controller for p in pods)
    assert all(p.metadata.generate_name == "web-" for p in pods)
    await web.scale(2)
    kept = await web.settled(replicas=2)
    assert uids(kept) <= uids(pods)
    await web.scale(0)
    await web.settled(replicas=0)
    assert await web.events("ScaledIn")


async def test_update_by_partition_then_all_in_place(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=4))
    before = await web.settled(replicas=4)
    first_revision = (await web.status())["updatedRevision"]

    await web.set_image(
        "example.com/app:2", updateStrategy={"rollingUpdate": {"byPartition": {"partition": 2}}}
    )

    async def partitioned() -> bool:
        pods = await web.pods()
        condition = await web.condition("Update") or {}
        return (
            images(pods) == ["example.com/app:1"] * 2 + ["example.com/app:2"] * 2
            and condition.get("reason") == "Partitioned"
            and (await web.status()).get("updatedAvailableReplicas") == 2
        )

    await eventually(partitioned, timeout=90, what="2 of 4 pods updated, the partition keeps 2")
    status = await web.status()
    assert status["currentRevision"] == first_revision != status["updatedRevision"]

    await web.patch_spec({"updateStrategy": {"rollingUpdate": {"byPartition": {"partition": 0}}}})
    after = await web.settled(replicas=4, image="example.com/app:2")
    assert uids(after) == uids(before), "InPlaceIfPossible keeps the pods"
    assert (await web.condition("Update") or {}).get("reason") == "Updated"
    assert await web.events("PodUpdatedInPlace")


async def test_recreate_replaces_the_pods(api: client.ApiClient, namespace: str, operator: Operator) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3, updateStrategy={"podUpdatePolicy": "Recreate"}))
    before = await web.settled(replicas=3)
    await web.set_image("example.com/app:2")
    after = await web.settled(replicas=3, image="example.com/app:2")
    assert not uids(after) & uids(before)
    assert await web.events("PodRecreating")


async def test_changing_more_than_images_recreates_in_place_if_possible(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2))
    before = await web.settled(replicas=2)
    template = manifest("web", replicas=2)["spec"]["template"]
    template["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "b"}]
    await web.patch_spec({"template": template})

    async def recreated() -> bool:
        pods = await web.settled(replicas=2)
        return all(p.spec.containers[0].env for p in pods)

    await eventually(recreated, timeout=90, what="pods recreated with the new env")
    assert not uids(await web.pods()) & uids(before)


async def test_rollback_reuses_the_earlier_revision(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2))
    await web.settled(replicas=2)
    first = (await web.status())["updatedRevision"]
    await web.set_image("example.com/app:2")
    await web.settled(replicas=2, image="example.com/app:2")
    second = (await web.status())["updatedRevision"]
    await web.set_image("example.com/app:1")
    await web.settled(replicas=2, image="example.com/app:1")
    assert (await web.status())["updatedRevision"] == first != second
    apps = client.AppsV1Api(api)
    revisions = {
        r.metadata.name: r.revision for r in (await apps.list_namespaced_controller_revision(namespace)).items
    }
    assert revisions == {first: 3, second: 2}
    assert await web.events("RevisionRolledBack")


async def test_paused_stops_updates_but_not_scaling(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2))
    await web.settled(replicas=2)
    await web.set_image("example.com/app:2", paused=True)

    async def reported_paused() -> bool:
        condition = await web.condition("Update") or {}
        obj = await web.get()
        return (
            condition.get("reason") == "Paused"
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        )

    await eventually(reported_paused, what="Update condition Paused")
    assert images(await web.pods()) == ["example.com/app:1"] * 2
    await web.scale(3)

    async def scaled() -> bool:
        return len(await web.pods()) == 3 and (await web.status()).get("availableReplicas") == 3

    await eventually(scaled, timeout=60, what="scaled to 3 while paused")
    await web.patch_spec({"paused": False})
    await web.settled(replicas=3, image="example.com/app:2")


async def test_deleting_the_collaset_deletes_its_pods(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3))
    await web.settled(replicas=3)
    await web.delete()

    async def gone() -> bool:
        return not await web.pods(live=False)

    await eventually(gone, timeout=60, what="pods garbage-collected")


def _bad(**spec: Any) -> dict[str, Any]:
    body = manifest("bad", replicas=2)
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            _bad(lifecycleHooks=[hook("mid", "150%")]),
            "spec.lifecycleHooks[0].trigger.progressAvailableParams.progressPoint: 150% is above 100%",
            id="percent-over-100",
        ),
        pytest.param(
            _bad(lifecycleHooks=[{k: v for k, v in hook("mid", 1).items() if k != "jobSpec"}]),
            "spec.lifecycleHooks[0].jobSpec: Required value",  # the CRD schema answers first
            id="hook-without-job-spec",
        ),
        pytest.param(
            _bad(selector={"matchLabels": {"app": "other"}}),
            "spec.selector: does not match spec.template.metadata.labels",
            id="selector-mismatch",
        ),
        pytest.param(
            _bad(updateStrategy={"rollingUpdate": {"byPartition": {"partition": -1}}}),
            "partition",
            id="negative-partition",
        ),
        pytest.param(
            _bad(updateStrategy={"rollingUpdate": {"maxUnavailable": 0}}),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: must not be 0",
            id="max-unavailable-zero",
        ),
    ],
)
async def test_admission_rejects_bad_collasets_with_a_message(
    api: client.ApiClient, namespace: str, operator: Operator, body: dict[str, Any], expected: str
) -> None:
    custom = client.CustomObjectsApi(api)

    async def rejected() -> str | None:
        try:
            await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "collasets", body)
        except ApiException as e:
            if e.status == 500 and "webhook" in str(e.body):
                return None  # the operator's webhook is not reachable yet
            assert e.status in (400, 422), e.body
            return str(json.loads(e.body or b"{}")["message"])
        raise AssertionError("the API server accepted an invalid CollaSet")

    message = await eventually(rejected, what="admission to answer")
    assert expected in message


async def test_a_revision_name_taken_by_another_object_bumps_the_collision_count(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    body = manifest("web", replicas=1)
    data = make_revision_data(body["spec"]["template"])
    taken = name_revision(collaset="web", revision_hash=hash_revision(data))
    apps = client.AppsV1Api(api)
    squatter = {"metadata": {"name": taken}, "data": {"other": True}, "revision": 1}
    await apps.create_namespaced_controller_revision(namespace, squatter)  # type: ignore[arg-type]
    web = Workload(api, namespace, "web")
    await web.create(body)
    await web.settled(replicas=1)
    status = await web.status()
    assert status["collisionCount"] == 1
    assert status["updatedRevision"] != taken
