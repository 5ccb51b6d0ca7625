"""Several replicas of the operator: kopf peering picks the one that works, the others stand by.

The install manifests run two replicas. kopf's peering (``--peering NAME``: a
``ClusterKopfPeering`` object, or a ``KopfPeering`` with ``--namespace``, whose status lists
every replica with a priority and a keep-alive) pauses every replica but the live one with
the highest priority. A paused replica closes its watches, so its handlers, daemons and
indexes stop; it resumes when the working replica leaves the status (a clean exit) or its
keep-alive lapses (``LIFETIME_SECONDS`` after a crash). Three things kopf leaves to us:

* **Priorities.** :func:`priority_at` makes the oldest replica win: a replica started later
  gets a lower priority, so a rolling update does not move the work back and forth, and a
  random tail keeps two replicas started in the same millisecond from tying (kopf pauses
  every replica of a tie).
* **Admission webhooks.** kopf's webhook server goes on answering while its replica is
  paused, with indexes frozen at the pause (empty in a replica that never worked). The pure
  webhooks (label validation, the CRDs' checks and defaults) may be answered by any
  replica, so the Service spreads them over both. The pod *mutating* webhooks read the
  ``transition_rules`` index: a standby must not decide there. :class:`GatedWebhookServer`
  lets such a write through unchanged (as their failurePolicy Ignore would when the
  operator is down) and the working replica's controller takes the step instead.
* **Readiness.** ``/readyz`` waits for kopf's listings, which a standby never makes, and a
  Deployment whose replicas are never all ready cannot roll: :class:`StandbyReadiness` makes
  a standby ready once kopf started and its webhook server listens.

Whether this replica works is read from the peering object with kopf's own rule
(:func:`works`), polled every ``POLL_SECONDS``. The gate opens only once a handler of ours
has seen an event of the peering object since: kopf runs handlers only while it works and
once its indexes are filled, so that event proves the indexes are live again. The working
replica's own keep-alive produces such an event at least every ``LIFETIME_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts.operator import health

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
CLUSTER_PEERINGS = "clusterkopfpeerings"
NAMESPACED_PEERINGS = "kopfpeerings"

#: How long a replica's keep-alive counts (kopf's default is 60 s): the failover time after a crash.
LIFETIME_SECONDS = 30
POLL_SECONDS = 2.0
#: kopf's assumption for a peer that does not say its lifetime.
DEFAULT_PEER_LIFETIME = 60

#: Webhooks whose answers read kopf indexes (:mod:`rollouts.operator.handlers.lifecycle`).
INDEXED_WEBHOOKS = frozenset({"podopslifecycle-mutate", "podopslifecycle-mutate-status"})

log = logging.getLogger("rollouts.peering")


def priority_at(start_ns: int, tail: int) -> int:
    """The peering priority of a replica started at ``start_ns``: older is higher; ``tail`` in [0, 1000)."""
    return -((start_ns // 1_000_000) * 1000 + tail)


def _lastseen(raw: Any, now: datetime) -> datetime:
    if not isinstance(raw, str):
        return now  # kopf's reading of a peer without a time: seen just now
    seen = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return seen if seen.tzinfo else seen.replace(tzinfo=UTC)


def works(status: Mapping[str, Any] | None, *, identity: str, priority: int, now: datetime) -> bool:
    """kopf's peering rule: a replica works unless another live peer has the same or a higher priority.

    ``status`` is the peering object's status (peer identity -> priority, lifetime, lastseen);
    None when the object is missing, in which case kopf keeps every replica paused.
    """
    if status is None:
        return False
    for peer, info in status.items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        lifetime = timedelta(seconds=int(info.get("lifetime", DEFAULT_PEER_LIFETIME)))
        if _lastseen(info.get("lastseen"), now) + lifetime <= now:
            continue  # dead: kopf ignores it (and cleans it up)
        if int(info.get("priority", 0)) >= priority:
            return False
    return True


class Standby:
    """This replica's view of the peering: whether it works and its indexes are live."""

    def __init__(self, *, name: str, namespace: str | None, identity: str, priority: int) -> None:
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.priority = priority
        self.working = False
        self._seen_since_working = False

    @property
    def serves_indexed_webhooks(self) -> bool:
        return self.working and self._seen_since_working

    def observe(self, status: Mapping[str, Any] | None, *, now: datetime) -> None:
        working = works(status, identity=self.identity, priority=self.priority, now=now)
        if working != self.working:
            log.info("peering %s: this replica %s", self.name, "works" if working else "stands by")
        self.working = working
        if not working:
            self._seen_since_working = False

    def peering_event_handled(self) -> None:
        """A handler saw the peering object: kopf works here and its indexes are filled."""
        if self.working:
            self._seen_since_working = True

    async def read_status(self, api: client.ApiClient) -> Mapping[str, Any] | None:
        objects = client.CustomObjectsApi(api)
        try:
            if self.namespace is None:
                obj = await objects.get_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, CLUSTER_PEERINGS, self.name
                )
            else:
                obj = await objects.get_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, self.namespace, NAMESPACED_PEERINGS, self.name
                )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        status = obj.get("status")
        return status if isinstance(status, Mapping) else {}

    async def ensure_object(self, api: client.ApiClient) -> None:
        """Create the peering object when it is missing (kopf only patches it)."""
        objects = client.CustomObjectsApi(api)
        kind = "ClusterKopfPeering" if self.namespace is None else "KopfPeering"
        body = {
            "apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}",
            "kind": kind,
            "metadata": {"name": self.name},
        }
        try:
            if self.namespace is None:
                await objects.create_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, CLUSTER_PEERINGS, body
                )
            else:
                await objects.create_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, self.namespace, NAMESPACED_PEERINGS, body
                )
        except ApiException as e:
            if e.status == 409:
                return  # there already: the usual case
            if e.status == 404:
                log.error(
                    "peering %s: kopf's peering CRD is not installed; every replica stays paused", self.name
                )
                return
            raise
        log.info("peering %s: created the peering object", self.name)

    async def poll(self, api: client.ApiClient, *, interval: float = POLL_SECONDS) -> None:
        while True:
            try:
                self.observe(await self.read_status(api), now=datetime.now(UTC))
            except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as e:
                # Unknown is not working: the gate closes until the object can be read again.
                log.warning("peering %s: cannot read the peering object: %s", self.name, e)
                self.observe(None, now=datetime.now(UTC))
            await asyncio.sleep(interval)


def allow_unchanged(request: Mapping[str, Any]) -> dict[str, Any]:
    """An AdmissionReview answer that admits the object as it is (what kopf answers with no patch)."""
    return {
        "apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
        "kind": request.get("kind", "AdmissionReview"),
        "response": {"uid": (request.get("request") or {}).get("uid", ""), "allowed": True},
    }


class GatedWebhookServer:
    """Wraps a kopf webhook server: a standby admits index-reading webhooks' objects unchanged."""

    def __init__(self, server: Any, standby: Standby) -> None:
        self.server = server
        self.standby = standby

    def __call__(self, fn: Any) -> Any:
        standby = self.standby

        async def gated(request: Mapping[str, Any], *, webhook: str | None = None, **kwargs: Any) -> Any:
            if webhook in INDEXED_WEBHOOKS and not standby.serves_indexed_webhooks:
                return allow_unchanged(request)
            return await fn(request, webhook=webhook, **kwargs)

        return self.server(gated)


class StandbyReadiness(health.Readiness):
    """``/readyz`` under peering: the working replica's checks, or a standby's.

    A standby lists nothing (kopf paused its watches), so the index check would keep it unready
    for good, and a Deployment cannot roll two replicas of which only one is ever ready: a
    standby is ready once kopf started and its webhook server listens. Its index-reading
    webhooks are gated (:class:`GatedWebhookServer`), so no answer comes from empty indexes.
    """

    def __init__(self, working: health.Readiness, standby: Standby) -> None:
        super().__init__(
            kopf_ready=working.kopf_ready, resources=(), webhook=working.webhook, calls=working.calls
        )
        self.working = working
        self.standby = standby

    async def problems(self) -> list[str]:
        if self.standby.working:
            return await self.working.problems()
        return await super().problems()


def standby_readiness(readiness: health.Readiness, settings: kopf.OperatorSettings) -> health.Readiness:
    """Wrap the operator's readiness with the standby of the peering set up by :func:`enable`."""
    server = settings.admission.server
    if not isinstance(server, GatedWebhookServer):
        raise TypeError("standby_readiness() needs the settings peering.enable() set up")
    return StandbyReadiness(readiness, server.standby)


def own_identity() -> str:
    """kopf's identity of this replica: the pod name (``POD_ID``, from the downward API) when set."""
    return os.environ.get("POD_ID") or f"{socket.gethostname()}/{os.getpid()}/{random.randrange(1 << 30):x}"


def enable(
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    *,
    name: str,
    namespace: str | None,
    kubeconfig: str | None,
    in_cluster: bool,
) -> dict[str, Any]:
    """Set up peering named ``name``; returns the peering arguments of ``kopf.operator``."""
    standby = Standby(
        name=name,
        namespace=namespace,
        identity=own_identity(),
        priority=priority_at(time.time_ns(), random.randrange(1000)),
    )
    settings.peering.lifetime = LIFETIME_SECONDS
    settings.admission.server = GatedWebhookServer(settings.admission.server, standby)
    plural = CLUSTER_PEERINGS if namespace is None else NAMESPACED_PEERINGS

    def ours(name: str | None, **_: Any) -> bool:
        return name == standby.name

    @kopf.on.event(PEERING_GROUP, PEERING_VERSION, plural, id="peering-seen", when=ours, registry=registry)
    def peering_seen(**_: Any) -> None:
        standby.peering_event_handled()

    @kopf.on.startup(id="peering-poll", registry=registry)
    async def start_polling(memo: kopf.Memo, **_: Any) -> None:
        from rollouts import apicalls, kube

        api = await kube.new_api_client(kubeconfig, in_cluster=in_cluster)
        apicalls.instrument(api)
        memo["peering_api"] = api
        await standby.ensure_object(api)
        memo["peering_poll"] = asyncio.create_task(standby.poll(api), name=f"peering {name} poll")

    @kopf.on.cleanup(id="peering-stop", registry=registry)
    async def stop_polling(memo: kopf.Memo, **_: Any) -> None:
        task = memo.get("peering_poll")
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        api = memo.get("peering_api")
        if api is not None:
            await api.close()

    return {
        "standalone": False,
        "peering_name": name,
        "priority": standby.priority,
        "identity": standby.identity,
    }
