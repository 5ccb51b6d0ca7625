"""The install manifests: what ``rollouts manifests`` renders, checked without a cluster.

The server-side dry-run and the RBAC coverage of a real run are in
tests/integration/test_manifests.py; here: every object parses and is placed right, the flags
land where they should, the TLS material holds together, the webhooks are the ones kopf would
register, the Dockerfile's entrypoint exists, and the ClusterRole grants what the kopf registry
and the source need (tests/rbac_support.py derives both from the code).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from rollouts import crdgen
from rollouts.cli import build_parser, main
from rollouts.manifests import (
    ENTRYPOINT,
    NAMES,
    OPERATOR_ARGS,
    TLS_CHECKSUM_ANNOTATION,
    dns_names,
    rbac_allows,
    render_manifests,
    render_objects,
)
from rollouts.operator.running import DEFAULT_CERT_DIR, OperatorConfig
from tests import rbac_support
from tests.rbac_support import Need

ROOT = Path(__file__).resolve().parents[3]

CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}

VARIANTS = [
    pytest.param({}, id="defaults"),
    pytest.param(
        {"namespace": "ops-rollouts", "image": "registry.example.com/team/rollouts:1.2.3"}, id="flags"
    ),
    pytest.param({"cert_manager": True}, id="cert-manager"),
    pytest.param({"namespace": "ops", "cert_manager": True}, id="cert-manager-namespace"),
]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(objects, kind)
    return found


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(found)


@pytest.mark.parametrize("options", VARIANTS)
def test_every_object_parses_and_sits_in_the_namespace(options: dict[str, Any]) -> None:
    namespace = options.get("namespace", "rollouts-system")
    objects = render_objects(**options)
    documents = list(yaml.load_all(render_manifests(**options), Loader=yaml.CSafeLoader))
    assert len(objects) == len(documents), "documents without an object"
    seen = set()
    for obj in objects:
        assert set(obj) >= {"apiVersion", "kind", "metadata"}, obj
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace"), meta["name"])
        assert key not in seen, f"{key} twice"
        seen.add(key)
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, key
        else:
            assert meta["namespace"] == namespace, key
    assert one(objects, "Namespace")["metadata"]["name"] == namespace


def test_order_puts_what_others_need_first() -> None:
    kinds = [o["kind"] for o in render_objects()]
    assert kinds[0] == "Namespace"
    assert kinds.index("CustomResourceDefinition") < kinds.index("ServiceAccount")
    assert kinds.index("Secret") < kinds.index("Deployment"), "the Deployment mounts the Secret"
    assert kinds[-2:] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


def test_crds_are_the_generators_and_kopfs_peering_crd() -> None:
    crds = by_kind(render_objects(), "CustomResourceDefinition")
    ours = [c for c in crds if c["spec"]["group"] != "kopf.dev"]
    assert ours == crdgen.crd_objects()
    (peering,) = [c for c in crds if c["spec"]["group"] == "kopf.dev"]
    assert peering["metadata"]["name"] == "clusterkopfpeerings.kopf.dev"
    assert peering["spec"]["scope"] == "Cluster"


@pytest.mark.parametrize(
    ("namespace", "image"),
    [
        pytest.param("rollouts-system", "rollouts:0.1.0", id="defaults"),
        pytest.param("team-a", "registry.example.com:5000/x/rollouts@sha256:" + "a" * 64, id="digest"),
    ],
)
def test_namespace_and_image_flags_reach_every_reference(namespace: str, image: str) -> None:
    objects = render_objects(namespace=namespace, image=image)
    assert container(objects)["image"] == image
    (subject,) = one(objects, "ClusterRoleBinding")["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": NAMES.service_account, "namespace": namespace}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAMES.service_account
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(objects, kind)["webhooks"]:
            service = webhook["clientConfig"]["service"]
            assert (service["name"], service["namespace"], service["port"]) == (NAMES.service, namespace, 443)
    cert = x509.load_pem_x509_certificate(base64.b64decode(one(objects, "Secret")["data"]["tls.crt"]))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{NAMES.service}.{namespace}.svc" in san.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"namespace": "Rollouts"}, "not a valid namespace name", id="uppercase"),
        pytest.param({"namespace": "a" * 64}, "not a valid namespace name", id="too-long"),
        pytest.param({"namespace": "-x"}, "not a valid namespace name", id="leading-dash"),
        pytest.param({"image": ""}, "not an image reference", id="empty-image"),
        pytest.param({"image": "a b"}, "not an image reference", id="space-in-image"),
    ],
)
def test_bad_flags_are_refused_with_the_reason(
    options: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["manifests", *(f"--{key}={value}" for key, value in options.items())]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and captured.err.startswith("rollouts: ")


def test_cli_prints_the_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["manifests", "--namespace", "ops", "--image", "example.com/rollouts:2", "--cert-manager"]) == 0
    )
    objects = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    assert one(objects, "Deployment")["metadata"]["namespace"] == "ops"
    assert container(objects)["image"] == "example.com/rollouts:2"
    assert by_kind(objects, "Certificate")


# -- TLS -------------------------------------------------------------------------------------------


def test_self_signed_tls_holds_together() -> None:
    objects = render_objects(namespace="ops")
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == dns_names("ops")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert "annotations" not in configuration["metadata"]
        assert {w["clientConfig"]["caBundle"] for w in configuration["webhooks"]} == {
            secret["data"]["ca.crt"]
        }
    # A new certificate changes the pod template: applying it rolls the pods onto it.
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations[TLS_CHECKSUM_ANNOTATION] == hashlib.sha256(data["tls.crt"]).hexdigest()[:16]


def test_each_render_makes_a_new_ca() -> None:
    first, second = (one(render_objects(), "Secret")["data"]["ca.crt"] for _ in range(2))
    assert first != second


def test_cert_manager_issues_the_secret_the_deployment_mounts_and_injects_the_ca() -> None:
    objects = render_objects(namespace="ops", cert_manager=True)
    assert not by_kind(objects, "Secret"), "no key material in the manifests"
    certificates = {c["metadata"]["name"]: c for c in by_kind(objects, "Certificate")}
    issuers = {i["metadata"]["name"]: i for i in by_kind(objects, "Issuer")}
    assert {c["apiVersion"] for c in [*certificates.values(), *issuers.values()]} == {"cert-manager.io/v1"}
    ca, serving = certificates[NAMES.ca], certificates[NAMES.certificate]
    assert ca["spec"]["isCA"] is True
    assert issuers[ca["spec"]["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}
    assert issuers[serving["spec"]["issuerRef"]["name"]]["spec"] == {
        "ca": {"secretName": ca["spec"]["secretName"]}
    }
    assert serving["spec"]["dnsNames"] == dns_names("ops")
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": serving["spec"]["secretName"]}} in volumes
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"ops/{NAMES.certificate}"
        }
        assert all("caBundle" not in w["clientConfig"] for w in configuration["webhooks"])
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert TLS_CHECKSUM_ANNOTATION not in annotations


# -- the Deployment --------------------------------------------------------------------------------


def test_deployment_runs_two_peered_replicas_with_probes_and_requests() -> None:
    objects = render_objects()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert (
        pod["metadata"]["labels"] | deployment["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    )
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    c = container(objects)
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"webhook": OperatorConfig.webhook_port, "health": 8080}
    assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == (
        "/healthz",
        "health",
    )
    assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == (
        "/readyz",
        "health",
    )
    assert set(c["resources"]["requests"]) == {"cpu", "memory"}
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "webhook-tls"]
    assert mount["mountPath"] == str(DEFAULT_CERT_DIR)
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}


def test_operator_config_of_the_deployment() -> None:
    """What the installed operator runs with, parsed by ``rollouts run``'s own parser."""
    cfg = rbac_support.operator_config(render_objects())
    assert cfg.in_cluster and not cfg.install_crds and not cfg.manage_webhooks
    assert cfg.peering == "rollouts"
    assert cfg.namespace is None, "the installed operator watches every namespace"
    assert cfg.service_name == NAMES.service


def test_service_exposes_webhooks_and_metrics() -> None:
    objects = render_objects()
    service = one(objects, "Service")
    assert service["metadata"]["name"] == OperatorConfig.service_name
    assert service["spec"]["selector"] == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"webhook": (443, "webhook"), "metrics": (8080, "health")}
    annotations = service["metadata"]["annotations"]
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("8080", "/metrics")


# -- the Dockerfile --------------------------------------------------------------------------------


def dockerfile_instruction(name: str) -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return list(json.loads(line.removeprefix(f"{name} ")))


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_dockerfile_entrypoint_is_the_manifests_and_its_flags_exist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tuple(dockerfile_instruction("ENTRYPOINT")) == ENTRYPOINT
    flags = {arg for arg in (*ENTRYPOINT, *OPERATOR_ARGS) if arg.startswith("--")}
    assert len(flags) == 5
    text = run_help(capsys)
    assert [flag for flag in sorted(flags) if not re.search(rf"(^|\s){flag}\b", text)] == []
    # And they parse: the Deployment's command line is one `rollouts run` accepts.
    build_parser().parse_args([*ENTRYPOINT[1:], *OPERATOR_ARGS])
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M), "the runtime stage is python:3.11-slim"
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    assert user == "10001:10001"
    security = one(render_objects(), "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert f"{security['runAsUser']}:{security['runAsGroup']}" == user


def test_package_data_ships_the_templates() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"templates/*.j2"' in pyproject
    templates = sorted(p.name for p in (ROOT / "rollouts" / "templates").glob("*.j2"))
    from rollouts.manifests import TEMPLATES

    assert templates == sorted(TEMPLATES)


# -- webhooks --------------------------------------------------------------------------------------


def kopf_webhooks(reason: str) -> list[dict[str, Any]]:
    """What kopf would register for the installed operator's handlers, pointing at the Service."""
    from kopf._core.engines.admission import build_webhooks

    cfg = rbac_support.operator_config(render_objects())
    registry, _ = rbac_support.installed_registry(cfg)
    handlers = [h for h in registry._webhooks.get_all_handlers() if h.reason.value == reason]
    client_config = {
        "service": {"name": NAMES.service, "namespace": "rollouts-system", "port": 443, "path": ""}
    }
    built = build_webhooks(
        handlers,
        resources=rbac_support.catalogue(),
        name_suffix="rollouts.kusionstack.io",
        client_config=client_config,  # type: ignore[arg-type]
    )
    return [{k: v for k, v in w.items() if v is not None} for w in built]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        pytest.param("MutatingWebhookConfiguration", "mutating", id="mutating"),
        pytest.param("ValidatingWebhookConfiguration", "validating", id="validating"),
    ],
)
def test_webhooks_are_the_ones_kopf_would_register(kind: str, reason: str) -> None:
    rendered = one(render_objects(cert_manager=True), kind)["webhooks"]
    assert sorted(rendered, key=lambda w: w["name"]) == sorted(kopf_webhooks(reason), key=lambda w: w["name"])


def test_pod_webhooks_only_see_control_pods() -> None:
    objects = render_objects()
    selector = {"matchExpressions": [{"key": "kusionstack.io/control", "operator": "In", "values": ["true"]}]}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(objects, kind)["webhooks"]:
            if any("pods" in r.split("/")[0] for rule in webhook["rules"] for r in rule["resources"]):
                assert webhook["objectSelector"] == selector, webhook["name"]


# -- RBAC ------------------------------------------------------------------------------------------


def rule(groups: str, resources: str, verbs: str, names: str = "") -> dict[str, Any]:
    """An RBAC rule from comma-separated lists (``""`` for the core group)."""
    found: dict[str, Any] = {
        "apiGroups": groups.split(","),
        "resources": resources.split(","),
        "verbs": verbs.split(","),
    }
    if names:
        found["resourceNames"] = names.split(",")
    return found


PEERINGS = "clusterkopfpeerings"


@pytest.mark.parametrize(
    ("given", "verb", "group", "resource", "name", "allowed"),
    [
        pytest.param(rule("", "pods", "get"), "get", "", "pods", None, True, id="exact"),
        pytest.param(rule("", "pods", "get"), "list", "", "pods", None, False, id="other-verb"),
        pytest.param(rule("apps", "pods", "get"), "get", "", "pods", None, False, id="other-group"),
        pytest.param(
            rule("", "pods", "patch"), "patch", "", "pods/status", None, False, id="not-subresource"
        ),
        pytest.param(
            rule("", "pods/status", "patch"), "patch", "", "pods/status", None, True, id="subresource"
        ),
        pytest.param(rule("", "*/status", "patch"), "patch", "", "pods/status", None, True, id="star-sub"),
        pytest.param(rule("", "*/status", "patch"), "patch", "", "pods", None, False, id="star-sub-not-main"),
        pytest.param(rule("*", "*", "*"), "delete", "batch", "jobs", None, True, id="stars"),
        pytest.param(
            rule("kopf.dev", PEERINGS, "patch", "a"), "patch", "kopf.dev", PEERINGS, "a", True, id="named"
        ),
        pytest.param(
            rule("kopf.dev", PEERINGS, "patch", "a"), "patch", "kopf.dev", PEERINGS, "b", False, id="other"
        ),
        pytest.param(
            rule("kopf.dev", PEERINGS, "list", "a"), "list", "kopf.dev", PEERINGS, None, False, id="unnamed"
        ),
    ],
)
def test_rbac_rule_matching(
    given: Mapping[str, Any], verb: str, group: str, resource: str, name: str | None, allowed: bool
) -> None:
    assert rbac_allows([given], verb=verb, group=group, resource=resource, name=name) is allowed


def test_cluster_role_has_no_wildcards() -> None:
    for rule in rbac_support.cluster_role_rules(render_objects()):
        for key in ("apiGroups", "resources", "verbs"):
            assert not any("*" in value for value in rule[key]), rule


def granted(objects: list[dict[str, Any]], need: Need) -> bool:
    rules = rbac_support.cluster_role_rules(objects)
    return rbac_allows(rules, verb=need.verb, group=need.group, resource=need.resource, name=need.name)


def test_cluster_role_grants_what_the_kopf_registry_needs() -> None:
    objects = render_objects()
    needs = rbac_support.registry_needs(rbac_support.operator_config(objects))
    assert Need("watch", "", "pods") in needs  # not vacuous
    assert [n for n in sorted(needs) if not granted(objects, n)] == []


def test_cluster_role_grants_every_api_call_in_the_source() -> None:
    objects = render_objects()
    cfg = rbac_support.operator_config(objects)
    needs = rbac_support.installed_code_needs(cfg)
    assert Need("patch", "", "pods/status") in needs  # not vacuous
    missing = {n: where for n, where in needs.items() if not granted(objects, n)}
    assert missing == {}


#: Granted with no API call to show for it; the ClusterRole's comment says why.
JUSTIFIED = {Need("update", "apps.kusionstack.io", "collasets/finalizers")}


def grants(objects: list[dict[str, Any]]) -> set[Need]:
    """Every (verb, group, resource[, name]) the ClusterRole grants (it has no wildcards)."""
    return {
        Need(verb, group, resource, name)
        for rule in rbac_support.cluster_role_rules(objects)
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames") or [None]
    }


def test_cluster_role_grants_nothing_the_code_does_not_need() -> None:
    objects = render_objects()
    cfg = rbac_support.operator_config(objects)
    needed = rbac_support.registry_needs(cfg) | set(rbac_support.installed_code_needs(cfg)) | JUSTIFIED
    assert sorted(grants(objects) - needed) == []
