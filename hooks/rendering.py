"""Pure rendering of hook Jobs and reading them back.

The hook planner (:mod:`hooks.planning`) decides *that* a hook runs; this module says
*what* is created: a batch/v1 Job built from the hook's ``jobSpec`` with

* a deterministic name from (CollaSet, hook, revision), at most 63 characters, so a
  409 on create means "already there" and a restart never runs a hook twice;
* ``K8S_ROLLOUT_FROM_OBJECT`` / ``K8S_ROLLOUT_TO_OBJECT`` (``namespace/name`` of the
  source and target ControllerRevisions) and ``K8S_ROLLOUT_TYPE`` injected into every
  container and init container that does not define them already (user values win);
* labels naming the CollaSet, the hook and the target revision (the watch index);
* an owner reference to the target ControllerRevision, so pruning the revision
  garbage-collects its hook Jobs;
* the hook's ``activeDeadlineSeconds`` when the jobSpec has none, and
  ``restartPolicy: Never`` when its pod template has none (a Job rejects ``Always``).

It also classifies an observed Job into a :class:`~hooks.models.HookPhase` from its
conditions (``Complete`` / ``SuccessCriteriaMet`` vs ``Failed`` / ``FailureTarget``,
including ``DeadlineExceeded``). No I/O here: the rollouts I/O layer sends the dicts.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hooks.models import HookPhase, LifecycleHook, RolloutType

COLLASET_LABEL: Final = "rollouts.kusionstack.io/collaset"
HOOK_LABEL: Final = "rollouts.kusionstack.io/hook"
#: Same key as pods and ControllerRevisions use; the value is the target revision's name.
REVISION_LABEL: Final = "controller-revision-hash"
POINT_ANNOTATION: Final = "rollouts.kusionstack.io/progress-point"

ENV_FROM: Final = "K8S_ROLLOUT_FROM_OBJECT"
ENV_TO: Final = "K8S_ROLLOUT_TO_OBJECT"
ENV_TYPE: Final = "K8S_ROLLOUT_TYPE"

MAX_NAME_LENGTH: Final = 63
_HASH_LENGTH: Final = 8


def name_job(*, collaset: str, hook: str, revision: str) -> str:
    """The hook Job's name: ``<collaset>-<hook>-<hash>``, at most 63 characters.

    The hash (8 hex digits of sha256 over the three parts) makes the name differ per
    revision and keeps ``a-b`` + ``c`` apart from ``a`` + ``b-c``; when the readable part
    is too long it is cut so the hash always fits. The 63 limit is the Job controller's:
    it copies the Job name into its pods' ``job-name`` label.
    """
    digest = hashlib.sha256(f"{collaset}\0{hook}\0{revision}".encode()).hexdigest()[:_HASH_LENGTH]
    base = f"{collaset}-{hook}"[: MAX_NAME_LENGTH - _HASH_LENGTH - 1].rstrip("-.")
    return f"{base}-{digest}"


def label_job(*, collaset: str, hook: str, revision: str) -> dict[str, str]:
    """The labels every hook Job carries; the rollouts watch selects on the first one."""
    return {COLLASET_LABEL: collaset, HOOK_LABEL: hook, REVISION_LABEL: revision}


def render_job(
    *,
    collaset: str,
    namespace: str,
    hook: LifecycleHook,
    point: int,
    from_revision: str,
    to_revision: str,
    rollout_type: RolloutType,
    owner_revision_uid: str,
) -> dict[str, Any]:
    """The batch/v1 Job manifest running ``hook`` for the rollout ``from_revision`` -> ``to_revision``."""
    spec = copy.deepcopy(hook.job_spec)
    if "activeDeadlineSeconds" not in spec:
        spec["activeDeadlineSeconds"] = hook.active_deadline_seconds
    env = {
        ENV_FROM: f"{namespace}/{from_revision}",
        ENV_TO: f"{namespace}/{to_revision}",
        ENV_TYPE: rollout_type.value,
    }
    pod_spec = spec.setdefault("template", {}).setdefault("spec", {})
    # A Job rejects the pod default (Always); Never keeps failed attempts around for their logs.
    pod_spec.setdefault("restartPolicy", "Never")
    for key in ("initContainers", "containers"):
        for container in pod_spec.get(key) or []:
            _inject_env(container, env)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name_job(collaset=collaset, hook=hook.name, revision=to_revision),
            "namespace": namespace,
            "labels": label_job(collaset=collaset, hook=hook.name, revision=to_revision),
            "annotations": {POINT_ANNOTATION: str(point)},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ControllerRevision",
                    "name": to_revision,
                    "uid": owner_revision_uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def _inject_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    """Append the rollout variables a container does not define yet (the user's value wins)."""
    current: list[dict[str, Any]] = list(container.get("env") or [])
    defined = {item.get("name") for item in current}
    current.extend({"name": name, "value": value} for name, value in env.items() if name not in defined)
    container["env"] = current


@dataclass(frozen=True, kw_only=True)
class JobOutcome:
    """A Job's state as the hook planner needs it."""

    phase: HookPhase
    reason: str = ""
    message: str = ""
    finished_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class JobView:
    """An observed hook Job: who it belongs to and how it is doing."""

    name: str
    collaset: str
    hook: str
    revision: str
    outcome: JobOutcome
    deleting: bool = False


_SUCCESS_CONDITIONS: Final = ("Complete", "SuccessCriteriaMet")
_FAILURE_CONDITIONS: Final = ("Failed", "FailureTarget")


def classify_job(job: Mapping[str, Any]) -> JobOutcome:
    """Running, Succeeded or Failed from the Job's conditions (a Job without them is Running).

    ``SuccessCriteriaMet`` / ``FailureTarget`` (Kubernetes >= 1.31) are the verdicts the
    Job controller reaches before it sets ``Complete`` / ``Failed``; taking them moves
    the rollout on without waiting for pod termination.
    """
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        kind = condition.get("type")
        if kind in _SUCCESS_CONDITIONS or kind in _FAILURE_CONDITIONS:
            reason = str(condition.get("reason") or "")
            message = str(condition.get("message") or "")
            if kind in _SUCCESS_CONDITIONS:
                finished = _parse_time(status.get("completionTime") or condition.get("lastTransitionTime"))
                return JobOutcome(
                    phase=HookPhase.SUCCEEDED, reason=reason, message=message, finished_at=finished
                )
            text = f"{reason}: {message}" if reason and message else reason or message or "job failed"
            finished = _parse_time(condition.get("lastTransitionTime"))
            return JobOutcome(phase=HookPhase.FAILED, reason=reason, message=text, finished_at=finished)
    active = status.get("active") or 0
    return JobOutcome(phase=HookPhase.RUNNING, message=f"{active} active pod(s)" if active else "")


def view_job(job: Mapping[str, Any]) -> JobView | None:
    """A :class:`JobView` of a hook Job, or None when the Job lacks the hook labels."""
    metadata = job.get("metadata") or {}
    labels = metadata.get("labels") or {}
    collaset, hook, revision = labels.get(COLLASET_LABEL), labels.get(HOOK_LABEL), labels.get(REVISION_LABEL)
    if not (collaset and hook and revision and metadata.get("name")):
        return None
    return JobView(
        name=str(metadata["name"]),
        collaset=str(collaset),
        hook=str(hook),
        revision=str(revision),
        outcome=classify_job(job),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
