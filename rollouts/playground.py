"""``rollouts playground``: the quick-start demo, from an empty machine to a finished rollout.

What a new user meets first (``make playground``). In order, printing a line per step:

1. start (or reuse) a local kwok cluster named ``--name`` (default ``playground``);
2. run the operator in this process (webhooks on ``--webhook-port``, default a free port);
3. run the traffic cooperation controller of ``examples/traffic-controller/`` in this
   process (loaded from its file, so the example stays a plain script);
4. ``kubectl apply -f examples/quickstart/`` and wait until the 6 pods are service-available;
5. roll out a new image and follow it with :mod:`rollouts.status` (the live view on a
   terminal, changed lines otherwise) until it is complete;
6. print the hook Jobs (and what they would print on a real cluster), the load balancer
   ConfigMap and how to tear everything down.

Then, interactively, it stays in the foreground until Ctrl-C; ``--no-watch`` (CI) ends
right after step 6, exiting 0 when the rollout completed, else with ``rollouts status``'
exit code. Either way the traffic controller and the operator are stopped at the end and
the cluster is left running for kubectl, unless ``--down`` removes it. Operator and
traffic controller logs go to ``~/.cache/rollouts/kwok/<name>.playground.log``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Final

from rollouts import kube
from rollouts.api.collasets import GROUP
from rollouts.localcluster.building import ensure_binaries
from rollouts.localcluster.clusters import ClusterError, cluster_down, cluster_up, workdir
from rollouts.operator.running import OperatorConfig, OperatorThread, StartupError, free_port
from rollouts.status import (
    EXIT_COMPLETE,
    EXIT_INTERRUPTED,
    Display,
    PlainDisplay,
    RolloutView,
    follow_rollout,
    make_display,
    render_plain,
)

EXAMPLES: Final = Path(__file__).resolve().parent.parent / "examples"
QUICKSTART: Final = EXAMPLES / "quickstart"
TRAFFIC_CONTROLLER: Final = EXAMPLES / "traffic-controller" / "traffic.py"

NAMESPACE: Final = "default"
COLLASET: Final = "web"
CONFIGMAP: Final = "traffic-lb"
#: The image of examples/quickstart/collaset.yaml and the one the demo rolls out.
IMAGES: Final = ("nginx:1.25", "nginx:1.27")
#: How long the unattended demo may take at most, per wait (first pods, then the rollout).
CI_TIMEOUT_SECONDS: Final = 600.0

log = logging.getLogger("rollouts.playground")


class PlaygroundError(Exception):
    """A step of the demo failed; the message says which and what to look at."""


def say(text: str = "") -> None:
    print(text, flush=True)


def load_traffic_controller(path: Path = TRAFFIC_CONTROLLER) -> ModuleType:
    """The traffic controller example as a module (it lives in examples/, not in a package)."""
    spec = importlib.util.spec_from_file_location("rollouts_example_traffic", path)
    if spec is None or spec.loader is None:
        raise PlaygroundError(f"cannot load the traffic controller from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TrafficThread:
    """The traffic controller example running in a thread with its own event loop."""

    def __init__(self, *, kubeconfig: Path, namespace: str, configmap: str) -> None:
        self.module = load_traffic_controller()
        self.kubeconfig, self.namespace, self.configmap = kubeconfig, namespace, configmap
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="traffic-controller", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:
            log.exception("traffic controller failed")
            self.error = e
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with kube.api_session(str(self.kubeconfig)) as api:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(
                self.module.run(api, namespace=self.namespace, configmap=self.configmap)
            )
            self._ready.set()
            with suppress(asyncio.CancelledError):  # stop() cancels it
                await self._task

    def start(self) -> TrafficThread:
        self._thread.start()
        self._ready.wait(30)
        if self.error is not None:
            raise PlaygroundError(f"the traffic controller failed to start: {self.error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(30)


@dataclass
class _Summary:
    """A display for the first wait: only the CollaSet's one-line summary, when it changes."""

    last: str = ""

    def show(self, view: RolloutView) -> None:
        line = render_plain(view)["rollout"]
        if line != self.last:
            say(f"  {line}")
            self.last = line

    def close(self) -> None:
        pass


def _follow(kubeconfig: Path, display: Display, *, timeout: float | None) -> tuple[int, str]:
    async def main() -> tuple[int, str]:
        async with kube.api_session(str(kubeconfig)) as api:
            return await follow_rollout(
                api, namespace=NAMESPACE, name=COLLASET, display=display, timeout=timeout
            )

    return asyncio.run(main())


def _kubectl(kubectl: Path, kubeconfig: Path, *args: str, capture: bool = False) -> str:
    command = [str(kubectl), "--kubeconfig", str(kubeconfig), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PlaygroundError(f"kubectl {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    if not capture and done.stdout.strip():
        for line in done.stdout.strip().splitlines():
            say(f"  {line}")
    return done.stdout


def _kubectl_json(kubectl: Path, kubeconfig: Path, *args: str) -> Any:
    import json

    return json.loads(_kubectl(kubectl, kubeconfig, *args, "-o", "json", capture=True))


def next_image(current: str | None) -> str:
    """The image the demo rolls out: the other one of :data:`IMAGES`."""
    return IMAGES[1] if current != IMAGES[1] else IMAGES[0]


def describe_hook_jobs(jobs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per hook Job: its name, hook and the K8S_ROLLOUT_* variables it was given."""
    lines = []
    for job in sorted(jobs, key=lambda j: j["metadata"].get("creationTimestamp", "")):
        labels = job["metadata"].get("labels") or {}
        containers = job["spec"]["template"]["spec"].get("containers") or []
        env = " ".join(
            f"{e['name']}={e.get('value', '')}"
            for e in (containers[0].get("env") or [] if containers else [])
            if e["name"].startswith("K8S_ROLLOUT_")
        )
        lines.append(
            f"{job['metadata']['name']} (hook {labels.get('rollouts.kusionstack.io/hook', '?')}): {env}"
        )
    return lines


@contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send every log record (operator, kopf, traffic controller) to ``path``, not the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    before = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
        handler.close()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_playground(
    *, name: str = "playground", watch: bool = True, webhook_port: int = 0, down: bool = False
) -> int:
    """The demo (see the module docstring); returns the process exit code."""
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM tears down like Ctrl-C
    logfile = workdir() / f"{name}.playground.log"
    operator: OperatorThread | None = None
    traffic: TrafficThread | None = None
    code = EXIT_COMPLETE
    demo_done = False
    try:
        with _logs_to(logfile):
            try:
                kubeconfig = cluster_up(name=name, nodes=3)
                kubectl = ensure_binaries(say=lambda _: None).kubectl
                say(f"cluster {name!r} is up; kubeconfig: {kubeconfig}")
                port = webhook_port or free_port()
                operator = OperatorThread(
                    OperatorConfig(kubeconfig=str(kubeconfig), webhook_port=port)
                ).start()
                say(f"operator running (CRDs installed, admission webhooks on 127.0.0.1:{port})")
                if not QUICKSTART.is_dir() or not TRAFFIC_CONTROLLER.is_file():
                    raise PlaygroundError(f"the examples are not next to this installation ({EXAMPLES})")
                traffic = TrafficThread(
                    kubeconfig=kubeconfig, namespace=NAMESPACE, configmap=CONFIGMAP
                ).start()
                say(
                    f"traffic controller running ({TRAFFIC_CONTROLLER.relative_to(EXAMPLES.parent)}): "
                    f"ConfigMap {CONFIGMAP} lists the pods in service"
                )
                say(f"logs of both: {logfile}")
                code = _demo(kubectl=kubectl, kubeconfig=kubeconfig, name=name, watch=watch)
                demo_done = True
            except (ClusterError, StartupError, PlaygroundError) as e:
                say(f"rollouts: {e}")
                return 1
            if watch:
                say("\nThe playground keeps running. Ctrl-C stops the traffic controller and the operator.")
                while True:
                    time.sleep(3600)
    except KeyboardInterrupt:
        say("\ninterrupted: tearing down")
        if not demo_done:
            code = EXIT_INTERRUPTED
    finally:
        if traffic is not None:
            traffic.stop()
            failed = f" (it had failed: {traffic.error!r}; see {logfile})" if traffic.error else ""
            say(f"traffic controller stopped{failed}")
        if operator is not None:
            operator.stop()
            say("operator stopped")
        if down:
            try:
                cluster_down(name=name)
                say(f"cluster {name!r} removed")
            except ClusterError as e:
                say(f"rollouts: removing cluster {name!r} failed: {e}")
                code = code or 1
        else:
            say(f"cluster {name!r} left running; remove it with: rollouts cluster down --name {name}")
    return code


def _demo(*, kubectl: Path, kubeconfig: Path, name: str, watch: bool) -> int:
    say(f"\n$ kubectl apply -f {QUICKSTART.relative_to(EXAMPLES.parent)}/")
    _kubectl(kubectl, kubeconfig, "apply", "-n", NAMESPACE, "-f", str(QUICKSTART))
    say(f"\nwaiting for the {COLLASET} pods to be service-available (traffic on, protection finalizer held)")
    code, message = _follow(kubeconfig, _Summary(), timeout=CI_TIMEOUT_SECONDS)
    if code != EXIT_COMPLETE:
        raise PlaygroundError(f"the quickstart CollaSet did not become ready: {message}")
    say(f"  {message}")

    collaset = _kubectl_json(kubectl, kubeconfig, "get", "-n", NAMESPACE, f"collasets.{GROUP}", COLLASET)
    current = collaset["spec"]["template"]["spec"]["containers"][0].get("image")
    image = next_image(current)
    patch = f'[{{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"{image}"}}]'
    say(f"\nrolling out {image} (was {current}):\n$ kubectl patch cls {COLLASET} --type json -p '{patch}'")
    _kubectl(
        kubectl,
        kubeconfig,
        "patch",
        "-n",
        NAMESPACE,
        f"collasets.{GROUP}",
        COLLASET,
        "--type",
        "json",
        "-p",
        patch,
    )
    say(f"$ rollouts status cls/{COLLASET}\n")
    display = make_display(sys.stdout) if watch else PlainDisplay(out=sys.stdout)
    code, message = _follow(kubeconfig, display, timeout=None if watch else CI_TIMEOUT_SECONDS)
    say(message)

    jobs = _kubectl_json(
        kubectl,
        kubeconfig,
        "get",
        "jobs",
        "-n",
        NAMESPACE,
        "-l",
        f"rollouts.kusionstack.io/collaset={COLLASET}",
    )["items"]
    revision = collaset_revision(
        _kubectl_json(kubectl, kubeconfig, "get", "-n", NAMESPACE, f"collasets.{GROUP}", COLLASET)
    )
    ours = [
        j for j in jobs if (j["metadata"].get("labels") or {}).get("controller-revision-hash") == revision
    ]
    k = f"kubectl --kubeconfig {kubeconfig}"
    say("\nHook Jobs of this rollout, with the variables their command (env | grep K8S_ROLLOUT_) prints:")
    for line in describe_hook_jobs(ours):
        say(f"  {line}")
    first = ours[0]["metadata"]["name"] if ours else "<job>"
    say(
        "This local cluster runs pods on kwok, which starts no containers: the Jobs complete but have no\n"
        "logs here. On a real cluster read them with\n"
        f"  {k} logs job/{first}\n"
        "Here, see the Job and its injected environment with\n"
        f"  {k} describe job {first}"
    )
    say(f"\nThe load balancer (the traffic controller's ConfigMap):\n  {k} get configmap {CONFIGMAP} -o yaml")
    say(f"Follow the next rollout:\n  rollouts status cls/{COLLASET} --kubeconfig {kubeconfig}")
    if watch:
        say(
            "Tear everything down:\n  Ctrl-C (stops the operator and the traffic controller), then\n"
            f"  rollouts cluster down --name {name}"
        )
    return code


def collaset_revision(collaset: dict[str, Any]) -> str | None:
    revision = (collaset.get("status") or {}).get("updatedRevision")
    return None if revision is None else str(revision)
