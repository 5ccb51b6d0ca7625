"""The benchmark suite still runs: N=10, one budget, every scenario, on a cluster of its own.

Runs ``python -m bench.suite`` as a user would (a child process, which itself starts the
operator in a grandchild) and checks that the JSON carries every figure. No timing is
asserted: the benchmark measures, this test only keeps it from rotting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("ROLLOUTS_BENCH_SMOKE_CLUSTER", "bench-smoke")

RESULT_FIELDS = {
    "scenario", "pods", "budget", "wall_s", "complete_s", "setup_s", "ratio_to_deployment", "api",
    "operator", "control_plane_cpu_s", "latency", "pod_writes_seen_per_pod", "watch_events",
    "load_avg_before", "load_avg_after", "floor_pod_writes_per_pod", "notes",
}  # fmt: skip
API_FIELDS = {
    "total", "by_verb", "by_resource", "not_2xx", "writes", "pod_writes", "requests_per_pod",
    "writes_per_pod", "pod_writes_per_pod", "lists", "gets",
}  # fmt: skip
OPERATOR_FIELDS = {"cpu_s", "cpu_s_per_pod_ms", "peak_rss_mb", "rss_mb"}
LATENCY_FIELDS = {
    "p50_ms", "p99_ms", "count", "reaction_p50_ms", "reaction_p99_ms", "reaction_count",
    "first_transition_p50_ms", "first_transition_p99_ms", "by_step", "transitions_per_pod_p50",
}  # fmt: skip


def test_the_suite_runs_and_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    command = [
        sys.executable, "-m", "bench.suite", "--sizes", "10", "--budgets", "25%",
        "--cluster", CLUSTER, "--out", str(out),
    ]  # fmt: skip
    if os.environ.get("ROLLOUTS_KEEP_CLUSTER") == "1":
        command.append("--keep")
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"suite failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "rollouts benchmark" in proc.stdout, "the table was printed"

    document = json.loads(out.read_text())
    assert document["machine"]["cores"] == os.cpu_count()
    assert len(document["machine"]["load_avg_at_start"]) == 3
    assert len(document["load_avg_at_end"]) == 3
    assert document["floor"]["writes_per_pod"] >= 3, "begin, the update and finish at the very least"
    assert document["floor"]["writes"]

    results = {r["scenario"]: r for r in document["results"]}
    assert set(results) == {"deployment-update", "collaset-update", "collaset-hooks", "lifecycle-only"}
    for name, result in results.items():
        assert set(result) >= RESULT_FIELDS, (name, RESULT_FIELDS - set(result))
        assert set(result["api"]) >= API_FIELDS, name
        assert set(result["operator"]) >= OPERATOR_FIELDS, name
        assert set(result["latency"]) >= LATENCY_FIELDS, name
        assert result["pods"] == 10
        assert result["wall_s"] > 0
        assert result["operator"]["peak_rss_mb"] > 0
        assert result["control_plane_cpu_s"], name

    for name in ("collaset-update", "collaset-hooks"):
        result = results[name]
        assert result["ratio_to_deployment"] is not None, name
        assert result["api"]["pod_writes"] > 0, "the operator's writes were counted"
        assert result["latency"]["count"] > 0, "lifecycle transitions were seen"
        assert result["floor_pod_writes_per_pod"] == document["floor"]["writes_per_pod"]
    assert results["collaset-hooks"]["notes"]["hooks"] == {
        "at-25": "Succeeded", "at-50": "Succeeded", "at-75": "Succeeded", "at-100": "Succeeded",
    }  # fmt: skip
    assert results["lifecycle-only"]["api"]["pod_writes"] > 0
    assert results["deployment-update"]["ratio_to_deployment"] is None
