"""Helpers shared by the CollaSet and hook integration tests (this module holds no tests).

:class:`Workload` wraps one CollaSet in a test namespace: create it, change its spec,
scale it, and read what the controller did (pods, status, Events, hook Jobs) straight
from the API server. Every wait goes through ``eventually`` with a deadline.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hooks.rendering import COLLASET_LABEL
from lifecycle.labels import SERVICE_AVAILABLE
from rollouts.api.collasets import GROUP, REVISION_LABEL, VERSION
from tests.cluster_support import eventually

PLURAL = "collasets"
#: Deadline of one rollout step in these tests (pods go through PodOpsLifecycle one by one).
STEP_TIMEOUT = 90.0


def pod_template(name: str, image: str, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": image}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}


def hook(
    name: str,
    point: int | str,
    *,
    failure: str = "Abort",
    retain: str = "Always",
    annotations: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    """A hook whose Job pod completes at once on kwok (annotations change that)."""
    items = []
    for index in range(containers):
        container: dict[str, Any] = {"name": f"hook{index}", "image": "example.com/hook:1"}
        if env:
            container["env"] = [{"name": k, "value": v} for k, v in env.items()]
        items.append(container)
    return {
        "name": name,
        "trigger": {"type": "ProgressAvailable", "progressAvailableParams": {"progressPoint": point}},
        "failurePolicy": failure,
        "retainPolicy": retain,
        "jobSpec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"restartPolicy": "Never", "containers": items},
            },
        },
    }


def manifest(name: str, *, replicas: int, image: str = "example.com/app:1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CollaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, image),
            **spec,
        },
    }


@dataclass
class Workload:
    api: client.ApiClient
    namespace: str
    name: str

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create, retrying while the operator's admission webhook is not reachable yet."""

        async def attempt() -> dict[str, Any] | None:
            try:
                created: dict[str, Any] = await self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, copy.deepcopy(body)
                )
                return created
            except ApiException as e:
                if e.status == 500 and "webhook" in str(e.body):
                    return None
                raise

        result: dict[str, Any] = await eventually(attempt, what="CollaSet created")
        return result

    async def get(self) -> dict[str, Any]:
        obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        return obj

    async def patch_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = await self.custom.patch_namespaced_custom_object(  # type: ignore[call-arg]
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"spec": spec},
            _content_type="application/merge-patch+json",
        )
        return obj

    async def set_image(self, image: str, **spec: Any) -> dict[str, Any]:
        return await self.patch_spec({"template": pod_template(self.name, image), **spec})

    async def scale(self, replicas: int) -> None:
        """Through the scale subresource, as ``kubectl scale cls`` does."""
        await self.custom.patch_namespaced_custom_object_scale(  # type: ignore[call-arg]
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"spec": {"replicas": replicas}},
            _content_type="application/merge-patch+json",
        )

    async def delete(self) -> None:
        await self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)

    async def pods(self, *, live: bool = True) -> list[Any]:
        found = await self.core.list_namespaced_pod(self.namespace, label_selector=f"app={self.name}")
        items = list(found.items)
        if live:
            items = [p for p in items if p.metadata.deletion_timestamp is None]
        return items

    async def jobs(self) -> list[Any]:
        found = await self.batch.list_namespaced_job(
            self.namespace, label_selector=f"{COLLASET_LABEL}={self.name}"
        )
        return list(found.items)

    async def events(self, reason: str | None = None) -> list[Any]:
        found = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.name}"
        )
        return [e for e in found.items if reason is None or e.reason == reason]

    async def status(self) -> dict[str, Any]:
        return dict((await self.get()).get("status") or {})

    async def condition(self, kind: str) -> dict[str, Any] | None:
        for c in (await self.status()).get("conditions") or []:
            if c.get("type") == kind:
                return dict(c)
        return None

    async def settled(
        self, *, replicas: int, image: str | None = None, timeout: float = STEP_TIMEOUT
    ) -> list[Any]:
        """Wait until ``replicas`` pods are service-available (on ``image``) and the status says so."""

        async def probe() -> tuple[list[Any]] | None:  # a tuple: no pods is a success too
            obj = await self.get()
            status = obj.get("status") or {}
            pods = await self.pods(live=False)
            if len(pods) != replicas or any(p.metadata.deletion_timestamp for p in pods):
                return None
            if not all(SERVICE_AVAILABLE in (p.metadata.labels or {}) for p in pods):
                return None
            if image is not None and any(p.spec.containers[0].image != image for p in pods):
                return None
            updated = status.get("updatedRevision")
            if not all((p.metadata.labels or {}).get(REVISION_LABEL) == updated for p in pods):
                return None
            if status.get("observedGeneration") != obj["metadata"]["generation"]:
                return None
            if (status.get("replicas"), status.get("updatedAvailableReplicas")) != (replicas, replicas):
                return None
            if status.get("currentRevision") != updated:
                return None
            return (pods,)

        result: tuple[list[Any]] = await eventually(
            probe,
            timeout=timeout,
            what=f"{self.name}: {replicas} available pods on {image or 'the template'}",
        )
        return result[0]


def images(pods: Iterable[Any]) -> list[str]:
    return sorted(p.spec.containers[0].image for p in pods)


def uids(pods: Iterable[Any]) -> set[str]:
    return {p.metadata.uid for p in pods}
