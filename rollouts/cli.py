"""The ``rollouts`` command line: the local cluster, the operator, CRD generation.

Each subcommand is a thin wrapper: it parses arguments, calls one function, and turns
the domain errors we expect (a failed build, a port in use, a missing kubeconfig) into
one line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rollouts.localcluster.building import BuildError, ensure_binaries
from rollouts.operator.running import StartupError


class CommandError(Exception):
    """An expected failure of a command; its message is shown as is."""


def _cmd_cluster_build(args: argparse.Namespace) -> int:
    bins = ensure_binaries()
    print(bins.kube_apiserver.parent)
    return 0


def _cmd_cluster_up(args: argparse.Namespace) -> int:
    from rollouts.localcluster.clusters import ClusterError, cluster_up

    try:
        kubeconfig = cluster_up(
            name=args.name,
            kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
            nodes=args.nodes,
        )
    except ClusterError as e:
        raise CommandError(str(e)) from e
    print(kubeconfig)
    return 0


def _cmd_cluster_down(args: argparse.Namespace) -> int:
    from rollouts.localcluster.clusters import ClusterError, cluster_down

    try:
        cluster_down(name=args.name)
    except ClusterError as e:
        raise CommandError(str(e)) from e
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from rollouts.operator.running import run_operator

    run_operator(
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        in_cluster=args.in_cluster,
    )
    return 0


def _cmd_playground(args: argparse.Namespace) -> int:
    from rollouts.playground import run_playground

    return run_playground(name=args.name, watch=not args.no_watch)


def _cmd_crds(args: argparse.Namespace) -> int:
    from rollouts.crdgen import write_crds

    for path in write_crds(Path(args.out)):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollouts", description=__doc__.splitlines()[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser(
        "cluster", help="a local control plane (etcd, kube-apiserver, KCM, scheduler, kwok)"
    )
    csub = cluster.add_subparsers(dest="cluster_command", required=True)
    p = csub.add_parser(
        "build", help="build (once) and cache the control plane binaries; print their directory"
    )
    p.set_defaults(func=_cmd_cluster_build)
    p = csub.add_parser("up", help="start a local cluster and print its kubeconfig path (idempotent)")
    p.add_argument("--name", default="rollouts")
    p.add_argument("--kubeconfig", help="where to write the kubeconfig (default: in the cluster's directory)")
    p.add_argument("--nodes", type=int, default=3, help="number of fake kwok nodes (default 3)")
    p.set_defaults(func=_cmd_cluster_up)
    p = csub.add_parser("down", help="stop every process of the cluster and remove its state")
    p.add_argument("--name", default="rollouts")
    p.set_defaults(func=_cmd_cluster_down)

    p = sub.add_parser("run", help="run the operator against a cluster")
    p.add_argument("--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, then in-cluster)")
    p.add_argument("--namespace", help="watch only this namespace (default: all)")
    p.add_argument(
        "--webhook-host", default="127.0.0.1", help="address the API server reaches the webhooks at"
    )
    p.add_argument("--webhook-port", type=int, default=9443)
    p.add_argument(
        "--in-cluster",
        action="store_true",
        help="serve webhooks with the mounted certificate behind the operator's Service",
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("playground", help="a local cluster with the operator and the quickstart example")
    p.add_argument("--name", default="playground")
    p.add_argument(
        "--no-watch", action="store_true", help="set up and exit instead of staying in the foreground"
    )
    p.set_defaults(func=_cmd_playground)

    p = sub.add_parser("crds", help="write crds/*.yaml from the API models")
    p.add_argument("--out", default="crds")
    p.set_defaults(func=_cmd_crds)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (BuildError, CommandError, StartupError) as e:
        print(f"rollouts: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
