"""Building blocks for the PodTransitionRule integration tests: pods in a stage, rule objects,
reading status, annotations and Events back, and real rule webhook servers on 127.0.0.1.

The webhook servers run on the test's event loop (aiohttp), so the operator thread reaches them
over real TCP (and TLS, with certificates made here with ``cryptography``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from aiohttp import web
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle import labels as lc
from lifecycle.rules.models import DETAIL_ANNOTATION_PREFIX
from rollouts.localcluster.building import binaries_for, load_versions
from rollouts.operator.certificates import generate_pem
from tests.cluster_support import eventually

GROUP = "apps.kusionstack.io"
VERSION = "v1alpha1"
PLURAL = "podtransitionrules"
OP_ID = "x"
#: How long a PTR create is retried while the admission webhook cannot be reached.
WEBHOOK_GRACE_SECONDS = 15.0


def _webhook_unreachable(error: ApiException) -> bool:
    return error.status == 500 and "failed calling webhook" in str(error.body)


def stage_labels(stage: str | None, *, available: bool = False) -> dict[str, str]:
    """Lifecycle labels that put a pod in ``stage`` (PreCheck, PostCheck, or None for idle)."""
    found: dict[str, str] = {lc.CONTROL: lc.CONTROL_VALUE}
    if available:
        found[lc.SERVICE_AVAILABLE] = "1"
    if stage == "PreCheck":
        found |= {
            f"{lc.OPERATING}/{OP_ID}": "1",
            f"{lc.OPERATION_TYPE}/{OP_ID}": "update",
            f"{lc.PRE_CHECK}/{OP_ID}": "1",
        }
    elif stage == "PostCheck":
        found |= {
            f"{lc.OPERATING}/{OP_ID}": "1",
            f"{lc.DONE_OPERATION_TYPE}/{OP_ID}": "update",
            f"{lc.OPERATED}/{OP_ID}": "1",
            f"{lc.POST_CHECK}/{OP_ID}": "1",
        }
    return found


def pod_manifest(
    name: str,
    *,
    app: str = "foo",
    stage: str | None = "PreCheck",
    available: bool = False,
    extra_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": app, **stage_labels(stage, available=available), **(extra_labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
    }


def rule_manifest(name: str, rules: list[dict[str, Any]], *, app: str = "foo") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodTransitionRule",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": app}}, "rules": rules},
    }


def webhook_rule(
    name: str,
    url: str,
    *,
    failure_policy: str = "Fail",
    poll: dict[str, Any] | None = None,
    ca_bundle: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
    stage: str = "PreCheck",
) -> dict[str, Any]:
    client_config: dict[str, Any] = {"url": url}
    if poll is not None:
        client_config["poll"] = poll
    if ca_bundle is not None:
        client_config["caBundle"] = ca_bundle
    hook: dict[str, Any] = {"clientConfig": client_config, "failurePolicy": failure_policy}
    if parameters:
        hook["parameters"] = parameters
    return {"name": name, "stage": stage, "webhook": hook}


@dataclass
class Cluster:
    """The API calls the tests make, in one namespace."""

    api: client.ApiClient
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    async def create_pods(self, *pods: dict[str, Any]) -> None:
        """Create the pods and wait until kwok runs them all.

        By then the operator has indexed every one of them, before the test creates a rule: a
        rule seeing them arrive one by one would approve them in arrival order (approvals stick).
        """
        await asyncio.gather(
            *(self.core.create_namespaced_pod(self.namespace, cast(Any, pod)) for pod in pods)
        )
        names = {pod["metadata"]["name"] for pod in pods}

        async def running() -> bool:
            listed = await self.core.list_namespaced_pod(self.namespace)
            phases = {p.metadata.name: p.status.phase for p in listed.items}
            return all(phases.get(name) == "Running" for name in names)

        await eventually(running, what=f"pods {sorted(names)} running")

    async def create_rule(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a PTR; retried while the API server cannot reach the operator's webhook yet.

        Right after an operator (re)start the webhook configuration may still name the port of
        the previous run: kopf rewrites it in the background after signalling ready.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WEBHOOK_GRACE_SECONDS
        while True:
            try:
                created = await self.objects.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, manifest
                )
            except ApiException as error:
                if not _webhook_unreachable(error) or loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
                continue
            return dict(created)

    async def delete_rule(self, name: str) -> None:
        await self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    async def read_rule(self, name: str) -> dict[str, Any]:
        return dict(
            await self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        )

    async def status(self, name: str) -> dict[str, Any]:
        return dict((await self.read_rule(name)).get("status") or {})

    async def details(self, name: str) -> dict[str, dict[str, Any]]:
        """The PTR's status details by pod name, once it observed its current generation."""
        return _details_of(await self.read_rule(name))

    @contextlib.asynccontextmanager
    async def every_details(self, name: str) -> AsyncIterator[list[dict[str, dict[str, Any]]]]:
        """:meth:`details` of every version of the PTR written while inside (a watch, not
        samples: a state that lasts a few milliseconds is seen too)."""
        seen: list[dict[str, dict[str, Any]]] = []
        listed = await self.read_rule(name)
        seen.append(_details_of(listed))
        stream = watch.Watch()

        async def follow() -> None:
            async for event in stream.stream(
                self.objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=600,
            ):
                seen.append(_details_of(event["object"]))

        task = asyncio.ensure_future(follow())
        try:
            yield seen
        finally:
            stream.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def passed(self, name: str) -> set[str]:
        return {pod for pod, detail in (await self.details(name)).items() if detail["passed"]}

    async def label_pod(self, pod: str, labels: Mapping[str, str | None]) -> None:
        await self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"labels": dict(labels)}})

    async def annotations(self, ptr: str) -> dict[str, dict[str, Any] | None]:
        """The detail annotation of ``ptr`` on every pod of the namespace (None where absent)."""
        pods = await self.core.list_namespaced_pod(self.namespace)
        key = f"{DETAIL_ANNOTATION_PREFIX}/{ptr}"
        found: dict[str, dict[str, Any] | None] = {}
        for pod in pods.items:
            raw = (pod.metadata.annotations or {}).get(key)
            found[pod.metadata.name] = json.loads(raw) if raw is not None else None
        return found

    async def events(self, *, kind: str, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the Events about one object."""
        listed = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
        )
        return [(e.type, e.reason, e.message or "") for e in listed.items]


async def admission_error(cluster: Cluster, manifest: dict[str, Any]) -> str:
    """The message the API server refuses a PTR with (fails the test when it is accepted)."""
    try:
        await cluster.create_rule(manifest)
    except ApiException as error:
        assert error.status in (400, 422), error
        return str(json.loads(error.body or "{}").get("message", error.body))
    await cluster.delete_rule(manifest["metadata"]["name"])
    raise AssertionError(f"accepted: {json.dumps(manifest['spec'])}")


# -- webhook servers ------------------------------------------------------------------------------

Handler = Callable[[web.Request, dict[str, Any] | None], Awaitable[web.StreamResponse] | web.StreamResponse]


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class HookServer:
    """A rule webhook server: routes are ``(method, path) -> handler``; every request is recorded."""

    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    base: str = ""
    _runner: web.AppRunner | None = None

    def requests(self, method: str, path: str) -> list[Received]:
        return [r for r in self.received if r.method == method and r.path == path]

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.received.append(Received(request.method, request.path, dict(request.query), body))
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            return web.Response(status=404, text="no such route")
        answer = handler(request, body)
        if asyncio.iscoroutine(answer):
            answer = await answer
        assert isinstance(answer, web.StreamResponse)
        return answer

    async def start(self, *, tls: ssl.SSLContext | None = None) -> HookServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass(frozen=True)
class Tls:
    """A serving context for 127.0.0.1 and the caBundle that verifies it."""

    context: ssl.SSLContext
    ca_bundle: str


def make_tls() -> Tls:
    ca, cert, key = generate_pem(names=["127.0.0.1"])
    directory = Path(tempfile.mkdtemp(prefix="ptr-webhook-tls-"))
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    return Tls(context=context, ca_bundle=base64.b64encode(ca).decode())


def kubectl_binary() -> str:
    """The kubectl built with the local control plane, else one on PATH."""
    built = binaries_for(load_versions()).kubectl
    if built.exists():
        return str(built)
    found = shutil.which("kubectl")
    assert found, "no kubectl: run `rollouts cluster build`"
    return found


def answer(document: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(document, status=status)


def _details_of(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return {}
    return {detail["name"]: detail for detail in status.get("details") or []}
