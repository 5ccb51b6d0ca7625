"""The operator's health and metrics server: ``/healthz``, ``/readyz`` and ``/metrics`` on ``--health-port``.

It runs on the operator's own event loop (aiohttp), next to kopf, from before kopf starts
until it stopped, so:

* ``/healthz`` (liveness) answers 200 whenever the loop runs: a loop blocked or dead
  answers nothing, and the kubelet restarts the pod;
* ``/readyz`` (readiness) answers 200 once kopf has run its startup handlers, every resource
  kopf indexes has been listed (kopf fills its indexes from that listing before any handler
  runs; the listing is seen in :data:`rollouts.apicalls.API_CALLS`), and the admission
  webhook server accepts TLS connections; otherwise 503 with what is missing, one per line.
  The webhook Service only sends admission requests to a ready operator, so no webhook is
  answered from empty indexes;
* ``/metrics``: the Prometheus text format of :mod:`rollouts.operator.metrics`.

The install manifests probe exactly these paths on port 8080 (``rollouts run
--health-port``, 0 turns the server off).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from rollouts.apicalls import API_CALLS, ApiCalls
from rollouts.operator import metrics as metric_families

#: Seconds a readiness probe waits for the webhook server to accept a connection.
CONNECT_TIMEOUT: Final = 1.0

Flag = asyncio.Event | threading.Event


@dataclass(frozen=True)
class Resource:
    """A resource kopf indexes, as :func:`rollouts.apicalls.classify` names it."""

    group: str
    resource: str


def indexed_resources(registry: Any) -> frozenset[Resource]:
    """The resources of a kopf registry's index handlers (pods, jobs, our kinds ...)."""
    found = set()
    for handler in registry._indexing.get_all_handlers():
        selector = handler.selector
        name = selector.plural or selector.any_name
        if isinstance(name, str):
            found.add(Resource(group=selector.group or "", resource=name))
    return frozenset(found)


class Readiness:
    """What ``/readyz`` checks; built before kopf starts so its API listings are all seen."""

    def __init__(
        self,
        *,
        kopf_ready: Flag,
        resources: Iterable[Resource],
        webhook: tuple[str, int] | None,
        calls: ApiCalls = API_CALLS,
    ) -> None:
        self.kopf_ready = kopf_ready
        self.resources = frozenset(resources)
        self.webhook = webhook
        self.calls = calls
        self._baseline = self._listings()

    def _listings(self) -> dict[Resource, int]:
        counts: dict[Resource, int] = {}
        for key, value in self.calls.snapshot().items():
            if key.verb == "list" and key.code == "200":
                resource = Resource(group=key.group, resource=key.resource)
                counts[resource] = counts.get(resource, 0) + value
        return counts

    def unlisted(self) -> list[Resource]:
        """Indexed resources not listed successfully since this run began."""
        now = self._listings()
        return sorted(
            (r for r in self.resources if now.get(r, 0) <= self._baseline.get(r, 0)),
            key=lambda r: (r.group, r.resource),
        )

    async def problems(self) -> list[str]:
        """Why the operator is not ready; empty when it is."""
        found: list[str] = []
        if not self.kopf_ready.is_set():
            found.append("kopf has not started yet (startup handlers running)")
        unlisted = self.unlisted()
        if unlisted:
            names = ", ".join(f"{r.resource}.{r.group}" if r.group else r.resource for r in unlisted)
            found.append(f"indexes not filled yet: {names} not listed")
        if self.webhook is not None and not await self._accepts(*self.webhook):
            host, port = self.webhook
            found.append(f"admission webhook server not listening on {host}:{port}")
        return found

    async def _accepts(self, host: str, port: int) -> bool:
        """Whether a TLS connection to the webhook server completes (its handshake included).

        A bare TCP connect would do, but an aborted handshake leaves the server's side of the
        connection to the garbage collector; a full handshake and a clean close do not.
        """
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # only asks "is it there"; nothing is sent
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError, ssl.SSLError):
            return False
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
        return True


def build_app(readiness: Readiness, *, metrics: Callable[[], bytes] | None = None) -> web.Application:
    render = metrics or metric_families.render

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problems = await readiness.problems()
        if problems:
            return web.Response(status=503, text="not ready:\n" + "".join(f"- {p}\n" for p in problems))
        return web.Response(text="ready\n")

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app


@contextlib.asynccontextmanager
async def serving(*, host: str, port: int, readiness: Readiness) -> AsyncIterator[None]:
    """Serve the three endpoints while the block runs (nothing when ``port`` is 0)."""
    if port == 0:
        yield
        return
    runner = web.AppRunner(build_app(readiness), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            from rollouts.operator.running import StartupError

            if e.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"health port {host}:{port} is already in use: stop the process holding it "
                    "or pass --health-port (0 turns the health server off)"
                ) from e
            raise StartupError(f"cannot serve health checks on {host}:{port}: {e.strerror}") from e
        yield
    finally:
        await runner.cleanup()
