"""The install manifests against the real control plane.

* Everything ``rollouts manifests`` renders passes ``kubectl apply --server-side
  --dry-run=server`` (kwok would "run" the Deployment as a fake pod, so nothing is created:
  the dry run validates every object against the API server, schemas and admission included).
* RBAC coverage, for real: the rendered Namespace, ServiceAccount, ClusterRole and binding are
  applied, and the operator runs in-process *as that ServiceAccount* (a token from the
  TokenRequest API) with the Deployment's own flags, behind the rendered webhook
  configurations (pointed at 127.0.0.1), through a scenario touching every controller. A
  missing permission fails the run (a 403 in :data:`rollouts.apicalls.API_CALLS`); afterwards
  every call counted, every need derived from the kopf registry and from the source
  (tests/rbac_support.py) must be granted by the rendered rules and by the API server's own
  answer to ``kubectl auth can-i ... --as system:serviceaccount:NS:SA``.
* Peering: with an older live peer in the peering object the operator pauses (kopf says so)
  and its pod webhook admits pods unchanged, while the pure webhooks still answer.

The module stops the session's operator while it runs its own and starts it again after.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle import labels as L
from rollouts.apicalls import API_CALLS, CallKey
from rollouts.manifests import NAMES, PEERING_NAME, rbac_allows, render_manifests, render_objects
from rollouts.operator import peering
from rollouts.operator.running import OperatorConfig, OperatorThread, free_port
from tests import rbac_support
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import kubectl_binary
from tests.integration.test_collaset_support import Workload, hook, manifest, pod_template
from tests.rbac_support import Need

pytestmark = pytest.mark.integration

IMAGE = "registry.example.com/rollouts:test"
NEW = "example.com/app:2"
STEP = 120.0


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def kubectl_ok(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    result = kubectl(kubeconfig, *args, input=input)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def dump(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


# -- server-side dry run ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cert_manager", [pytest.param(False, id="self-signed"), pytest.param(True, id="cert-manager")]
)
def test_rendered_manifests_pass_a_server_side_dry_run(kubeconfig: Path, cert_manager: bool) -> None:
    namespace = unique("t-dry-run")
    documents = [
        d for d in yaml.safe_load_all(render_manifests(namespace=namespace, cert_manager=cert_manager)) if d
    ]
    # cert-manager's kinds exist only where cert-manager is installed (not on the local
    # cluster); the unit tests check those objects. Everything else goes to the API server.
    cert_manager_kinds = [d for d in documents if d["apiVersion"].startswith("cert-manager.io/")]
    assert [d["kind"] for d in cert_manager_kinds] == (
        ["Issuer", "Certificate", "Issuer", "Certificate"] if cert_manager else []
    )
    checked = [d for d in documents if d not in cert_manager_kinds]
    # A dry run creates nothing, so the namespace the other objects go to must exist for real.
    (namespace_doc,) = [d for d in checked if d["kind"] == "Namespace"]
    kubectl_ok(kubeconfig, "apply", "-f", "-", input=dump([namespace_doc]))
    try:
        # --force-conflicts: the session's operator may have applied our CRDs (field manager
        # "rollouts") before; a first install has no conflicts.
        out = kubectl_ok(
            kubeconfig,
            "apply", "--server-side", "--dry-run=server", "--force-conflicts",
            "--field-manager=rollouts-install", "-f", "-",
            input=dump(checked),
        )  # fmt: skip
        lines = [line for line in out.splitlines() if line.strip()]
        assert len(lines) == len(checked), out
        assert all(line.endswith("(server dry run)") for line in lines), out
        for kind in ("deployment", "service", "serviceaccount", "secret"):
            assert kubectl_ok(
                kubeconfig, "get", kind, "-n", namespace, "-o", "name", "--ignore-not-found"
            ) in (
                "",
                "serviceaccount/default\n",
            ), f"the dry run created a {kind}"
    finally:
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")


# -- the operator as its ServiceAccount ------------------------------------------------------------


@dataclass
class Installed:
    namespace: str
    objects: list[dict[str, Any]]
    cfg: OperatorConfig
    admin: Path
    sa_kubeconfig: Path

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{NAMES.service_account}"

    @property
    def rules(self) -> list[Mapping[str, Any]]:
        return rbac_support.cluster_role_rules(self.objects)


def token_kubeconfig(admin: Path, namespace: str, path: Path) -> Path:
    """A kubeconfig authenticating as the ServiceAccount with a bound token (TokenRequest API)."""
    token = kubectl_ok(
        admin, "create", "token", NAMES.service_account, "-n", namespace, "--duration=2h"
    ).strip()
    config = yaml.safe_load(admin.read_text())
    (cluster,) = config["clusters"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [
                    {"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}
                ],
                "current-context": "operator",
            }
        )
    )
    path.chmod(0o600)
    return path


def local_webhooks(objects: list[dict[str, Any]], *, port: int, ca: bytes) -> list[dict[str, Any]]:
    """The rendered webhook configurations, reaching the in-process operator instead of the Service."""
    found = []
    for obj in objects:
        if obj["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        obj = copy.deepcopy(obj)
        for webhook in obj["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
        found.append(obj)
    assert len(found) == 2
    return found


@pytest.fixture(scope="module")
def installed(
    kubeconfig: Path, operator: Operator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    namespace = unique("t-install")
    objects = render_objects(namespace=namespace, image=IMAGE)
    rbac = [
        o
        for o in objects
        if o["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    peering_crd = [o for o in objects if o["metadata"]["name"] == "clusterkopfpeerings.kopf.dev"]
    kubectl_ok(kubeconfig, "apply", "--server-side", "-f", "-", input=dump(rbac + peering_crd))
    kubectl_ok(kubeconfig, "wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev")
    directory = tmp_path_factory.mktemp("install")
    sa_kubeconfig = token_kubeconfig(kubeconfig, namespace, directory / "operator.kubeconfig")
    cfg = rbac_support.operator_config(
        objects,
        in_cluster=False,  # the process is no pod: a token kubeconfig instead of the mounted one
        kubeconfig=str(sa_kubeconfig),
        webhook_host="127.0.0.1",
        webhook_port=free_port(),
        health_port=0,  # no probe server in the test process (the Deployment's port may be taken)
        cert_dir=directory / "tls",
    )
    webhooks: list[dict[str, Any]] = []
    operator.stop()  # one operator at a time works on the cluster
    thread: OperatorThread | None = None
    try:
        API_CALLS.reset()
        thread = OperatorThread(cfg).start()
        webhooks = local_webhooks(
            objects, port=cfg.webhook_port, ca=(directory / "tls" / "ca.crt").read_bytes()
        )
        kubectl_ok(kubeconfig, "apply", "-f", "-", input=dump(webhooks))
        yield Installed(namespace, objects, cfg, kubeconfig, sa_kubeconfig)
    finally:
        if thread is not None:
            thread.stop()
        for obj in webhooks:
            kubectl(kubeconfig, "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
        for kind in ("clusterrolebinding", "clusterrole"):
            kubectl(kubeconfig, "delete", kind, NAMES.cluster_role, "--ignore-not-found")
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")
        os.environ["KUBECONFIG"] = str(kubeconfig)
        operator.start()


async def pod_webhook_answers(api: client.ApiClient, namespace: str) -> None:
    """Wait until the operator works and its pod webhook adds the readiness gate (peering settled)."""
    core = client.CoreV1Api(api)

    async def gated() -> bool:
        name = unique("probe")
        body: Any = {
            "metadata": {"name": name, "labels": {L.CONTROL: L.CONTROL_VALUE}},
            "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
        }
        try:
            pod = await core.create_namespaced_pod(namespace, body)
        except ApiException as e:
            if e.status == 500 and "failed calling webhook" in str(e.body):
                return False  # the webhook server is still starting
            raise
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        return any(g.condition_type == L.SERVICE_READY for g in pod.spec.readiness_gates or [])

    await eventually(gated, timeout=60, interval=0.5, what="the pod webhook of a working operator")


async def pods_gone(core: client.CoreV1Api, namespace: str, selector: str) -> bool:
    return not (await core.list_namespaced_pod(namespace, label_selector=selector)).items


async def run_scenario(api: client.ApiClient, namespace: str) -> None:
    """Every controller at work: rules, a CollaSet through scale, update with hooks, rollback, delete."""
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    await pod_webhook_answers(api, namespace)

    # A PodTransitionRule with a budget and a label check over the CollaSet's pods.
    rule = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": "gate"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "rules": [
                {"name": "budget", "availablePolicy": {"maxUnavailableValue": 1}},
                {"name": "labels", "labelCheck": {"requires": {"matchLabels": {"app": "web"}}}},
            ],
        },
    }
    await objects.create_namespaced_custom_object(
        "apps.kusionstack.io", "v1alpha1", namespace, "podtransitionrules", rule
    )

    # A CollaSet with hooks, a default budget rule (maxUnavailable) and a short history.
    web = Workload(api, namespace, "web")
    hooks = [hook("before", 0, retain="Never"), hook("after", "100%")]
    spec: dict[str, Any] = {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}, "historyLimit": 1}
    await web.create(manifest("web", replicas=3, lifecycleHooks=hooks, **spec))
    await web.settled(replicas=3, timeout=STEP)
    await web.scale(4)
    await web.settled(replicas=4, timeout=STEP)

    async def hooks_done() -> bool:
        status = await web.status()
        return status.get("hookPhase") == "Succeeded 2/2" and status.get("updatedRevision") != first

    first = (await web.status())["updatedRevision"]
    await web.set_image(NEW)
    await eventually(hooks_done, timeout=STEP, what="both hooks succeeded")
    await web.settled(replicas=4, image=NEW, timeout=STEP)
    # Back to the first template: the first revision is reused (a rollback), then a third one
    # pushes the oldest out of the history.
    await web.patch_spec({"template": pod_template("web", "example.com/app:1")})
    await web.settled(replicas=4, image="example.com/app:1", timeout=STEP)
    await web.patch_spec({"template": pod_template("web", "example.com/app:3")})
    await web.settled(replicas=4, image="example.com/app:3", timeout=STEP)
    # The default rule follows the budget, then goes with it.
    await web.patch_spec({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}})
    await web.scale(2)
    await web.settled(replicas=2, timeout=STEP)
    await web.patch_spec({"updateStrategy": {"rollingUpdate": {"maxUnavailable": None}}})

    async def default_rule_gone() -> bool:
        listed = await objects.list_namespaced_custom_object(
            "apps.kusionstack.io", "v1alpha1", namespace, "podtransitionrules"
        )
        return [r["metadata"]["name"] for r in listed["items"]] == ["gate"]

    await eventually(default_rule_gone, timeout=STEP, what="the default budget rule deleted")

    # A bare control pod: the lifecycle on its own, then deletion through the lifecycle.
    solo: Any = {
        "metadata": {"name": "solo", "labels": {L.CONTROL: L.CONTROL_VALUE, "app": "solo"}},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
    }
    await core.create_namespaced_pod(namespace, solo)

    async def solo_available() -> bool:
        pod = await core.read_namespaced_pod("solo", namespace)
        return L.SERVICE_AVAILABLE in (pod.metadata.labels or {})

    await eventually(solo_available, timeout=STEP, what="the bare pod service-available")
    await core.patch_namespaced_pod(
        "solo", namespace, {"metadata": {"labels": {L.TO_DELETE: str(time.time_ns())}}}
    )
    await eventually(lambda: pods_gone(core, namespace, "app=solo"), timeout=STEP, what="solo deleted")

    # Deleting the CollaSet: kopf releases its finalizer, the garbage collector takes the pods.
    await web.delete()

    async def collaset_gone() -> bool:
        try:
            await web.get()
        except ApiException as e:
            return e.status == 404
        return False

    await eventually(collaset_gone, timeout=STEP, what="the CollaSet gone")
    await eventually(lambda: pods_gone(core, namespace, "app=web"), timeout=STEP, what="its pods gone")


def seen_needs(calls: Mapping[CallKey, int]) -> set[Need]:
    """The counted calls as needs; requests for the peering object name it (its rules do)."""
    needs = set()
    for key in calls:
        if key.resource == "nonresource":
            continue
        name = (
            PEERING_NAME
            if key.resource == peering.CLUSTER_PEERINGS and key.verb in ("get", "patch")
            else None
        )
        needs.add(Need(key.verb, key.group, key.resource, name))
    return needs


def can_i(installed: Installed, need: Need) -> bool:
    resource = f"{need.resource.split('/')[0]}.{need.group}" if need.group else need.resource.split("/")[0]
    target = f"{resource}/{need.name}" if need.name else resource
    args = ["auth", "can-i", need.verb, target, "--as", installed.user, "--all-namespaces"]
    if "/" in need.resource:
        args.append(f"--subresource={need.resource.split('/')[1]}")
    result = kubectl(installed.admin, *args)
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


async def test_rbac_covers_every_call_of_the_operator_running_as_its_service_account(
    installed: Installed, api: client.ApiClient, namespace: str
) -> None:
    await run_scenario(api, namespace)
    await eventually(
        lambda: CallKey("create", "", "events", "201") in API_CALLS.snapshot(), what="kopf's Events posted"
    )
    calls = API_CALLS.snapshot()
    logging.getLogger(__name__).info(
        "API calls of the scenario: %s",
        json.dumps({f"{k.verb} {k.group}/{k.resource} {k.code}": v for k, v in sorted(calls.items())}),
    )
    seen = seen_needs(calls)
    # The operator authenticated as the ServiceAccount, so an RBAC denial is a real 403. A 403
    # can also mean "namespace being terminated": the operator is cluster-wide and may still act
    # on objects of earlier tests' namespaces (some stay Terminating on a shared test cluster).
    # A 403 the API server's authorizer would allow is that kind, not a missing permission.
    forbidden = {Need(k.verb, k.group, k.resource) for k in calls if k.code == "403"}
    assert [n for n in sorted(forbidden) if not can_i(installed, n)] == []
    # Not vacuous: the scenario reached every controller and kopf's machinery.
    for need in [
        Need("create", "", "pods"),
        Need("delete", "", "pods"),
        Need("patch", "", "pods/status"),
        Need("create", "batch", "jobs"),
        Need("delete", "batch", "jobs"),
        Need("create", "apps", "controllerrevisions"),
        Need("delete", "apps", "controllerrevisions"),
        Need("patch", "apps.kusionstack.io", "collasets/status"),
        Need("patch", "apps.kusionstack.io", "podtransitionrules/status"),
        Need("create", "apps.kusionstack.io", "podtransitionrules"),
        Need("delete", "apps.kusionstack.io", "podtransitionrules"),
        Need("patch", "apps.kusionstack.io", "collasets"),
        Need("watch", "apiextensions.k8s.io", "customresourcedefinitions"),
        Need("patch", peering.PEERING_GROUP, peering.CLUSTER_PEERINGS, PEERING_NAME),
        Need("create", "", "events"),
    ]:
        assert need in seen, f"the scenario made no {need}"

    # Granted by the rendered rules, matched as the RBAC authorizer does.
    def denied(needs: set[Need]) -> list[Need]:
        return sorted(
            n
            for n in needs
            if not rbac_allows(installed.rules, verb=n.verb, group=n.group, resource=n.resource, name=n.name)
        )

    assert denied(seen) == []
    static = rbac_support.registry_needs(installed.cfg) | set(
        rbac_support.installed_code_needs(installed.cfg)
    )
    assert denied(static) == []
    # And by the API server itself: the counted calls and the derived ones.
    assert [n for n in sorted(seen | static) if not can_i(installed, n)] == []
    # Discovery (non-resource URLs) comes from the cluster's system:discovery role.
    for url in ("/api", "/apis", "/apis/apps/v1", "/version"):
        assert (
            kubectl_ok(installed.admin, "auth", "can-i", "get", url, "--as", installed.user).strip() == "yes"
        )
    # The API server denies what the rules leave out (the check is not vacuous either).
    assert not can_i(installed, Need("patch", "apiextensions.k8s.io", "customresourcedefinitions"))
    assert not can_i(
        installed, Need("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations")
    )
    assert not can_i(installed, Need("get", "", "secrets"))


# -- peering ---------------------------------------------------------------------------------------


def set_peer(admin: Path, peer: str, info: Mapping[str, Any] | None) -> None:
    patch = json.dumps({"status": {peer: info}})
    kubectl_ok(
        admin,
        "patch",
        f"{peering.CLUSTER_PEERINGS}.{peering.PEERING_GROUP}",
        PEERING_NAME,
        "--type=merge",
        "-p",
        patch,
    )


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


async def test_an_older_peer_pauses_the_operator_and_its_indexed_webhooks(
    installed: Installed, api: client.ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    core = client.CoreV1Api(api)
    await pod_webhook_answers(api, namespace)
    older = {"priority": 0, "lifetime": 60, "lastseen": datetime.now(UTC).isoformat()}
    set_peer(installed.admin, "an-older-replica", older)
    try:
        await eventually(lambda: logged(caplog, "Pausing operations in favour of"), what="kopf pausing")

        async def admitted_unchanged() -> bool:
            name = unique("standby")
            body: Any = {
                "metadata": {"name": name, "labels": {L.CONTROL: L.CONTROL_VALUE}},
                "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
            }
            pod = await core.create_namespaced_pod(namespace, body)
            return not pod.spec.readiness_gates

        await eventually(
            admitted_unchanged, timeout=30, interval=0.5, what="the standby's pod webhook to pass"
        )
        # The pure webhooks still answer on a standby: inconsistent labels are refused.
        bad: Any = {
            "metadata": {"name": "bad", "labels": {L.CONTROL: L.CONTROL_VALUE, f"{L.OPERATED}/x": "1"}},
            "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
        }
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod(namespace, bad)
        assert refused.value.status == 422 and L.DONE_OPERATION_TYPE in str(refused.value.body)
    finally:
        set_peer(installed.admin, "an-older-replica", None)
    await eventually(lambda: logged(caplog, "Resuming operations after the pause"), what="kopf resuming")
    await pod_webhook_answers(api, namespace)
