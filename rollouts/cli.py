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
from rollouts.operator.running import OperatorConfig, StartupError


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


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    """The operator's settings from the command line of ``rollouts run``."""
    return OperatorConfig(
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        in_cluster=args.in_cluster,
        install_crds=not args.skip_crds,
        manage_webhooks=not args.skip_webhook_configs,
        peering=args.peering,
        health_port=args.health_port,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from rollouts.operator.running import run_operator

    run_operator(operator_config(args), log_format=args.log_format)
    return 0


def _cmd_playground(args: argparse.Namespace) -> int:
    from rollouts.playground import run_playground

    return run_playground(
        name=args.name, watch=not args.no_watch, webhook_port=args.webhook_port, down=args.down
    )


def _cmd_status(args: argparse.Namespace) -> int:
    from rollouts.status import StatusError, parse_duration, run_status

    swallowed = getattr(args, "swallowed_target", None)
    if args.target and swallowed:
        raise CommandError(f"invalid value for --watch: {swallowed!r}; use --watch=true or --watch=false")
    target = args.target or swallowed
    if not target:
        raise CommandError("rollouts status needs the CollaSet: rollouts status cls/NAME")
    try:
        return run_status(
            target=target,
            namespace=args.namespace,
            kubeconfig=args.kubeconfig,
            watch=args.watch,
            timeout=parse_duration(args.timeout),
        )
    except StatusError as e:
        raise CommandError(str(e)) from e


def _cmd_manifests(args: argparse.Namespace) -> int:
    from rollouts.manifests import ManifestError, render_manifests

    try:
        text = render_manifests(namespace=args.namespace, image=args.image, cert_manager=args.cert_manager)
    except ManifestError as e:
        raise CommandError(str(e)) from e
    sys.stdout.write(text)
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from rollouts.trace_command import TraceError, run_trace

    try:
        return run_trace(
            target=args.target, namespace=args.namespace, kubeconfig=args.kubeconfig, output=args.output
        )
    except TraceError as e:
        raise CommandError(str(e)) from e


def _cmd_crds(args: argparse.Namespace) -> int:
    from rollouts.crdgen import write_crds

    for path in write_crds(Path(args.out)):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from rollouts.status import WatchFlag

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
    p.add_argument(
        "--skip-crds", action="store_true", help="do not apply the CRDs at start (the manifests install them)"
    )
    p.add_argument(
        "--skip-webhook-configs",
        action="store_true",
        help="do not create or patch the webhook configurations (the manifests install them)",
    )
    p.add_argument(
        "--peering",
        metavar="NAME",
        help="run as one of several replicas: kopf peering object NAME picks the one that works",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=8080,
        help="port of /healthz, /readyz and /metrics (default 8080; 0 turns the server off)",
    )
    p.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON objects"
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("playground", help="a local cluster with the operator and the quickstart example")
    p.add_argument("--name", default="playground")
    p.add_argument(
        "--no-watch",
        action="store_true",
        help="CI mode: plain output, exit once the demo rollout ended (0 when it completed)",
    )
    p.add_argument(
        "--webhook-port", type=int, default=0, help="port of the operator's webhooks (default: a free one)"
    )
    p.add_argument("--down", action="store_true", help="remove the cluster when the playground ends")
    p.set_defaults(func=_cmd_playground)

    p = sub.add_parser(
        "status",
        help="follow a CollaSet rollout live; exit 0 complete, 1 failed, 2 deadline exceeded, 3 timeout",
        description="Follow a CollaSet rollout (like kubectl rollout status). Exit codes: 0 complete, "
        "1 failed (an Abort hook failed) or error, 2 progress deadline exceeded, 3 --timeout passed.",
    )
    p.add_argument(
        "target", metavar="cls/NAME", nargs="?", help="the CollaSet (cls/NAME, collaset/NAME or NAME)"
    )
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    p.add_argument(
        "-w",
        "--watch",
        nargs="?",
        default=True,
        action=WatchFlag,
        help="wait for the rollout to finish (default); --watch=false prints the state once",
    )
    p.add_argument(
        "--timeout", default="0s", help="give up after this long (e.g. 5m; 0s: never, the default)"
    )
    p.add_argument(
        "--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config)"
    )
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser(
        "manifests",
        help="print the install manifests for a real cluster (kubectl apply --server-side -f -)",
        description="Print the install manifests: CRDs, RBAC, the operator Deployment, its Service, "
        "webhook configurations and TLS (a CA generated now, or cert-manager objects).",
    )
    p.add_argument(
        "--namespace", default="rollouts-system", help="namespace of the operator (default: %(default)s)"
    )
    p.add_argument("--image", help="operator image (default: rollouts:<version>, built from the Dockerfile)")
    p.add_argument(
        "--cert-manager",
        action="store_true",
        help="let cert-manager issue the webhook certificate and inject its CA (default: generate them now)",
    )
    p.set_defaults(func=_cmd_manifests)

    p = sub.add_parser(
        "trace",
        help="the timeline of a pod's operations (pod/NAME) or of a CollaSet rollout (cls/NAME)",
        description="Trace a pod: every operation with the time it entered each phase, how long each "
        "took and which rule or finalizer held it. Trace a CollaSet: progress points, hooks and their "
        "Jobs, and the pods' time per phase, slowest first.",
    )
    p.add_argument("target", metavar="pod/NAME|cls/NAME", help="what to trace")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="text (default) or json")
    p.add_argument(
        "--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config)"
    )
    p.set_defaults(func=_cmd_trace)

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
