"""examples/canary/: a partition lets 1 of 5 pods onto a new image, a smoke test runs at 1 pod,
and lowering the partition to 0 (the README's command) completes the rollout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import SERVICE_AVAILABLE
from tests.cluster_support import Operator, eventually
from tests.examples.support import Example, container_env, job_for
from tests.integration.test_collaset_support import STEP_TIMEOUT, Workload

pytestmark = [pytest.mark.integration, pytest.mark.examples]

OLD, NEW = "nginx:1.25", "nginx:1.26"
#: The README's promotion: no pod kept on the old revision.
PROMOTE = '{"spec": {"updateStrategy": {"rollingUpdate": {"byPartition": {"partition": 0}}}}}'


async def test_canary_moves_one_pod_runs_the_smoke_test_then_promotes(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    example = Example(kubeconfig, namespace)
    await example.apply("canary")
    canary = Workload(api, namespace, "canary")
    await canary.settled(replicas=5, image=OLD)
    old_revision = (await canary.status())["updatedRevision"]
    assert not await canary.jobs(), "creating the CollaSet is no rollout: the smoke test does not run"

    await example.set_image("cls", "canary", NEW)

    async def canary_checked() -> dict[str, Any] | None:
        obj = await canary.get()
        status = obj.get("status") or {}
        revision = status.get("updatedRevision")
        hooks = [
            (h["name"], h["point"], h["phase"])
            for h in status.get("hooks") or []
            if h["revision"] == revision
        ]
        update: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c["type"] == "Update"), {}
        )
        settled = (
            revision != old_revision
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and hooks == [("smoke-test", 1, "Succeeded")]
            and update.get("reason") == "Partitioned"
            and status.get("updatedAvailableReplicas") == 1
        )
        return status if settled else None

    status = await eventually(
        canary_checked, timeout=STEP_TIMEOUT, what="1 canary pod and its smoke test passed"
    )
    pods = await canary.pods()
    on_new = [p for p in pods if p.spec.containers[0].image == NEW]
    assert len(pods) == 5 and len(on_new) == 1, [(p.metadata.name, p.spec.containers[0].image) for p in pods]
    assert SERVICE_AVAILABLE in on_new[0].metadata.labels
    assert (status["replicas"], status["updatedReplicas"], status["currentRevision"]) == (5, 1, old_revision)
    assert status["hookPhase"] == "Succeeded 1/1"
    update = next(c for c in status["conditions"] if c["type"] == "Update")
    assert update["message"] == "1/5 updated, partition keeps 4 on the old revision"
    new_revision = status["updatedRevision"]
    smoke = job_for(await canary.jobs(), revision=new_revision, hook="smoke-test")
    assert smoke.status.succeeded == 1
    assert smoke.spec.template.spec.service_account_name == "canary-smoke-test"
    assert container_env(smoke) == {
        "K8S_ROLLOUT_FROM_OBJECT": f"{namespace}/{old_revision}",
        "K8S_ROLLOUT_TO_OBJECT": f"{namespace}/{new_revision}",
        "K8S_ROLLOUT_TYPE": "ROLLOUT",
    }

    await example.kubectl("patch", "cls", "canary", "--type", "merge", "-p", PROMOTE)
    await canary.settled(replicas=5, image=NEW)
    status = await canary.status()
    assert (status["currentRevision"], status["updatedRevision"]) == (new_revision, new_revision)
    assert [(h["name"], h["phase"]) for h in status["hooks"]] == [("smoke-test", "Succeeded")]
    assert [j.metadata.name for j in await canary.jobs()] == [smoke.metadata.name], "the smoke test ran once"
    promoted = await canary.condition("Update") or {}
    assert (promoted.get("status"), promoted.get("reason")) == ("True", "Updated")
