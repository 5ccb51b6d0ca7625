"""``rollouts playground``: a local cluster, the operator, and the examples, in one command.

It starts (or reuses) a kwok cluster, runs the operator in this process, applies
``examples/quickstart/`` when it exists, and stays in the foreground until Ctrl-C, which
stops the operator cleanly. The cluster keeps running for kubectl; ``rollouts cluster
down --name playground`` removes it.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

from rollouts.localcluster.building import ensure_binaries
from rollouts.localcluster.clusters import ClusterError, cluster_up
from rollouts.operator.running import OperatorConfig, OperatorThread, free_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "quickstart"


def run_playground(*, name: str = "playground", watch: bool = True) -> int:
    try:
        kubeconfig = cluster_up(name=name, nodes=3)
    except ClusterError as e:
        print(f"rollouts: {e}")
        return 1
    kubectl = ensure_binaries(say=lambda _: None).kubectl
    print(f"cluster {name!r} is up; kubeconfig: {kubeconfig}")
    operator = OperatorThread(OperatorConfig(kubeconfig=str(kubeconfig), webhook_port=free_port())).start()
    print("operator running (CRDs installed, admission webhooks registered)")
    try:
        if EXAMPLES.is_dir():
            subprocess.run(
                [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "-f", str(EXAMPLES)], check=True
            )
        print(f"\n  export KUBECONFIG={kubeconfig}\n  kubectl get cls,ptr,pods -A\n")
        if watch:
            print(f"Ctrl-C stops the operator; 'rollouts cluster down --name {name}' removes the cluster.")
            stopped = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            stopped.wait()
    finally:
        operator.stop()
        print("operator stopped")
    return 0
