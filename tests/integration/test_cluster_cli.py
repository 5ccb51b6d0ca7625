"""``rollouts cluster up`` / ``down`` as a user runs them: idempotent, loopback, nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NAME = "t-cluster-cli"


def _rollouts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollouts.cli", *args], capture_output=True, text=True, timeout=300
    )


def _processes(name: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", f"clusters/{name}/"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


def test_cluster_up_is_idempotent_and_down_leaves_nothing(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    try:
        first = _rollouts("cluster", "up", "--name", NAME, "--nodes", "1", "--kubeconfig", str(kubeconfig))
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip().splitlines()[-1] == str(kubeconfig)
        assert "127.0.0.1" in kubeconfig.read_text()
        running = _processes(NAME)
        assert len(running) == 5, running  # etcd, apiserver, controller-manager, scheduler, kwok
        second = _rollouts("cluster", "up", "--name", NAME, "--nodes", "1", "--kubeconfig", str(kubeconfig))
        assert second.returncode == 0, second.stderr
        assert _processes(NAME) == running  # reused, not restarted
    finally:
        down = _rollouts("cluster", "down", "--name", NAME)
    assert down.returncode == 0, down.stderr
    assert _processes(NAME) == []
    assert _rollouts("cluster", "down", "--name", NAME).returncode == 0  # a missing cluster is fine
