"""The one place ``rollouts`` talks to the Kubernetes API outside kopf's own watches.

Controllers decide purely and hand their plans to helpers here. API failures are mapped
to typed exceptions (:class:`NotFound`, :class:`Conflict`, :class:`Invalid`) so callers
never inspect HTTP status codes; only the kopf handler layer turns them into retries.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

FIELD_MANAGER = "rollouts"


class ApiError(Exception):
    """An API call failed; ``status`` is the HTTP status code, ``reason`` the server's message."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Invalid(ApiError):
    pass


def map_error(e: ApiException) -> ApiError:
    import json

    reason = str(e.reason)
    try:
        body = json.loads(e.body) if e.body else {}
        reason = str(body.get("message") or reason)
    except (ValueError, TypeError):
        pass
    status = int(e.status or 0)
    kind = {404: NotFound, 409: Conflict, 422: Invalid}.get(status, ApiError)
    return kind(status, reason)


async def send(call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> None:
    """Make a write whose answer is not needed, without reading it into models.

    The generated client deserialises every answer into ``V1Pod`` & co., which costs more
    CPU than the request itself when nobody reads it (the watch brings the new version
    anyway). With ``_preload_content=False`` it returns the raw response and raises nothing,
    so the status is checked here: a non-2xx answer is read and raised as the
    :class:`ApiException` the call would have raised.
    """
    response = await call(*args, _preload_content=False, **kwargs)
    try:
        # Read to the end (bytes, no JSON): a response released unread can cost the connection.
        data = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=RESTResponse(response, data))  # type: ignore[arg-type]
    finally:
        response.release()


async def new_api_client(kubeconfig: str | None = None, *, in_cluster: bool = False) -> client.ApiClient:
    """An API client from a kubeconfig path, ``$KUBECONFIG``, or the pod's service account."""
    cfg = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=cfg
        )
    # Many pods are patched at once; aiohttp's default of 100 connections would queue them.
    cfg.connection_pool_maxsize = 256
    api = client.ApiClient(configuration=cfg)
    if not environment_configures_http():
        # kubernetes_asyncio builds its session with trust_env=True, and aiohttp then looks up
        # the proxy variables and reads ~/.netrc in a worker thread on every request: about a
        # tenth of the operator's CPU during a rollout, to learn what cannot change.
        api.rest_client.pool_manager._trust_env = False
    return api


def environment_configures_http() -> bool:
    """Whether aiohttp's ``trust_env`` could change a request: a proxy variable or a netrc file.

    Both are read from the process environment, which does not change while it runs.
    """
    if urllib.request.getproxies():
        return True
    return Path(os.environ.get("NETRC") or Path.home() / ".netrc").exists()


@asynccontextmanager
async def api_session(
    kubeconfig: str | None = None, *, in_cluster: bool = False
) -> AsyncIterator[client.ApiClient]:
    api = await new_api_client(kubeconfig, in_cluster=in_cluster)
    try:
        yield api
    finally:
        await api.close()


async def apply_crds(
    api: client.ApiClient, crds: Sequence[Mapping[str, Any]], *, timeout: float = 60
) -> None:
    """Create or update CRDs with server-side apply, then wait until each is Established."""
    ext = client.ApiextensionsV1Api(api)
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            await ext.patch_custom_resource_definition(  # type: ignore[call-arg]
                name=name,
                body=crd,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except ApiException as e:
            raise map_error(e) from e
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            obj = await ext.read_custom_resource_definition(name=name)
            conditions = (obj.status and obj.status.conditions) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if loop.time() > deadline:
                raise ApiError(0, f"CRD {name} was not Established within {timeout:.0f}s")
            await asyncio.sleep(0.2)
