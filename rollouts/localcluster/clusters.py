"""Starting and stopping a local cluster: kwokctl's binary runtime on 127.0.0.1.

``cluster_up`` is what ``rollouts cluster up``, the test harness and the playground call:
it makes sure the binaries are built (see :mod:`rollouts.localcluster.building`), writes a
kwokctl configuration that points at them and carries our kwok Stages, creates the
cluster (or restarts it when its processes are gone), scales the fake nodes and waits
until the API server answers. It never edits ``~/.kube/config``: kwokctl is always given
an empty ``--kubeconfig``, and we copy its own kubeconfig where we are asked to.

State lives in ``$ROLLOUTS_CACHE/kwok`` (kwokctl's ``KWOK_WORKDIR``), outside the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from rollouts.localcluster.building import Binaries, Versions, cache_root, ensure_binaries, load_versions

STAGES_DIR = Path(__file__).with_name("stages")

#: Annotations understood by the kwok Stages that ``cluster up`` installs (see README).
EXIT_CODE_ANNOTATION = "rollouts.kusionstack.io/kwok-exit-code"
RUN_FOR_ANNOTATION = "rollouts.kusionstack.io/kwok-run-for"


class ClusterError(Exception):
    """A cluster could not be started or stopped; the message says what to do."""


def workdir() -> Path:
    return cache_root() / "kwok"


def cluster_dir(name: str) -> Path:
    return workdir() / "clusters" / name


def kubeconfig_of(name: str) -> Path:
    """The kubeconfig kwokctl writes for a cluster (admin client certificate, 127.0.0.1)."""
    return cluster_dir(name) / "kubeconfig.yaml"


def render_config(*, versions: Versions, binaries: Binaries) -> str:
    """The kwokctl configuration: binary runtime, loopback only, our binaries, our Stages."""
    config = {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeVersion": versions.kubernetes,
            "kubeApiserverBinary": str(binaries.kube_apiserver),
            "kubeControllerManagerBinary": str(binaries.kube_controller_manager),
            "kubeSchedulerBinary": str(binaries.kube_scheduler),
            "kwokControllerBinary": str(binaries.kwok),
            "etcdBinary": str(binaries.etcd),
            "kubectlBinary": str(binaries.kubectl),
            # A development cluster: API priority and fairness and client QPS limits would
            # measure the limits rather than the controllers.
            "disableQPSLimits": True,
        },
    }
    docs = [yaml.safe_dump(config, sort_keys=False)]
    for stage_file in sorted(STAGES_DIR.glob("*.yaml")):
        docs.append(stage_file.read_text())
    return "---\n".join(docs)


def _env(binaries: Binaries) -> dict[str, str]:
    path = f"{binaries.kubectl.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "KWOK_WORKDIR": str(workdir()), "KWOK_RUNTIME": "binary", "PATH": path}


def _kwokctl(binaries: Binaries, *args: str, what: str, timeout: float = 300) -> str:
    log = workdir() / "kwokctl.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            [str(binaries.kwokctl), *args],
            env=_env(binaries),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise ClusterError(
            f"{what} timed out after {timeout:.0f}s; run 'rollouts cluster down' and try again"
        ) from e
    with log.open("a") as f:
        f.write(f"$ kwokctl {' '.join(args)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        detail = lines[-1].strip()[:240] if lines else f"exit code {proc.returncode}"
        hint = _hint(proc.stderr + proc.stdout)
        raise ClusterError(f"{what} failed: {detail}{hint} (full output: {log})")
    return proc.stdout


def _hint(output: str) -> str:
    lowered = output.lower()
    if "address already in use" in lowered or "bind:" in lowered:
        return "; a port it needs is in use: stop the process holding it or run 'rollouts cluster down' first"
    return ""


def _exists(binaries: Binaries, name: str) -> bool:
    out = _kwokctl(binaries, "get", "clusters", what="listing clusters")
    return name in out.split()


def api_answers(kubeconfig: Path, kubectl: Path) -> bool:
    if not kubeconfig.exists():
        return False
    proc = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz", "--request-timeout=5s"],
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0


def _wait_nodes_ready(binaries: Binaries, kubeconfig: Path, nodes: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        proc = subprocess.run(
            [
                str(binaries.kubectl),
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0 and proc.stdout.split().count("True") >= nodes:
            return
        time.sleep(0.5)
    raise ClusterError(f"the {nodes} kwok nodes did not become Ready; see {workdir() / 'kwokctl.log'}")


def cluster_up(*, name: str = "rollouts", kubeconfig: Path | None = None, nodes: int = 3) -> Path:
    """Start (or reuse) a local cluster and return the path of its kubeconfig."""
    if nodes < 0:
        raise ClusterError("--nodes must be 0 or more")
    versions = load_versions()
    binaries = ensure_binaries(versions=versions, say=lambda msg: print(msg, flush=True))
    config = workdir() / f"{name}.kwokctl.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(render_config(versions=versions, binaries=binaries))
    own_kubeconfig = kubeconfig_of(name)

    if _exists(binaries, name):
        if not api_answers(own_kubeconfig, binaries.kubectl):
            _kwokctl(
                binaries,
                "start",
                "cluster",
                "--name",
                name,
                "--wait",
                "2m",
                what=f"restarting cluster {name}",
            )
    else:
        _kwokctl(
            binaries,
            "create",
            "cluster",
            "--name",
            name,
            "--config",
            str(config),
            "--kubeconfig",
            "",
            "--wait",
            "2m",
            "--extra-args",
            "etcd=unsafe-no-fsync=true",
            what=f"creating cluster {name}",
        )
    if not api_answers(own_kubeconfig, binaries.kubectl):
        raise ClusterError(
            f"cluster {name} started but its API server does not answer; see {workdir()}/clusters/{name}/logs"
        )
    _kwokctl(binaries, "scale", "node", "--replicas", str(nodes), "--name", name, what="creating fake nodes")
    _wait_nodes_ready(binaries, own_kubeconfig, nodes, time.monotonic() + 60)

    if kubeconfig is None:
        return own_kubeconfig
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(own_kubeconfig, kubeconfig)
    return kubeconfig


def cluster_down(*, name: str = "rollouts") -> None:
    """Stop every process of the cluster and remove its state; a missing cluster is not an error."""
    binaries = ensure_binaries(say=lambda msg: None)
    if _exists(binaries, name):
        # Unlike create, delete refuses an empty --kubeconfig ("empty path"); give it a
        # throwaway file so it never edits ~/.kube/config.
        scratch = workdir() / f"{name}.scratch-kubeconfig.yaml"
        scratch.write_text("apiVersion: v1\nkind: Config\n")
        try:
            _kwokctl(
                binaries, "delete", "cluster", "--name", name, "--kubeconfig", str(scratch),
                what=f"deleting cluster {name}",
            )  # fmt: skip
        finally:
            scratch.unlink(missing_ok=True)
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    (workdir() / f"{name}.kwokctl.yaml").unlink(missing_ok=True)
