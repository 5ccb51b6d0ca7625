"""The operator's Kubernetes API requests, counted in the client layer by verb, resource and code.

Both HTTP clients of the operator are instrumented with one aiohttp ``TraceConfig``:
kopf's (watches, its own patches, Events), through the login handler returning a
``kopf.AiohttpSession`` built by :func:`kopf_session`, and ours (``memo["api"]``, the
controllers' writes), through :func:`instrument`. The counts are process-wide
(:data:`API_CALLS`); the benchmarks read them and the metrics endpoint exports them.

A request is classified from its method and URL the way the API server's audit log names
it: ``GET`` on an item is ``get``, on a collection ``list``, with ``watch=true`` ``watch``;
``POST`` ``create``; ``PUT`` ``update``; ``PATCH`` ``patch``; ``DELETE`` ``delete`` (or
``deletecollection`` on a collection). The resource keeps its subresource
(``pods/status``) and its API group. A request that got no answer is counted with code ``error``.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL


@dataclass(frozen=True, order=True)
class CallKey:
    verb: str
    #: The API group, "" for the core group (as RBAC rules name it).
    group: str
    resource: str
    code: str


class ApiCalls:
    """Thread-safe counts (the operator may run in a thread while a test or benchmark reads them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[CallKey] = Counter()

    def record(self, key: CallKey) -> None:
        with self._lock:
            self._counts[key] += 1

    def snapshot(self) -> dict[CallKey, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


API_CALLS = ApiCalls()

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def classify(method: str, url: URL) -> tuple[str, str, str]:
    """``(verb, group, resource)`` of a request, e.g. ``("patch", "", "pods/status")``."""
    parts = [p for p in url.path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return method.lower(), "", "nonresource"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # /namespaces/<ns>/<resource>...: a namespaced resource
    if not rest:
        return method.lower(), group, "nonresource"
    resource, name, sub = rest[0], rest[1:2], rest[2:3]
    if sub:
        resource = f"{resource}/{sub[0]}"
    collection = not name
    method = method.upper()
    if method == "GET":
        watching = url.query.get("watch") in ("true", "1")
        verb = "watch" if watching else ("list" if collection else "get")
    elif method == "DELETE":
        verb = "deletecollection" if collection else "delete"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, group, resource


def _trace_config(calls: ApiCalls) -> aiohttp.TraceConfig:
    async def on_end(_: aiohttp.ClientSession, __: SimpleNamespace, params: Any) -> None:
        calls.record(CallKey(*classify(params.method, params.url), str(params.response.status)))

    async def on_exception(_: aiohttp.ClientSession, __: SimpleNamespace, params: Any) -> None:
        calls.record(CallKey(*classify(params.method, params.url), "error"))

    config = aiohttp.TraceConfig()
    config.on_request_end.append(on_end)
    config.on_request_exception.append(on_exception)
    config.freeze()
    return config


def instrument(api: Any, calls: ApiCalls = API_CALLS) -> None:
    """Count the requests of a kubernetes_asyncio ``ApiClient``.

    Its REST client builds the aiohttp session without a way to pass trace configs, so the
    config is added to the session's list, which aiohttp reads on every request.
    """
    session: aiohttp.ClientSession = api.rest_client.pool_manager
    session._trace_configs.append(_trace_config(calls))


def kopf_session(info: Any, calls: ApiCalls = API_CALLS) -> Any:
    """kopf's connection from a ``kopf.ConnectionInfo``, as kopf builds it, with counting.

    Credentials travel in the headers (``as_http_headers`` covers basic auth and tokens).

    Must be called in the operator's event loop (aiohttp binds a session to it); kopf closes
    the session when it drops the credentials.
    """
    import kopf

    from rollouts import kube

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env and kube.environment_configures_http(),  # see kube.new_api_client
        trace_configs=[_trace_config(calls)],
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
        aiohttp_session=session,
    )
