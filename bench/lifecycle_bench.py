"""Benchmark: N controlled pods taken through one lifecycle operation at once (not a test).

    .venv/bin/python bench/lifecycle_bench.py --pods 100 1000

For each N it creates N control pods on a local kwok cluster (``rollouts cluster up
--name bench``), waits until they are service-available, then plays a minimal operation
controller with the library: ``begin`` on every pod, ``finish`` on each as soon as
``allow_ops`` says so. It reports the wall time from the first ``begin`` to the last pod
being service-available again, and the operator's API requests by verb, per pod. Requests
are counted at the aiohttp layer in the operator's thread, so kopf's own calls (events,
webhook configuration) are included; the benchmark's own calls are not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from lifecycle import labels as L
from lifecycle.operations import LabelAdapter, allow_ops, begin, finish
from rollouts import kube
from rollouts.localcluster.clusters import cluster_up
from rollouts.operator.running import OperatorConfig, OperatorThread, free_port

ADAPTER = LabelAdapter(id="bench", type="update")
OPERATOR_THREAD = "rollouts-operator"
requests: collections.Counter[str] = collections.Counter()
_original_request = aiohttp.ClientSession._request


async def _counting_request(self: aiohttp.ClientSession, method: str, url: Any, **kwargs: Any) -> Any:
    if threading.current_thread().name == OPERATOR_THREAD:
        requests[method.upper()] += 1
    return await _original_request(self, method, url, **kwargs)


aiohttp.ClientSession._request = _counting_request  # type: ignore[method-assign]


def _available(labels: dict[str, str]) -> bool:
    return L.SERVICE_AVAILABLE in labels and not any(k.endswith(f"/{ADAPTER.id}") for k in labels)


async def _all_pods(core: client.CoreV1Api, ns: str) -> list[Any]:
    return list((await core.list_namespaced_pod(ns)).items)


async def _patch(core: client.CoreV1Api, pod: Any, change: Any) -> None:
    """Write a library change guarded by resourceVersion; on a conflict read the pod and retry."""
    while True:
        body = change(pod.metadata.labels or {}).to_merge_patch(
            resource_version=pod.metadata.resource_version
        )
        try:
            await core.patch_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, body, _content_type="application/merge-patch+json"
            )
            return
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise
        pod = await core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)


async def run_once(api: client.ApiClient, n: int) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    ns = f"bench-{n}-{int(time.time())}"
    await core.create_namespace({"metadata": {"name": ns}})
    sem = asyncio.Semaphore(64)

    async def create(i: int) -> None:
        async with sem:
            await core.create_namespaced_pod(
                ns,
                {
                    "metadata": {"name": f"p{i:05d}", "labels": {L.CONTROL: "true"}},
                    "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
                },
            )

    await asyncio.gather(*(create(i) for i in range(n)))
    # Polls the API on purpose: the benchmark observes the cluster, not an in-process event.
    while sum(_available(p.metadata.labels or {}) for p in await _all_pods(core, ns)) < n:  # noqa: ASYNC110
        await asyncio.sleep(0.5)

    requests.clear()
    started = time.monotonic()
    now = time.time_ns()
    pods = await _all_pods(core, ns)

    async def begin_one(pod: Any) -> None:
        async with sem:
            await _patch(core, pod, lambda labels: begin(ADAPTER, labels, now_ns=now))

    await asyncio.gather(*(begin_one(p) for p in pods))
    finished: set[str] = set()
    while True:
        pods = await _all_pods(core, ns)
        todo = []
        for pod in pods:
            labels = pod.metadata.labels or {}
            if (
                pod.metadata.name not in finished
                and allow_ops(ADAPTER, labels, now_ns=time.time_ns()).allowed
            ):
                finished.add(pod.metadata.name)
                todo.append(_patch(core, pod, lambda labels: finish(ADAPTER, labels)))
        await asyncio.gather(*todo)
        if len(finished) == n and all(_available(p.metadata.labels or {}) for p in pods):
            break
        await asyncio.sleep(0.25)
    wall = time.monotonic() - started
    writes = sum(v for k, v in requests.items() if k in ("POST", "PUT", "PATCH", "DELETE"))
    await core.delete_namespace(ns)
    return {
        "pods": n,
        "seconds": round(wall, 2),
        "operator_requests": dict(requests),
        "operator_writes_per_pod": round(writes / n, 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--out", type=Path, default=Path("bench/results/lifecycle.json"))
    args = parser.parse_args()
    kubeconfig = cluster_up(name="bench", nodes=3)
    operator = OperatorThread(OperatorConfig(kubeconfig=str(kubeconfig), webhook_port=free_port())).start()
    results = []
    try:
        async with kube.api_session(str(kubeconfig)) as api:
            for n in args.pods:
                results.append(await run_once(api, n))
                print(json.dumps(results[-1]), flush=True)
    finally:
        operator.stop()
    print(f"\n{'pods':>6} {'seconds':>8} {'writes/pod':>11}  operator requests")
    for r in results:
        print(
            f"{r['pods']:>6} {r['seconds']:>8} {r['operator_writes_per_pod']:>11}  {r['operator_requests']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
