"""A traffic cooperation controller for PodOpsLifecycle; a ConfigMap stands in for the load balancer.

For each controlled pod (label ``kusionstack.io/control: "true"``) in one namespace:

* **in service** (Ready, ``pod.kusionstack.io/service-ready`` True, has an IP, not being
  deleted, not Preparing or Operating): add the protection finalizer, *then* write
  ``<pod name>: <pod IP>`` into the ConfigMap;
* **out of service** (an operation started Preparing it, or it is being deleted): remove it
  from the ConfigMap, *then* drop the finalizer.

The order keeps one invariant: a pod listed in the ConfigMap always carries the finalizer.
The lifecycle does not let an operation start on a pod that still has a
``prot.podopslifecycle.kusionstack.io/*`` finalizer, so no pod is updated while it takes
traffic. It also does not mark the pod service-available again until the finalizers
named in its ``pod.kusionstack.io/available-conditions`` annotation are back.

    python examples/traffic-controller/traffic.py --kubeconfig KUBECONFIG [-n NAMESPACE] [--configmap NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle.labels import CONTROL, CONTROL_VALUE, PROTECTION_FINALIZER_PREFIX, SERVICE_READY
from lifecycle.states import InvalidLifecycleLabel, PodPhase, parse_state
from rollouts import kube

FINALIZER = f"{PROTECTION_FINALIZER_PREFIX}/traffic"
log = logging.getLogger("traffic")


def in_service(pod: dict[str, Any]) -> bool:
    """Whether the load balancer should send this pod traffic."""
    meta, status = pod["metadata"], pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    try:
        phase = parse_state(meta.get("labels")).phase
    except InvalidLifecycleLabel:
        return False  # the lifecycle is stuck on a bad label: keep traffic away
    return (
        not meta.get("deletionTimestamp")
        and bool(status.get("podIP"))
        and conditions.get("Ready") == "True"
        and conditions.get(SERVICE_READY, "True") == "True"
        and phase not in (PodPhase.PREPARING, PodPhase.OPERATING)
    )


class TrafficController:
    def __init__(self, api: client.ApiClient, *, namespace: str, configmap: str) -> None:
        self.api, self.core = api, client.CoreV1Api(api)
        self.namespace, self.configmap = namespace, configmap
        self.backends: dict[str, str] = {}  # what the ConfigMap says: pod name -> IP

    async def run(self) -> None:
        """List and watch the controlled pods forever (cancel the task to stop)."""
        try:
            await self.core.create_namespaced_config_map(
                self.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=self.configmap))
            )
        except ApiException as e:
            if e.status != 409:
                raise
        self.backends = dict(
            (await self.core.read_namespaced_config_map(self.configmap, self.namespace)).data or {}
        )
        selector = f"{CONTROL}={CONTROL_VALUE}"
        while True:
            listing = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
            pods = [self.api.sanitize_for_serialization(p) for p in listing.items]
            for name in set(self.backends) - {p["metadata"]["name"] for p in pods}:
                await self.set_backend(name, None)  # deleted while we were not watching
            for pod in pods:
                await self.reconcile(pod)
            try:
                async with watch.Watch().stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    resource_version=listing.metadata.resource_version,
                ) as events:
                    async for event in events:
                        pod = event["raw_object"]
                        if event["type"] == "DELETED":
                            await self.set_backend(pod["metadata"]["name"], None)
                        else:
                            await self.reconcile(pod)
            except ApiException as e:
                if e.status != 410:  # 410 Gone: our resourceVersion is too old, list again
                    raise

    async def reconcile(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        finalizers = meta.get("finalizers") or []
        if in_service(pod):
            if FINALIZER not in finalizers and not await self.set_finalizers(pod, [*finalizers, FINALIZER]):
                return  # the pod changed meanwhile: its next event brings it back here
            await self.set_backend(meta["name"], pod["status"]["podIP"])
        else:
            await self.set_backend(meta["name"], None)
            if FINALIZER in finalizers:
                await self.set_finalizers(pod, [f for f in finalizers if f != FINALIZER])

    async def set_backend(self, name: str, ip: str | None) -> None:
        if self.backends.get(name) == ip:
            return
        body = {"data": {name: ip}}  # a merge patch: null removes the key
        await self.core.patch_namespaced_config_map(  # type: ignore[call-arg]
            self.configmap, self.namespace, body, _content_type="application/merge-patch+json"
        )
        log.info("%s %s", "traffic on:" if ip else "traffic off:", name)
        if ip is None:
            self.backends.pop(name, None)
        else:
            self.backends[name] = ip

    async def set_finalizers(self, pod: dict[str, Any], finalizers: list[str]) -> bool:
        meta = pod["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        try:
            await self.core.patch_namespaced_pod(  # type: ignore[call-arg]
                meta["name"], self.namespace, body, _content_type="application/merge-patch+json"
            )
        except ApiException as e:
            if e.status in (404, 409):
                return False
            raise
        return True


async def run(api: client.ApiClient, *, namespace: str, configmap: str) -> None:
    await TrafficController(api, namespace=namespace, configmap=configmap).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument(
        "--configmap", default="traffic-lb", help="the ConfigMap standing for the load balancer"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    async def serve() -> None:
        async with kube.api_session(args.kubeconfig) as api:
            await run(api, namespace=args.namespace, configmap=args.configmap)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stop quietly
        asyncio.run(serve())


if __name__ == "__main__":
    main()
