"""The PodTransitionRule API (``apps.kusionstack.io/v1alpha1``, short name ``ptr``) as pydantic models.

These models are the one source of the CRD: the generator turns their JSON schema into
``crds/*.yaml``, the admission webhook (:mod:`lifecycle.rules.validating`) parses with them,
and the evaluation core (:mod:`lifecycle.rules.evaluating`) reads spec and previous status
through them. The spec accepts the KusionStack seed's manifests unchanged, including both
spellings of ``availablePolicy`` (``maxUnavailableValue`` and ``maxUnavailable.value``).

Checks that the rules cannot work without (one kind per rule, well-formed budgets) are
validators here, so a parsed model is always evaluable; checks that only matter when an
object is admitted (unique names, URLs, CA bundles, field paths) live in ``validating``.
The status also carries webhook poll tasks, so polling resumes from status after a restart.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Any, Final, Literal

from pydantic import Field, field_validator, model_validator

from lifecycle.schema import ApiModel, IntOrString, LabelSelector
from lifecycle.states import Stage as _LifecycleStage

GROUP: Final = "apps.kusionstack.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PodTransitionRule"
PLURAL: Final = "podtransitionrules"
SHORT_NAMES: Final = ("ptr",)

#: Pod annotation, JSON ``{"skipRules": ["<ruleName>", ...]}``: those rules let the pod through.
SKIP_RULE_CONDITIONS: Final = "podtransitionrule.kusionstack.io/skip-rule-conditions"
#: Pod annotation ``<prefix>/<ptrName>`` = JSON ``{"stage": ..., "passed": ...}``.
DETAIL_ANNOTATION_PREFIX: Final = "detail.podtransitionrule.kusionstack.io"
#: Finalizer the controller keeps on a PTR until the detail annotations are cleaned up.
FINALIZER: Final = "finalizer.operating.kusionstack.io/protected"

DEFAULT_POLL_INTERVAL_SECONDS: Final = 5
DEFAULT_POLL_TIMEOUT_SECONDS: Final = 60
DEFAULT_POLL_QUERY_KEY: Final = "task-id"
#: The query key of the deprecated ``async`` answer (the poll id is then the trace id).
ASYNC_POLL_QUERY_KEY: Final = "trace-id"

_PERCENT = re.compile(r"^(\d{1,10})%$")


# The stages rules gate are the lifecycle's own (one enum for both).
Stage = _LifecycleStage


class FailurePolicy(StrEnum):
    """What a webhook rule does when its server cannot be reached or answers garbage."""

    IGNORE = "Ignore"
    FAIL = "Fail"


RuleKind = Literal["availablePolicy", "labelCheck", "webhook"]


def parse_int_or_percent(value: int | str) -> tuple[int, bool]:
    """``5 -> (5, False)``, ``"50%" -> (50, True)``; ``ValueError`` naming the accepted forms otherwise.

    Strings must be whole percentages: ``"5"`` or ``"12.5%"`` are refused, as the API
    server's intstr scaling would refuse them.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a valid value: use an integer or a whole percentage like 50%")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative: use a non-negative integer or a percentage like 50%")
        return value, False
    match = _PERCENT.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a valid value: use an integer or a whole percentage like 50%")
    percent = int(match.group(1))
    if percent > 100:
        raise ValueError(f"{value!r} is not a valid percentage: it must be between 0% and 100%")
    return percent, True


def _check_budget(value: int | str) -> int | str:
    amount, _ = parse_int_or_percent(value)
    if amount == 0:
        raise ValueError("must not be 0: a max unavailable budget of 0 would block every pod")
    return value


def _check_floor(value: int | str) -> int | str:
    parse_int_or_percent(value)
    return value


def _refuse_bool(value: Any) -> Any:
    # pydantic's lax int would turn true into 1; a budget of `true` is a typo, not a number
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a valid value: use an integer or a whole percentage like 50%")
    return value


# -- spec -----------------------------------------------------------------------------------------


class MaxUnavailable(ApiModel):
    """The seed's nested spelling ``maxUnavailable: {value: ...}``."""

    value: IntOrString = Field(description="Absolute number (ex: 5) or percentage (ex: 10%); not 0.")

    _no_bool = field_validator("value", mode="before")(_refuse_bool)
    _budget = field_validator("value")(_check_budget)


class MinAvailable(ApiModel):
    """The seed's nested spelling ``minAvailable: {value: ...}``."""

    value: IntOrString = Field(description="Absolute number (ex: 5) or percentage (ex: 10%).")

    _no_bool = field_validator("value", mode="before")(_refuse_bool)
    _floor = field_validator("value")(_check_floor)


class AvailablePolicy(ApiModel):
    """How many of the rule's selected pods may be unavailable at once.

    Percentages are of all pods the PodTransitionRule selects, rounded down, except that a
    positive percentage never resolves to 0.
    """

    max_unavailable_value: IntOrString | None = Field(
        default=None,
        description="Maximum number (ex: 5) or percentage (ex: 10%) of selected pods that may be "
        "unavailable. Percentages round down, but never to 0. Not 0.",
    )
    min_available_value: IntOrString | None = Field(
        default=None,
        description="Minimum number (ex: 5) or percentage (ex: 10%) of selected pods that must stay "
        "available. Percentages round down, but never to 0.",
    )
    max_unavailable: MaxUnavailable | None = Field(
        default=None,
        description="Same as maxUnavailableValue, written as {value: ...}; set only one of them.",
    )
    min_available: MinAvailable | None = Field(
        default=None, description="Same as minAvailableValue, written as {value: ...}; set only one of them."
    )

    _no_bool = field_validator("max_unavailable_value", "min_available_value", mode="before")(_refuse_bool)
    _budget = field_validator("max_unavailable_value")(_check_budget)
    _floor = field_validator("min_available_value")(_check_floor)

    @model_validator(mode="after")
    def _one_spelling_and_some_limit(self) -> AvailablePolicy:
        if self.max_unavailable_value is not None and self.max_unavailable is not None:
            raise ValueError(
                "maxUnavailableValue and maxUnavailable.value are two spellings of one field: set only one"
            )
        if self.min_available_value is not None and self.min_available is not None:
            raise ValueError(
                "minAvailableValue and minAvailable.value are two spellings of one field: set only one"
            )
        if self.max_unavailable_limit() is None and self.min_available_limit() is None:
            raise ValueError(
                "set at least one of maxUnavailableValue (or maxUnavailable.value) and minAvailableValue"
            )
        return self

    def max_unavailable_limit(self) -> int | str | None:
        """The max-unavailable value whichever spelling carries it."""
        if self.max_unavailable is not None:
            return self.max_unavailable.value
        return self.max_unavailable_value

    def min_available_limit(self) -> int | str | None:
        """The min-available value whichever spelling carries it."""
        if self.min_available is not None:
            return self.min_available.value
        return self.min_available_value


class LabelCheck(ApiModel):
    requires: LabelSelector = Field(description="Pods pass when their labels match this selector.")


class FieldRef(ApiModel):
    field_path: str = Field(
        min_length=1,
        description="Path into the pod: metadata.name, metadata.labels['k'], metadata.annotations['k'], "
        'metadata.labels (all, as sorted k="v" lines), status.podIP, spec.nodeName, ...',
    )


class ParameterSource(ApiModel):
    field_ref: FieldRef = Field(description="Selects a field of the pod.")


class Parameter(ApiModel):
    key: str = Field(min_length=1, description="Key in resources[].parameters of the webhook request.")
    value: str | None = Field(
        default=None, description="A constant value; wins over valueFrom when non-empty."
    )
    value_from: ParameterSource | None = Field(
        default=None, description="Take the value from a field of the pod."
    )

    @model_validator(mode="after")
    def _has_source(self) -> Parameter:
        if not self.value and self.value_from is None:
            raise ValueError("set value or valueFrom.fieldRef.fieldPath")
        return self


class Poll(ApiModel):
    url: str = Field(min_length=1, description="Polled with GET <url>?<rawQueryKey>=<taskId>.")
    raw_query_key: str | None = Field(
        default=None,
        description="Query parameter carrying the task id; defaults to task-id (trace-id for async answers).",
    )
    ca_bundle: str | None = Field(
        default=None,
        description="Base64 PEM CA certificates for the poll server; defaults to clientConfig.caBundle.",
    )
    interval_seconds: int = Field(
        default=DEFAULT_POLL_INTERVAL_SECONDS, ge=1, description="Seconds between polls."
    )
    timeout_seconds: int = Field(
        default=DEFAULT_POLL_TIMEOUT_SECONDS,
        ge=1,
        description="Seconds after which a task is stopped and rejected.",
    )


class ClientConfig(ApiModel):
    url: str = Field(min_length=1, description="The webhook is called with POST <url>; http or https.")
    ca_bundle: str | None = Field(
        default=None,
        description="Base64 of PEM CA certificates that verify the server; "
        "empty (or Cg==) uses the system roots.",
    )
    poll: Poll | None = Field(default=None, description="Where to fetch the result of long-running checks.")


class Webhook(ApiModel):
    client_config: ClientConfig
    failure_policy: FailurePolicy = Field(
        default=FailurePolicy.IGNORE,
        description="Ignore lets pods pass when the server cannot be reached or answers garbage; "
        "Fail blocks them.",
    )
    parameters: tuple[Parameter, ...] = Field(
        default=(), description="Per-pod values sent with each resource."
    )

    def poll_ca_bundle(self) -> str | None:
        """The CA bundle for polling: the poll's own, else the client config's."""
        poll = self.client_config.poll
        if poll is not None and poll.ca_bundle:
            return poll.ca_bundle
        return self.client_config.ca_bundle


class RuleFilter(ApiModel):
    label_selector: LabelSelector | None = Field(
        default=None, description="Only pods matching it are checked by the rule; others pass it."
    )


_KINDS: Final[tuple[RuleKind, ...]] = ("availablePolicy", "labelCheck", "webhook")


class Rule(ApiModel):
    """One named check; exactly one of availablePolicy, labelCheck and webhook."""

    name: str = Field(min_length=1, description="Unique within the PodTransitionRule.")
    stage: Stage = Field(default=Stage.PRE_CHECK, description="The stage the rule gates.")
    disabled: bool = Field(default=False, description="Disabled rules are not evaluated.")
    filter: RuleFilter | None = Field(default=None, description="Restricts which pods the rule checks.")
    available_policy: AvailablePolicy | None = None
    label_check: LabelCheck | None = None
    webhook: Webhook | None = None

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Rule:
        kinds = self.kinds()
        if len(kinds) != 1:
            found = " and ".join(kinds) if kinds else "none"
            raise ValueError(
                f"a rule needs exactly one of availablePolicy, labelCheck, webhook; found {found}"
            )
        return self

    def kinds(self) -> tuple[RuleKind, ...]:
        present = (self.available_policy, self.label_check, self.webhook)
        return tuple(kind for kind, value in zip(_KINDS, present, strict=True) if value is not None)

    def kind(self) -> RuleKind:
        return self.kinds()[0]


class PodTransitionRuleSpec(ApiModel):
    selector: LabelSelector = Field(description="The pods the rules gate (in the rule's namespace).")
    rules: tuple[Rule, ...] = Field(
        default=(), description="Checks, evaluated budget first, then labels, then webhooks."
    )


# -- status ---------------------------------------------------------------------------------------


class RejectInfo(ApiModel):
    rule_name: str
    reason: str


class PodDetail(ApiModel):
    """What the rules said about one selected pod in its current stage."""

    name: str
    stage: Stage
    passed: bool = Field(description="Always written, false included.")
    passed_rules: tuple[str, ...] = ()
    reject_info: tuple[RejectInfo, ...] = ()


class TaskState(ApiModel):
    """One webhook poll task; kept in status so polling resumes after a restart."""

    task_id: str
    trace_id: str = ""
    query_key: str = Field(
        default=DEFAULT_POLL_QUERY_KEY, description="Query parameter the task id is sent in."
    )
    processing: tuple[str, ...] = Field(default=(), description="Pods still waiting for the server.")
    approved: tuple[str, ...] = Field(default=(), description="Pods the server approved.")
    begin_time: datetime
    last_time: datetime | None = Field(default=None, description="When the task was last polled.")
    message: str = ""
    stopped: bool = Field(
        default=False, description="No more polls: stopped by the server, timed out, or failed."
    )


class WebhookStatus(ApiModel):
    task_states: tuple[TaskState, ...] = ()
    history: tuple[TaskState, ...] = Field(default=(), description="Finished tasks of the last ten minutes.")


class RuleState(ApiModel):
    name: str
    webhook_status: WebhookStatus | None = None


class Summary(ApiModel):
    """Counts for printer columns."""

    selected: int = Field(default=0, ge=0, description="Pods the selector matches.")
    passed: int = Field(default=0, ge=0, description="Pods in a stage that passed every rule of it.")
    rejected: int = Field(default=0, ge=0, description="Pods in a stage held back by a rule.")


class PodTransitionRuleStatus(ApiModel):
    observed_generation: int | None = None
    update_time: datetime | None = None
    targets: tuple[str, ...] = Field(default=(), description="Sorted names of the selected pods.")
    details: tuple[PodDetail, ...] = Field(default=(), description="Per pod in a stage, sorted by name.")
    rule_states: tuple[RuleState, ...] = ()
    summary: Summary = Field(default_factory=Summary)

    @cached_property
    def _details_by_pod(self) -> dict[str, PodDetail]:
        return {detail.name: detail for detail in self.details}

    def detail_of(self, pod: str) -> PodDetail | None:
        """The detail of one pod, without a scan of every detail (a rollout asks for each pod)."""
        return self._details_by_pod.get(pod)


class PodTransitionRule(ApiModel):
    api_version: Literal["apps.kusionstack.io/v1alpha1"] = "apps.kusionstack.io/v1alpha1"
    kind: Literal["PodTransitionRule"] = "PodTransitionRule"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PodTransitionRuleSpec
    status: PodTransitionRuleStatus | None = None

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    @property
    def generation(self) -> int | None:
        generation = self.metadata.get("generation")
        return generation if isinstance(generation, int) else None
