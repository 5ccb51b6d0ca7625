"""The cluster tiers' fixtures: a real control plane, the operator in-process, a namespace per test.

Registered once, in ``tests/conftest.py``, so the integration and examples tiers share one
cluster and one operator in a session (a second operator on the same cluster would act on
every object next to the first).

The cluster comes from ``rollouts cluster up`` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok built from source), once per session. ``ROLLOUTS_TEST_KUBECONFIG``
points the tests at an existing cluster instead; ``ROLLOUTS_KEEP_CLUSTER=1`` leaves the
local one running after the session for a faster next run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts import kube
from rollouts.localcluster.clusters import cluster_down, cluster_up
from rollouts.operator.running import OperatorConfig, OperatorThread, free_port

CLUSTER_NAME = os.environ.get("ROLLOUTS_TEST_CLUSTER", "rollouts-test")


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[Path]:
    existing = os.environ.get("ROLLOUTS_TEST_KUBECONFIG")
    if existing:
        yield Path(existing)
        return
    path = cluster_up(name=CLUSTER_NAME, nodes=3)
    yield path
    if os.environ.get("ROLLOUTS_KEEP_CLUSTER") != "1":
        cluster_down(name=CLUSTER_NAME)


@pytest.fixture(scope="session")
async def api(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    async with kube.api_session(str(kubeconfig)) as session:
        yield session


class Operator:
    """The operator under test; ``restart()`` stops it like SIGTERM and starts a new one."""

    def __init__(self, cfg: OperatorConfig) -> None:
        self.cfg = cfg
        self.thread: OperatorThread | None = None

    def start(self) -> None:
        self.thread = OperatorThread(self.cfg).start()

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def restart(self, **overrides: Any) -> None:
        """Stop (like SIGTERM) and start again, optionally with other settings."""
        self.stop()
        if overrides:
            self.cfg = dataclasses.replace(self.cfg, **overrides)
        self.start()


@pytest.fixture(scope="session")
def operator(kubeconfig: Path) -> Iterator[Operator]:
    op = Operator(OperatorConfig(kubeconfig=str(kubeconfig), webhook_port=free_port()))
    op.start()
    yield op
    op.stop()


@pytest.fixture
async def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    base = request.node.name.lower().replace("_", "-")
    name = f"t-{''.join(c for c in base if c.isalnum() or c == '-')[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(api)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    async def default_service_account() -> bool:
        # kube-controller-manager creates it asynchronously; pods are refused until it exists.
        try:
            await core.read_namespaced_service_account("default", name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    await eventually(default_service_account, what=f"service account default in {name}")
    yield name
    await core.delete_namespace(name)


async def eventually(
    probe: Callable[[], Any], *, timeout: float = 30, interval: float = 0.2, what: str = "condition"
) -> Any:
    """Poll ``probe`` (sync or async) until it returns a truthy value; fail with ``what`` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        result = probe()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        last = result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
