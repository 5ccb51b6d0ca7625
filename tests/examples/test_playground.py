"""``rollouts playground --no-watch``: the whole quick-start demo, unattended, as CI runs it.

The playground runs in a subprocess against a cluster of its own (``ROLLOUTS_PLAYGROUND_CLUSTER``,
default ``rollouts-playground-test``) with its own webhook port, so it does not collide with
the session's cluster and operator. It removes that cluster at the end (``--down``) unless
``ROLLOUTS_KEEP_CLUSTER=1``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from rollouts.operator.running import free_port

pytestmark = [pytest.mark.integration, pytest.mark.examples]

CLUSTER = os.environ.get("ROLLOUTS_PLAYGROUND_CLUSTER", "rollouts-playground-test")
#: The demo's own waits are bounded (10 minutes each); this only guards against a hang.
DEMO_TIMEOUT_SECONDS = 1500


def test_playground_no_watch_completes_the_demo_rollout() -> None:
    keep = os.environ.get("ROLLOUTS_KEEP_CLUSTER") == "1"
    port = free_port()
    command = [sys.executable, "-m", "rollouts.cli", "playground", "--no-watch", "--name", CLUSTER]
    command += ["--webhook-port", str(port), *([] if keep else ["--down"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEMO_TIMEOUT_SECONDS, check=False)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"
    assert "\x1b" not in out  # CI mode: plain lines

    kubeconfig = f"clusters/{CLUSTER}/kubeconfig.yaml"
    steps = [
        f"cluster '{CLUSTER}' is up; kubeconfig: ",
        f"operator running (CRDs installed, admission webhooks on 127.0.0.1:{port})",
        "traffic controller running (examples/traffic-controller/traffic.py): ConfigMap traffic-lb",
        "$ kubectl apply -f examples/quickstart/",
        "  rollout complete: 6 of 6 pods updated and available",
        "rolling out nginx:1.27 (was nginx:1.25):",
        "$ rollouts status cls/web",
        "rollout complete: 6 of 6 pods updated and available",
        "Hook Jobs of this rollout, with the variables their command (env | grep K8S_ROLLOUT_) prints:",
        "kwok, which starts no containers",
        f"{kubeconfig} describe job web-",
        f"{kubeconfig} get configmap traffic-lb -o yaml",
        "traffic controller stopped",
        "operator stopped",
        (
            f"cluster '{CLUSTER}' left running; remove it with: rollouts cluster down --name {CLUSTER}"
            if keep
            else f"cluster '{CLUSTER}' removed"
        ),
    ]
    at = 0
    for step in steps:  # in this order
        found = out.find(step, at)
        assert found >= 0, f"{step!r} missing after position {at}:\n{out}"
        at = found + len(step)

    jobs = re.findall(r"^  (web-[a-z-]+-[0-9a-f]{8}) \(hook ([a-z-]+)\): (.*)$", out, re.MULTILINE)
    assert [hook for _, hook, _ in jobs] == ["db-migrate", "smoke-test", "notify"], out
    for _, _, env in jobs:
        variables = r"K8S_ROLLOUT_FROM_OBJECT=default/web-\w+ K8S_ROLLOUT_TO_OBJECT=default/web-\w+"
        assert re.fullmatch(variables + " K8S_ROLLOUT_TYPE=ROLLOUT", env), env
    # The live part printed pods moving through the lifecycle, one line per change.
    assert re.search(r"^pod web-\w+: old web-\w+, update Preparing, ", out, re.MULTILINE), out
