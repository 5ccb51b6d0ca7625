"""The benchmark suite: how fast and how cheap a rollout is, against the native Deployment.

    .venv/bin/python -m bench.suite                      # N = 100 and 1000, budgets 10% and 25%
    .venv/bin/python -m bench.suite --sizes 100 --budgets 25% --scenarios collaset-update
    .venv/bin/python -m bench.suite --large               # adds N = 5000
    make bench

One run, one cluster (``--cluster``, default ``bench``; created fresh unless ``--reuse``),
one operator in a child process (:mod:`bench.operator_child`). For each N and budget it
runs ``deployment-update``, ``collaset-update`` and ``collaset-hooks``, and per N
``lifecycle-only`` (see :mod:`bench.scenarios`). It prints a table and writes every
figure as JSON to ``bench/results/<timestamp>.json``:

* ``wall_s``: from the spec change to every pod updated and available (pod watch);
  ``ratio_to_deployment``: ``wall_s`` over the Deployment's at the same N and budget;
* ``api``: the operator's requests by verb and resource (counted in its HTTP clients),
  writes, and per pod; ``floor``: the fewest writes per pod the protocol allows (:mod:`bench.floor`);
* ``operator``: CPU seconds and peak RSS of the operator's process during the scenario;
  ``control_plane_cpu_s``: the same for etcd, the API server, kcm, the scheduler and kwok;
* ``latency``: p50/p99 from a lifecycle label change to the next transition on that pod.

The cluster's API server runs without inflight limits or priority and fairness, and
kube-controller-manager and the scheduler without client QPS limits (kwokctl's
``disableQPSLimits``, see :mod:`rollouts.localcluster.clusters`); the operator's client
has no rate limit. The machine's load average is recorded: other work on the machine
skews every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import floor, profiles, scenarios
from bench.operator_child import OperatorProcess
from bench.podwatch import BENCH_MANAGER

RESULTS = Path(__file__).resolve().parent / "results"
#: Fake nodes are sized for this many pods each (kwok gives each node a /24 of pod IPs).
PODS_PER_NODE = 100


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench.suite", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="N pods (default 100 1000)")
    parser.add_argument("--large", action="store_true", help="also N = 5000 (slow on 2 cores)")
    parser.add_argument(
        "--budgets", nargs="+", default=["10%", "25%"], help="maxUnavailable budgets (default 10%% 25%%)"
    )
    parser.add_argument(
        "--scenarios", nargs="+", choices=scenarios.SCENARIOS, default=list(scenarios.SCENARIOS)
    )
    parser.add_argument("--cluster", default="bench", help="local cluster name (default bench)")
    parser.add_argument("--reuse", action="store_true", help="reuse the running cluster and leave it running")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    parser.add_argument("--out", type=Path, help="JSON file (default bench/results/<timestamp>.json)")
    parser.add_argument(
        "--deployment-max-surge", default="0", help="maxSurge of the Deployment baseline (default 0)"
    )
    parser.add_argument(
        "--profile",
        choices=["none", "py-spy", "cprofile"],
        default="none",
        help="profile the operator child during one scenario (see --profile-scenario)",
    )
    parser.add_argument(
        "--profile-scenario",
        default="collaset-update",
        help="scenario to profile, at the largest N and the first budget (default collaset-update)",
    )
    parser.add_argument("--timeout-per-pod", type=float, default=1.0, help="rollout deadline per pod (s)")
    parser.add_argument(
        "--hook-points",
        nargs="+",
        default=list(scenarios.HOOK_POINTS),
        help="progress points of collaset-hooks (default 25%% 50%% 75%% 100%%)",
    )
    args = parser.parse_args(argv)
    if args.large and 5000 not in args.sizes:
        args.sizes.append(5000)
    args.budgets = [b if b.endswith("%") else f"{b}%" for b in args.budgets]
    return args


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def component_pids(cluster: str) -> dict[str, int]:
    from rollouts.localcluster.clusters import cluster_dir

    pids = {}
    for file in sorted((cluster_dir(cluster) / "pids").glob("*.pid")):
        try:
            pids[file.stem] = int(file.read_text().strip())
        except ValueError:
            continue
    return pids


def plan(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    """(scenario, N, budget) in run order: the Deployment first, so ratios can be taken."""
    runs: list[tuple[str, int, str | None]] = []
    for n in args.sizes:
        for budget in args.budgets:
            for name in scenarios.BUDGETED:
                if name in args.scenarios:
                    runs.append((name, n, budget))
        if "lifecycle-only" in args.scenarios:
            runs.append(("lifecycle-only", n, None))
    return runs


async def run_one(ctx: scenarios.Context, name: str, n: int, budget: str | None) -> dict[str, Any]:
    if name == "deployment-update":
        assert budget is not None
        return await scenarios.deployment_update(ctx, n, budget)
    if name in ("collaset-update", "collaset-hooks"):
        assert budget is not None
        return await scenarios.collaset_update(ctx, n, budget, hooks=name == "collaset-hooks")
    return await scenarios.lifecycle_only(ctx, n)


def add_ratios(results: list[dict[str, Any]]) -> None:
    baseline = {
        (r["pods"], r["budget"]): r["wall_s"] for r in results if r["scenario"] == "deployment-update"
    }
    for r in results:
        base = baseline.get((r["pods"], r["budget"]))
        if r["scenario"] in ("collaset-update", "collaset-hooks") and base:
            r["ratio_to_deployment"] = round(r["wall_s"] / base, 2)
            if r.get("complete_s") is not None:
                r["complete_ratio_to_deployment"] = round(r["complete_s"] / base, 2)


async def run_suite(args: argparse.Namespace, kubeconfig: Path, document: dict[str, Any], out: Path) -> None:
    from rollouts import kube
    from rollouts.operator.running import OperatorConfig, free_port

    cfg = OperatorConfig(kubeconfig=str(kubeconfig), webhook_port=free_port())
    profile_out = out.with_suffix(".cprofile") if args.profile == "cprofile" else None
    operator = OperatorProcess(
        cfg,
        log_file=out.with_suffix(".operator.log"),
        profile="cprofile" if args.profile == "cprofile" else None,
        profile_out=profile_out,
    )
    await asyncio.to_thread(operator.start)
    document["operator_pid"] = operator.pid
    largest = max(args.sizes)
    spy: list[profiles.PySpy] = []

    async def profile_hook(name: str, n: int, budget: str | None) -> None:
        if args.profile != "py-spy" or name != args.profile_scenario or n != largest:
            return
        if budget not in (None, args.budgets[0]):
            return
        assert operator.pid is not None
        raw = out.with_suffix(f".{name}-{n}.pyspy.txt")
        spy.append(profiles.PySpy(operator.pid, raw))
        document.setdefault("profile", {})["raw"] = str(raw)

    async def profile_stop() -> None:
        while spy:
            one = spy.pop()
            await asyncio.to_thread(one.stop)
            document["profile"].update(profiles.summarize(one.out))

    try:
        async with kube.api_session(str(kubeconfig)) as api:
            api.user_agent = f"{BENCH_MANAGER}/1"  # our writes' field manager, apart from the operator's
            ctx = scenarios.Context(
                api=api,
                operator=operator,
                component_pids=component_pids(args.cluster),
                timeout_per_pod=args.timeout_per_pod,
                deployment_max_surge=args.deployment_max_surge,
                hook_points=tuple(args.hook_points),
                profile_hook=profile_hook,
                profile_stop=profile_stop,
            )
            for name, n, budget in plan(args):
                print(f"running {name} N={n}" + (f" budget={budget}" if budget else ""), flush=True)
                started = time.monotonic()
                result = await run_one(ctx, name, n, budget)
                result["floor_pod_writes_per_pod"] = floor_for(name)
                document["results"].append(result)
                add_ratios(document["results"])
                await asyncio.to_thread(out.write_text, json.dumps(document, indent=2))
                print(f"  {one_line(result)} ({time.monotonic() - started:.0f}s in all)", flush=True)
    finally:
        await asyncio.to_thread(operator.stop)
        if profile_out is not None and profile_out.exists():
            document["profile"] = {"cprofile": str(profile_out)}
        document["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        await asyncio.to_thread(out.write_text, json.dumps(document, indent=2))


def floor_for(name: str) -> int | None:
    """The protocol's floor of operator writes to pods, per pod, for a scenario."""
    if name in ("collaset-update", "collaset-hooks"):
        return floor.floor_in_place_update().count
    if name == "lifecycle-only":  # begin and finish are the benchmark's; the approvals are the operator's
        writes = floor.floor_in_place_update().writes
        return sum(1 for w in writes if not w.startswith(("begin", "finish", "in-place")))
    return None


def one_line(r: dict[str, Any]) -> str:
    lat = r["latency"]
    return (
        f"wall {r['wall_s']}s, complete {r['complete_s']}s, ratio {r['ratio_to_deployment']}, "
        f"operator {r['api']['total']} requests ({r['api']['pod_writes_per_pod']} pod writes/pod), "
        f"cpu {r['operator']['cpu_s']}s, peak rss {r['operator']['peak_rss_mb']} MB, "
        f"p50/p99 {lat['p50_ms']}/{lat['p99_ms']} ms"
    )


def print_table(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    m = document["machine"]
    table = Table(
        title=f"rollouts benchmark ({m['cores']} cores, load {m['load_avg_at_start']} -> "
        f"{document.get('load_avg_at_end')})",
        caption=f"pod writes/pod floor (protocol): {document['floor']['writes_per_pod']}; "
        f"JSON: {document.get('out')}",
    )
    columns = [
        "scenario", "N", "budget", "wall s", "done s", "/ Deploy", "req/pod", "pod wr/pod", "floor",
        "LIST", "op CPU s", "peak RSS MB", "p50 ms", "p99 ms", "react p50/p99",
    ]  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")

    def text(value: Any) -> str:
        return "-" if value is None else str(value)

    for r in document["results"]:
        lat, api = r["latency"], r["api"]
        table.add_row(
            r["scenario"],
            str(r["pods"]),
            text(r["budget"]),
            text(r["wall_s"]),
            text(r["complete_s"]),
            text(r["ratio_to_deployment"]),
            text(api["requests_per_pod"]),
            text(api["pod_writes_per_pod"]),
            text(r.get("floor_pod_writes_per_pod")),
            text(api["lists"]),
            text(r["operator"]["cpu_s"]),
            text(r["operator"]["peak_rss_mb"]),
            text(lat["p50_ms"]),
            text(lat["p99_ms"]),
            f"{text(lat['reaction_p50_ms'])}/{text(lat['reaction_p99_ms'])}",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped or logged: do not squeeze the columns
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rollouts.localcluster.clusters import cluster_down, cluster_up

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    nodes = max(3, math.ceil(max(args.sizes) * 1.3 / PODS_PER_NODE))
    document: dict[str, Any] = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.suite", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "cluster": {"name": args.cluster, "nodes": nodes, "reused": args.reuse},
        "settings": {
            "sizes": args.sizes,
            "budgets": args.budgets,
            "scenarios": args.scenarios,
            "hook_points": args.hook_points,
            "deployment_max_surge": args.deployment_max_surge,
            "api_server": "no inflight limits, no priority and fairness; kcm/scheduler without QPS limits",
        },
        "floor": floor.describe(),
        "results": [],
        "out": str(out),
    }
    if not args.reuse:
        cluster_down(name=args.cluster)
    kubeconfig = cluster_up(name=args.cluster, nodes=nodes)
    try:
        asyncio.run(run_suite(args, kubeconfig, document, out))
    finally:
        if not (args.reuse or args.keep):
            cluster_down(name=args.cluster)
    print_table(document)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
