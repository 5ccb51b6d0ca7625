"""Helpers of the examples tier (this module holds no tests): the real kubectl, run on example files.

Each example test applies files from ``examples/`` exactly as its README says, with the
``kubectl`` binary built for the local control plane, into the test's namespace, and then
checks the outcome through the API (:class:`~tests.integration.test_collaset_support.Workload`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from hooks.rendering import HOOK_LABEL, REVISION_LABEL
from tests.integration.ptr_support import kubectl_binary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: How long ``kubectl apply`` is retried while the API server cannot reach the operator's webhooks
#: (right after an operator start its webhook configuration may still name an old port).
WEBHOOK_GRACE_SECONDS = 15.0
#: kubectl patch changing the image of a CollaSet's first container, as the READMEs write it.
IMAGE_PATCH = '[{{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "{image}"}}]'


class KubectlError(AssertionError):
    """kubectl exited non-zero; the message carries the command and its stderr."""


@dataclass(frozen=True)
class Example:
    """The examples' files and the real kubectl, pointed at one cluster and namespace."""

    kubeconfig: Path
    namespace: str

    async def kubectl(self, *args: str) -> str:
        """Run ``kubectl ARGS -n NS --kubeconfig K``; its stdout, or :class:`KubectlError`."""
        command = [kubectl_binary(), *args, "-n", self.namespace, "--kubeconfig", str(self.kubeconfig)]
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await process.communicate()
        if process.returncode != 0:
            raise KubectlError(
                f"`{' '.join(command[:1] + list(args))}` exited {process.returncode}: {err.decode().strip()}"
            )
        return out.decode()

    async def apply(self, directory: str | Path) -> str:
        """``kubectl apply -f examples/<directory>/`` (or an absolute directory), retried only while
        the operator's admission webhook cannot be reached yet."""
        path = directory if isinstance(directory, Path) else EXAMPLES / directory
        assert path.is_dir(), f"{path} is not a directory"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WEBHOOK_GRACE_SECONDS
        while True:
            try:
                return await self.kubectl("apply", "-f", f"{path}/")
            except KubectlError as error:
                if "failed calling webhook" not in str(error) or loop.time() > deadline:
                    raise
            await asyncio.sleep(0.2)

    async def set_image(self, kind: str, name: str, image: str) -> str:
        """The READMEs' ``kubectl patch <kind> <name> --type json`` replacing the first container's image."""
        return await self.kubectl(
            "patch", kind, name, "--type", "json", "-p", IMAGE_PATCH.format(image=image)
        )


async def controller_revisions(api: client.ApiClient, namespace: str, app: str) -> dict[str, int]:
    """ControllerRevision name -> ``revision`` number, for the CollaSet whose pods are ``app=<app>``."""
    found = await client.AppsV1Api(api).list_namespaced_controller_revision(
        namespace, label_selector=f"app={app}"
    )
    return {r.metadata.name: r.revision for r in found.items}


def container_env(job: Any) -> dict[str, str]:
    """The env of a Job's first container as a dict."""
    return {e.name: e.value for e in job.spec.template.spec.containers[0].env or []}


def job_for(jobs: list[Any], *, revision: str, hook: str) -> Any:
    """The one hook Job of ``hook`` for ``revision`` (fails the test if there is not exactly one)."""
    found = [
        j
        for j in jobs
        if j.metadata.labels.get(REVISION_LABEL) == revision and j.metadata.labels.get(HOOK_LABEL) == hook
    ]
    assert len(found) == 1, [j.metadata.name for j in jobs]
    return found[0]
