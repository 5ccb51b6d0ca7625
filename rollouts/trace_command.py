"""``rollouts trace pod/NAME`` and ``rollouts trace cls/NAME``: read the cluster, print the timeline.

The reading half of :mod:`rollouts.tracing` (which is pure): a handful of GETs and LISTs,
read-only, as the API server sends them (camelCase dicts, not client models):

* a pod: the pod, its Events (same uid), the PodTransitionRules of its namespace;
* a CollaSet: the CollaSet, the pods it controls, its hook Jobs.

``-o json`` prints :func:`rollouts.tracing.to_json` of the trace; the default is text.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hooks.rendering import COLLASET_LABEL
from lifecycle.rules.models import PLURAL as PTR_PLURAL
from rollouts.api.collasets import GROUP, VERSION
from rollouts.tracing import (
    CollaSetTrace,
    PodTrace,
    render_collaset,
    render_pod,
    to_json,
    trace_collaset,
    trace_pod,
)

POD_NAMES: Final = frozenset({"pod", "pods", "po"})
COLLASET_NAMES: Final = frozenset({"cls", "collaset", "collasets", f"collaset.{GROUP}", f"collasets.{GROUP}"})
OUTPUTS: Final = ("text", "json")


class TraceError(Exception):
    """The trace cannot be made; the message says why."""


def parse_target(text: str) -> tuple[str, str]:
    """``("pod" | "collaset", name)`` from ``pod/NAME`` or ``cls/NAME`` (kubectl's spellings)."""
    kind, sep, name = text.partition("/")
    if not sep or not name or "/" in name:
        raise TraceError(f"{text!r}: name what to trace as pod/NAME or cls/NAME")
    if kind.lower() in POD_NAMES:
        return "pod", name
    if kind.lower() in COLLASET_NAMES:
        return "collaset", name
    raise TraceError(f"{text!r}: cannot trace a {kind}; use pod/NAME or cls/NAME")


async def _raw(call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A GET or LIST as the server sent it."""
    response = await call(*args, _preload_content=False, **kwargs)
    document: dict[str, Any] = await response.json()
    return document


async def _items(call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    try:
        return list((await _raw(call, *args, **kwargs)).get("items") or [])
    except ApiException as e:
        if e.status == 404:  # e.g. the CRD is not installed
            return []
        raise


def _not_found(e: ApiException, what: str, namespace: str) -> TraceError:
    if e.status == 404:
        return TraceError(f'{what} not found in namespace "{namespace}"')
    return TraceError(f"reading {what} in {namespace}: {e.status} {e.reason}")


async def read_pod_trace(api: client.ApiClient, *, namespace: str, name: str, now: datetime) -> PodTrace:
    core = client.CoreV1Api(api)
    try:
        pod = await _raw(core.read_namespaced_pod, name, namespace)
    except ApiException as e:
        raise _not_found(e, f'pod "{name}"', namespace) from e
    uid = (pod.get("metadata") or {}).get("uid")
    events = await _items(
        core.list_namespaced_event,
        namespace,
        field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
    )
    events = [e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]
    custom = client.CustomObjectsApi(api)
    rules = await _items(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PTR_PLURAL)
    return trace_pod(pod, events=events, rules=rules, now=now)


async def read_collaset_trace(
    api: client.ApiClient, *, namespace: str, name: str, now: datetime
) -> CollaSetTrace:
    custom = client.CustomObjectsApi(api)
    try:
        collaset = await _raw(
            custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "collasets", name
        )
    except ApiException as e:
        raise _not_found(e, f'collaset "{name}"', namespace) from e
    uid = (collaset.get("metadata") or {}).get("uid")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    pods = [
        pod
        for pod in await _items(core.list_namespaced_pod, namespace)
        if any(
            ref.get("controller") and ref.get("uid") == uid
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
        )
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    jobs = await _items(batch.list_namespaced_job, namespace, label_selector=f"{COLLASET_LABEL}={name}")
    return trace_collaset(collaset, pods=pods, jobs=jobs, now=now)


def run_trace(
    *,
    target: str,
    namespace: str | None,
    kubeconfig: str | None,
    output: str = "text",
    out: TextIO | None = None,
) -> int:
    """The ``rollouts trace`` command: print the trace, return the exit code (0)."""
    from rollouts import kube
    from rollouts.status import default_namespace

    if output not in OUTPUTS:
        raise TraceError(f"unknown output {output!r}: use text or json")
    kind, name = parse_target(target)
    ns = namespace or default_namespace(kubeconfig)

    async def main() -> PodTrace | CollaSetTrace:
        now = datetime.now(UTC)
        async with kube.api_session(kubeconfig) as api:
            if kind == "pod":
                return await read_pod_trace(api, namespace=ns, name=name, now=now)
            return await read_collaset_trace(api, namespace=ns, name=name, now=now)

    trace = asyncio.run(main())
    stream = out or sys.stdout
    if output == "json":
        stream.write(json.dumps(to_json(trace), indent=2) + "\n")
    else:
        stream.write(render_pod(trace) if isinstance(trace, PodTrace) else render_collaset(trace))
    stream.flush()
    return 0
