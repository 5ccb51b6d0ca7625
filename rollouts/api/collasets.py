"""The CollaSet API (``apps.kusionstack.io/v1alpha1``, short name ``cls``): spec, status and the object.

A CollaSet owns its pods directly (no ReplicaSets), keeps its templates as
ControllerRevisions, changes pods through PodOpsLifecycle and runs lifecycle hooks
(:mod:`hooks.models`) at progress points of a rollout. These pydantic models are the
one source of the API: the CRD generator turns ``CollaSet.model_json_schema(by_alias=True)``
into ``crds/``; admission (:mod:`rollouts.api.validating`) and the planners
(``rollouts.planning``) parse objects with them.

Where we differ from KusionStack Operating (see the operating reference, section 6):
``historyLimit`` really defaults to 20 and is honoured, ``paused`` stops updates,
``rollingUpdate.maxUnavailable`` exists (it becomes a default PodTransitionRule
budget), the policy field is spelled ``podUpdatePolicy`` and ``Replace`` is not offered
(replace-by-surge is out of scope). Pod templates and Job specs are kept unstructured:
the API server validates them when pods and Jobs are created.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import Field

from hooks.models import HookStatus, LifecycleHook
from lifecycle.schema import ApiModel, Condition, IntOrString, LabelSelector, Unstructured

GROUP: Final = "apps.kusionstack.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "CollaSet"

DEFAULT_HISTORY_LIMIT: Final = 20
#: Opt-in label of the ByLabel update strategy (any value).
UPDATE_INCLUDED_LABEL: Final = "collaset.kusionstack.io/update-included"
#: Annotation recording, per in-place updated container, the image asked for and the imageID before.
LAST_POD_STATUS_ANNOTATION: Final = "collaset.kusionstack.io/last-pod-status"
#: On pods and ControllerRevisions: the revision (name) a pod was created from.
REVISION_LABEL: Final = "controller-revision-hash"
#: On ControllerRevisions: the template hash.
HASH_LABEL: Final = "controller.kubernetes.io/hash"
#: The default PodTransitionRule of ``rollingUpdate.maxUnavailable`` is ``<collaset><suffix>``.
DEFAULT_RULE_SUFFIX: Final = "-max-unavailable"
#: PodTransitionRule names go into pod annotation keys (``detail.podtransitionrule.kusionstack.io/<name>``).
MAX_RULE_NAME_LENGTH: Final = 63


def default_rule_name(collaset: str) -> str:
    """The PodTransitionRule a CollaSet owns for ``rollingUpdate.maxUnavailable``."""
    return f"{collaset}{DEFAULT_RULE_SUFFIX}"


class PodUpdatePolicy(StrEnum):
    IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
    """Patch images / metadata in place when that is all that changed, else recreate."""
    IN_PLACE_ONLY = "InPlaceOnly"
    """Patch in place; a change that needs a new pod is reported and not rolled out."""
    RECREATE = "Recreate"
    """Delete the pod; a new one is created from the new revision."""


class ConditionType(StrEnum):
    SCALE = "Scale"
    UPDATE = "Update"
    #: True once the rollout of the updated revision stopped for good (reason HookFailed).
    FAILED = "Failed"
    #: Only with progressDeadlineSeconds: False (ProgressDeadlineExceeded) when a rollout is stuck.
    PROGRESSING = "Progressing"


class ProgressReason(StrEnum):
    """Reasons of the Progressing condition (the native Deployment's, where it has one)."""

    PROGRESSING = "Progressing"
    COMPLETE = "Complete"
    PAUSED = "Paused"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


class ByPartition(ApiModel):
    partition: int | None = Field(
        default=None,
        ge=0,
        description="Pods kept on the old revision; unset updates all pods.",
    )


class ByLabel(ApiModel):
    """Update only the pods labelled ``collaset.kusionstack.io/update-included``."""


class RollingUpdate(ApiModel):
    by_partition: ByPartition | None = Field(default=None, description="Update all but `partition` pods.")
    by_label: ByLabel | None = Field(
        default=None, description="Update the pods labelled collaset.kusionstack.io/update-included."
    )
    max_unavailable: IntOrString | None = Field(
        default=None,
        description=(
            "Pods (number or percentage of replicas) that may be unavailable during an update; creates a "
            "default PodTransitionRule budget. Must not be 0."
        ),
    )


class UpdateStrategy(ApiModel):
    rolling_update: RollingUpdate = Field(
        default_factory=RollingUpdate, description="Which pods get updated."
    )
    pod_update_policy: PodUpdatePolicy = Field(
        default=PodUpdatePolicy.IN_PLACE_IF_POSSIBLE,
        description="InPlaceIfPossible (default), InPlaceOnly or Recreate.",
    )
    operation_delay_seconds: int = Field(
        default=0, ge=0, description="Seconds a pod waits in the Operating phase before it is updated."
    )


class ScaleStrategy(ApiModel):
    pod_to_delete: list[str] = Field(
        default_factory=list, description="Names of pods to delete first (through PodOpsLifecycle)."
    )
    operation_delay_seconds: int = Field(
        default=0, ge=0, description="Seconds a pod waits in the Operating phase before it is scaled in."
    )


class CollaSetSpec(ApiModel):
    replicas: int = Field(default=1, ge=0, description="Desired number of pods.")
    selector: LabelSelector = Field(description="Selects the pods of this CollaSet; must match the template.")
    template: Unstructured = Field(description="Pod template (a core/v1 PodTemplateSpec).")
    paused: bool = Field(default=False, description="Stop updating pods; scaling goes on.")
    history_limit: int = Field(
        default=DEFAULT_HISTORY_LIMIT, ge=0, description="Unused ControllerRevisions to keep (default 20)."
    )
    update_strategy: UpdateStrategy = Field(
        default_factory=UpdateStrategy, description="How pods are updated."
    )
    scale_strategy: ScaleStrategy = Field(
        default_factory=ScaleStrategy, description="How pods are scaled in."
    )
    progress_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Seconds a rollout may make no progress before it is reported stuck."
    )
    lifecycle_hooks: list[LifecycleHook] = Field(
        default_factory=list,
        description="Jobs run at progress points of a rollout (lifecycle hooks proposal).",
    )

    @property
    def update_cap(self) -> int | None:
        """Pods the byPartition strategy lets onto the new revision; None for byLabel."""
        rolling = self.update_strategy.rolling_update
        if rolling.by_label is not None and rolling.by_partition is None:
            return None
        partition = rolling.by_partition.partition if rolling.by_partition is not None else None
        return self.replicas if partition is None else max(0, self.replicas - partition)


class CollaSetStatus(ApiModel):
    observed_generation: int | None = Field(default=None, description="Generation the status describes.")
    current_revision: str | None = Field(
        default=None,
        description="Revision the rollout started from; becomes updatedRevision once it is done.",
    )
    updated_revision: str | None = Field(default=None, description="Revision of the current template.")
    collision_count: int = Field(default=0, ge=0, description="Bumped when a revision name clashes.")
    replicas: int = Field(default=0, ge=0, description="Live pods.")
    ready_replicas: int = Field(default=0, ge=0, description="Pods Ready.")
    available_replicas: int = Field(default=0, ge=0, description="Pods service-available.")
    updated_replicas: int = Field(default=0, ge=0, description="Pods on the updated revision.")
    updated_ready_replicas: int = Field(default=0, ge=0, description="Ready pods on the updated revision.")
    updated_available_replicas: int = Field(
        default=0, ge=0, description="Service-available pods on the updated revision."
    )
    operating_replicas: int = Field(
        default=0, ge=0, description="Pods during an update or scale-in operation."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Scale, Update and Failed conditions; Progressing with progressDeadlineSeconds.",
    )
    last_progress_time: str | None = Field(
        default=None,
        description=(
            "When the rollout last made progress (pods updated, ready or available, revision or hook "
            "changes); progressDeadlineSeconds counts from it."
        ),
    )
    hooks: list[HookStatus] = Field(default_factory=list, description="Hooks of the current rollout.")
    hook_phase: str | None = Field(
        default=None, description="Short hook summary for kubectl, e.g. 'Running db-migrate'."
    )


class CollaSet(ApiModel):
    api_version: Literal["apps.kusionstack.io/v1alpha1"] = "apps.kusionstack.io/v1alpha1"
    kind: Literal["CollaSet"] = "CollaSet"
    metadata: Unstructured = Field(default_factory=dict)
    spec: CollaSetSpec
    status: CollaSetStatus | None = None
