"""Local control plane tooling: version pins, kwokctl configuration, build errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollouts.cli import main
from rollouts.localcluster import building
from rollouts.localcluster.building import BuildError, Versions, binaries_for, ensure_binaries, load_versions
from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION, render_config


def test_versions_are_pinned_in_one_file() -> None:
    v = load_versions()
    assert v.kubernetes.startswith("v1.") and v.etcd.startswith("v3.") and v.kwok.startswith("v0.")


@pytest.mark.parametrize(
    ("kubernetes", "staging", "minor"),
    [
        pytest.param("v1.34.10", "v0.34.10", "34", id="1.34"),
        pytest.param("v1.32.13", "v0.32.13", "32", id="1.32-fallback"),
    ],
)
def test_staging_version_is_derived(kubernetes: str, staging: str, minor: str) -> None:
    v = Versions(kubernetes=kubernetes, etcd="v3.6.10", kwok="v0.8.0")
    assert v.staging == staging and v.kube_minor == minor


def test_cache_is_keyed_by_version(tmp_path: Path) -> None:
    a = binaries_for(Versions(kubernetes="v1.34.10", etcd="v3.6.10", kwok="v0.8.0"), tmp_path)
    b = binaries_for(Versions(kubernetes="v1.32.13", etcd="v3.5.21", kwok="v0.8.0"), tmp_path)
    assert a.kube_apiserver != b.kube_apiserver and a.etcd != b.etcd and a.kwok == b.kwok
    assert a.kube_apiserver.is_relative_to(tmp_path)


def test_config_binds_loopback_and_uses_cached_binaries(tmp_path: Path) -> None:
    v = load_versions()
    bins = binaries_for(v, tmp_path)
    docs = list(yaml.safe_load_all(render_config(versions=v, binaries=bins)))
    opts = docs[0]["options"]
    assert opts["runtime"] == "binary" and opts["bindAddress"] == "127.0.0.1"
    assert opts["kubeVersion"] == v.kubernetes
    for key in (
        "kubeApiserverBinary",
        "kubeControllerManagerBinary",
        "kubeSchedulerBinary",
        "kwokControllerBinary",
        "etcdBinary",
        "kubectlBinary",
    ):
        assert opts[key].startswith(str(tmp_path)), key


def test_stages_replace_defaults_with_all_we_need(tmp_path: Path) -> None:
    v = load_versions()
    docs = list(yaml.safe_load_all(render_config(versions=v, binaries=binaries_for(v, tmp_path))))
    stages = {d["metadata"]["name"]: d for d in docs[1:]}
    assert {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-complete",
        "pod-delete",
        "pod-fail-with-exit-code",
        "pod-service-ready-gate-on",
        "pod-service-ready-gate-off",
    } <= set(stages)
    text = yaml.safe_dump(stages["pod-fail-with-exit-code"])
    assert EXIT_CODE_ANNOTATION in text and RUN_FOR_ANNOTATION in text
    assert RUN_FOR_ANNOTATION in yaml.safe_dump(stages["pod-complete"])


def test_missing_go_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(building.shutil, "which", lambda _: None)
    with pytest.raises(BuildError, match="Go toolchain is not on PATH: install Go"):
        ensure_binaries(root=tmp_path, say=lambda _: None)


def test_cli_reports_build_errors_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ROLLOUTS_CACHE", str(tmp_path))
    monkeypatch.setattr(building.shutil, "which", lambda _: None)
    assert main(["cluster", "build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rollouts: the Go toolchain is not on PATH")


def test_cached_build_is_reused_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = load_versions()
    for component_dir in building.component_dirs(v, tmp_path).values():
        (component_dir / "bin").mkdir(parents=True)
        (component_dir / "bin" / ".complete").write_text("")
    monkeypatch.setattr(building.shutil, "which", lambda _: None)  # building would need go
    assert ensure_binaries(versions=v, root=tmp_path, say=lambda _: None) == binaries_for(v, tmp_path)


def test_failed_go_step_names_the_error_line(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text('$ go mod download\n{\n "Error": "k8s.io/x@v0.1.0: 404 Not Found"\n}\n')
    assert "404 Not Found" in building._last_error_line(log)
