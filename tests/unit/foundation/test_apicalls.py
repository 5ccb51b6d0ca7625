"""Request classification of the client-layer API call counter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from yarl import URL

from rollouts.apicalls import ApiCalls, CallKey, classify

BASE = "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        pytest.param("GET", "/api/v1/namespaces/ns/pods/web-1", ("get", "", "pods"), id="get-item"),
        pytest.param("GET", "/api/v1/namespaces/ns/pods", ("list", "", "pods"), id="list-namespaced"),
        pytest.param("GET", "/api/v1/pods?watch=true&resourceVersion=5", ("watch", "", "pods"), id="watch"),
        pytest.param("GET", "/api/v1/pods?watch=false", ("list", "", "pods"), id="watch-false-is-list"),
        pytest.param("PATCH", "/api/v1/namespaces/ns/pods/web-1", ("patch", "", "pods"), id="patch"),
        pytest.param(
            "PATCH",
            "/api/v1/namespaces/ns/pods/web-1/status",
            ("patch", "", "pods/status"),
            id="patch-status",
        ),
        pytest.param(
            "POST",
            "/apis/apps.kusionstack.io/v1alpha1/namespaces/ns/collasets",
            ("create", "apps.kusionstack.io", "collasets"),
            id="create-crd-object",
        ),
        pytest.param(
            "PUT",
            "/apis/apps/v1/namespaces/ns/controllerrevisions/web-1",
            ("update", "apps", "controllerrevisions"),
            id="update",
        ),
        pytest.param(
            "DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", ("delete", "batch", "jobs"), id="delete"
        ),
        pytest.param(
            "DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "", "pods"), id="deletecollection"
        ),
        pytest.param("GET", "/api/v1/namespaces/ns", ("get", "", "namespaces"), id="namespace-itself"),
        pytest.param("GET", "/api/v1/namespaces", ("list", "", "namespaces"), id="namespaces"),
        pytest.param("POST", "/api/v1/namespaces/ns/events", ("create", "", "events"), id="event"),
        pytest.param("GET", "/version", ("get", "", "nonresource"), id="non-resource"),
        pytest.param("GET", "/apis/apps/v1", ("get", "apps", "nonresource"), id="discovery"),
    ],
)
def test_classify(method: str, path: str, expected: tuple[str, str, str]) -> None:
    assert classify(method, URL(BASE + path)) == expected


def test_counts_add_up_and_reset() -> None:
    calls = ApiCalls()
    calls.record(CallKey("patch", "", "pods", "200"))
    calls.record(CallKey("patch", "", "pods", "200"))
    calls.record(CallKey("patch", "", "pods", "409"))
    assert calls.snapshot() == {
        CallKey("patch", "", "pods", "200"): 2,
        CallKey("patch", "", "pods", "409"): 1,
    }
    calls.reset()
    assert calls.snapshot() == {}


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize(
    ("variables", "netrc", "expected"),
    [
        pytest.param({}, False, False, id="nothing-set"),
        pytest.param({"HTTPS_PROXY": "http://proxy:3128"}, False, True, id="proxy"),
        pytest.param({"no_proxy": "example.com", "http_proxy": "http://p:1"}, False, True, id="lower-case"),
        pytest.param({}, True, True, id="netrc"),
    ],
)
async def test_the_api_session_reads_the_environment_only_when_it_says_something(
    variables: dict[str, str], netrc: bool, expected: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollouts import kube

    for name in [n for n in os.environ if n.lower().endswith("_proxy")] + ["NETRC"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    if netrc:
        (tmp_path / ".netrc").write_text("machine 127.0.0.1 login a password b\n")
    assert kube.environment_configures_http() is expected
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    api = await kube.new_api_client(str(config))
    try:
        assert api.rest_client.pool_manager.trust_env is expected
    finally:
        await api.close()
