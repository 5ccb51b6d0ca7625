"""Helpers of the quickstart and traffic-controller example tests (this module holds no tests).

:func:`running_traffic_controller` runs ``examples/traffic-controller/traffic.py`` (loaded
from its file, as the playground does) on the test's event loop; :func:`follow` feeds
every watch event of a resource to a callback until cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes_asyncio import client, watch

from rollouts.playground import load_traffic_controller

LB = "traffic-lb"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@asynccontextmanager
async def running_traffic_controller(
    api: client.ApiClient, namespace: str, *, path: Path
) -> AsyncIterator[ModuleType]:
    """The example controller keeping ConfigMap ``traffic-lb`` in ``namespace``; fails the test on a crash."""
    module = load_traffic_controller(path)
    task = asyncio.create_task(module.run(api, namespace=namespace, configmap=LB))
    try:
        yield module
    finally:
        crashed = task.done() and not task.cancelled() and task.exception() is not None
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        assert not crashed, f"the traffic controller crashed: {task.exception()!r}"


async def backends(api: client.ApiClient, namespace: str) -> dict[str, str]:
    """What the load balancer ConfigMap says: pod name -> IP."""
    found = await client.CoreV1Api(api).read_namespaced_config_map(LB, namespace)
    return dict(found.data or {})


async def follow(
    list_call: Callable[..., Awaitable[Any]],
    *args: Any,
    on_event: Callable[[str, dict[str, Any]], Awaitable[None]],
    **kwargs: Any,
) -> None:
    """Call ``on_event(type, raw object)`` for every watch event (the initial state comes as ADDED)."""
    async with watch.Watch().stream(list_call, *args, **kwargs) as events:
        async for event in events:
            await on_event(event["type"], event["raw_object"])


@asynccontextmanager
async def following(
    list_call: Callable[..., Awaitable[Any]],
    *args: Any,
    on_event: Callable[[str, dict[str, Any]], Awaitable[None]],
    **kwargs: Any,
) -> AsyncIterator[None]:
    """:func:`follow` in a task for the duration of the block; re-raises what the task raised."""
    task = asyncio.create_task(follow(list_call, *args, on_event=on_event, **kwargs))
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
