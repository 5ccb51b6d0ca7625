"""Benchmark: one PodTransitionRule over N control pods in PreCheck (not a test).

    .venv/bin/python bench/ptr_precheck.py --pods 1000 --max-unavailable 100%

On a local kwok cluster (``--cluster``, default ``ptr-dev``; reused when it runs) it creates N
control pods already in PreCheck and service-available and waits until kwok runs them all,
starts the operator with the PodTransitionRule controller only, watching just the benchmark's
namespace, waits until it is warm (a PTR selecting nothing got its status, so every pod is
indexed), then creates one PTR with ``availablePolicy.maxUnavailableValue`` and measures,
from that create:

* ``status``: until the PTR status lists a detail for every pod (the full PreCheck pass);
* ``annotated``: until every pod carries its ``detail.podtransitionrule.kusionstack.io/<ptr>``;

and the API writes the operator issued, counted two ways that must agree:

* at the aiohttp layer: every request made from the operator's thread (kopf's own included),
  by method and resource (``ClientSession._request`` is wrapped before the operator starts);
* by the controller itself (``rollouts.operator.handlers.transitionrules.COUNTS``).

Counts are taken once the operator has been quiet for ``--settle`` seconds, so trailing
reconciles (pods turning Running on kwok wake the rule) are included.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from lifecycle import labels as L
from lifecycle.rules.models import DETAIL_ANNOTATION_PREFIX
from rollouts import kube
from rollouts.localcluster.clusters import cluster_up
from rollouts.operator.handlers import transitionrules
from rollouts.operator.running import OperatorConfig, OperatorThread, free_port

OPERATOR_THREAD = "rollouts-operator"
PTR = "bench"
requests: collections.Counter[str] = collections.Counter()
_original_request = aiohttp.ClientSession._request


def _resource(url: Any) -> str:
    path = str(url).split("?", 1)[0]
    if re.search(r"/podtransitionrules/[^/]+/status$", path):
        return "podtransitionrules/status"
    for kind in ("podtransitionrules", "pods", "events", "customresourcedefinitions"):
        if f"/{kind}" in path:
            return kind
    return "other"


async def _counting_request(self: aiohttp.ClientSession, method: str, url: Any, **kwargs: Any) -> Any:
    if threading.current_thread().name == OPERATOR_THREAD:
        requests[f"{method.upper()} {_resource(url)}"] += 1
    return await _original_request(self, method, url, **kwargs)


aiohttp.ClientSession._request = _counting_request  # type: ignore[method-assign,assignment]


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "app": "bench",
                L.CONTROL: L.CONTROL_VALUE,
                L.SERVICE_AVAILABLE: "1",
                f"{L.OPERATING}/bench": "1",
                f"{L.OPERATION_TYPE}/bench": "update",
                f"{L.PRE_CHECK}/bench": "1",
            },
        },
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
    }


def _rule(max_unavailable: int | str, *, name: str = PTR, app: str = "bench") -> dict[str, Any]:
    return {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "rules": [{"name": "budget", "availablePolicy": {"maxUnavailableValue": max_unavailable}}],
        },
    }


async def _annotated(core: client.CoreV1Api, ns: str, key: str) -> int:
    """Pods carrying ``key``, from raw JSON: building 1,000 V1Pod models would compete with the
    operator's thread for the interpreter and slow down what we measure."""
    response: Any = await core.list_namespaced_pod(ns, _preload_content=False)
    listed = json.loads(await response.read())
    return sum(key in (pod["metadata"].get("annotations") or {}) for pod in listed["items"])


def _writes(counter: collections.Counter[str]) -> int:
    return sum(n for key, n in counter.items() if key.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))


async def run(
    api: client.ApiClient, cfg: OperatorConfig, *, pods: int, max_unavailable: str, settle: float
) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    ns = f"bench-ptr-{pods}-{int(time.time())}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    gate = asyncio.Semaphore(64)

    async def create(i: int) -> None:
        async with gate:
            await core.create_namespaced_pod(ns, _pod(f"p{i:05d}"))  # type: ignore[arg-type]

    await asyncio.gather(*(create(i) for i in range(pods)))
    # let kwok finish starting the pods: their status updates would load the API server
    while True:
        listed = await core.list_namespaced_pod(ns)
        if sum(p.status.phase == "Running" for p in listed.items) == pods:
            break
        await asyncio.sleep(0.5)
    operator = OperatorThread(replace(cfg, namespace=ns, webhook_port=free_port()))
    started = time.monotonic()
    await asyncio.to_thread(operator.start)
    startup = time.monotonic() - started
    try:
        # A rule selecting nothing gets its status once kopf has indexed every pod (handlers wait
        # for the indexes): from then on the operator is warm, and we measure the rule alone.
        while True:
            try:
                await objects.create_namespaced_custom_object(
                    "apps.kusionstack.io",
                    "v1alpha1",
                    ns,
                    "podtransitionrules",
                    _rule(1, name="warmup", app="none"),
                )
                break
            except client.exceptions.ApiException as e:
                # kopf points the webhook configuration at this run's port in the background
                if e.status != 500 or "failed calling webhook" not in str(e.body):
                    raise
                await asyncio.sleep(0.2)
        while True:
            warm = await objects.get_namespaced_custom_object(
                "apps.kusionstack.io", "v1alpha1", ns, "podtransitionrules", "warmup"
            )
            if warm.get("status"):
                break
            await asyncio.sleep(0.05)
        warmup = time.monotonic() - started
        requests.clear()
        transitionrules.COUNTS.reset()
        t0 = time.monotonic()
        await objects.create_namespaced_custom_object(
            "apps.kusionstack.io", "v1alpha1", ns, "podtransitionrules", _rule(max_unavailable)
        )
        t_status = t_annotated = None
        key = f"{DETAIL_ANNOTATION_PREFIX}/{PTR}"
        # Polls the API on purpose: the benchmark observes the cluster, not the operator's memory.
        while t_status is None:
            obj = await objects.get_namespaced_custom_object(
                "apps.kusionstack.io", "v1alpha1", ns, "podtransitionrules", PTR
            )
            if len((obj.get("status") or {}).get("details") or []) == pods:
                t_status = time.monotonic() - t0
            else:
                await asyncio.sleep(0.05)
        while t_annotated is None:
            if await _annotated(core, ns, key) == pods:
                t_annotated = time.monotonic() - t0
            else:
                await asyncio.sleep(0.25)
        status = obj["status"]
        # quiet for `settle` seconds: no request from the operator thread
        last, quiet_since = sum(requests.values()), time.monotonic()
        while time.monotonic() - quiet_since < settle:
            await asyncio.sleep(0.2)
            if sum(requests.values()) != last:
                last, quiet_since = sum(requests.values()), time.monotonic()
        counts = asdict(transitionrules.COUNTS)
        seen = collections.Counter(requests)
    finally:
        await asyncio.to_thread(operator.stop)
        await core.delete_namespace(ns)
    return {
        "pods": pods,
        "maxUnavailable": max_unavailable,
        "operator_start_s": round(startup, 2),
        "operator_warm_s": round(warmup, 2),
        "status_complete_s": round(t_status, 2),
        "annotations_complete_s": round(t_annotated, 2),
        "passed": status["summary"]["passed"],
        "rejected": status["summary"]["rejected"],
        "controller_counts": counts,
        "operator_requests": dict(sorted(seen.items())),
        "operator_writes": _writes(seen),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--max-unavailable", nargs="+", default=["100%"])
    parser.add_argument("--cluster", default="ptr-dev", help="kwok cluster name (created or reused)")
    parser.add_argument("--settle", type=float, default=3.0, help="quiet seconds before counting")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    kubeconfig = cluster_up(name=args.cluster, nodes=3)
    cfg = OperatorConfig(kubeconfig=str(kubeconfig), controllers=frozenset({"transitionrules"}))
    results = []
    async with kube.api_session(str(kubeconfig)) as api:
        for budget in args.max_unavailable:
            result = await run(api, cfg, pods=args.pods, max_unavailable=budget, settle=args.settle)
            results.append(result)
            print(json.dumps(result), flush=True)

    print()
    header = (
        f"{'pods':>5} {'budget':>6} {'passed':>6} {'status s':>8} {'annot. s':>8} {'writes':>6} "
        f"{'status':>6} {'annot.':>6} {'events':>6} {'reconc.':>7}  operator requests"
    )
    print(header)
    for r in results:
        c = r["controller_counts"]
        print(
            f"{r['pods']:>5} {r['maxUnavailable']:>6} {r['passed']:>6} {r['status_complete_s']:>8} "
            f"{r['annotations_complete_s']:>8} {r['operator_writes']:>6} {c['status_patches']:>6} "
            f"{c['annotation_patches']:>6} {c['events']:>6} {c['reconciles']:>7}  {r['operator_requests']}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
