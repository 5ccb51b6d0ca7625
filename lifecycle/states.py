"""Parse a pod's lifecycle labels into per-operation state: the first step of every decision.

Everything that reasons about PodOpsLifecycle (the state machine in
:mod:`lifecycle.advancing`, the operation library in :mod:`lifecycle.operations`, the
validating webhook, status counting in the rollouts) starts from
:func:`parse_state`, so there is one reading of the labels.

Id discovery
    Operating's ``IDToLabelsMap`` only finds ids through ``operating/``, ``operate/`` and
    ``operated/`` labels, so an id left with only e.g. ``pre-check/<id>`` or
    ``undo-operation-type/<id>`` is invisible and its labels linger forever. Here
    **every** id-keyed lifecycle label names an id. A label whose key starts with a
    lifecycle prefix but has no ``/<id>`` (or ``/<type>`` for the permission) raises
    :class:`InvalidLifecycleLabel` (``invalid label <key>``).

Per-operation phase (:class:`OperationPhase`), first match wins (ref. §2.7):

=============  ============================================================
Undo           ``undo-operation-type`` present (transient: wiped next write)
Completing     ``completing``
PostChecked    ``post-checked``
PostCheck      ``post-check``
Operated       ``operated`` (with ``done-operation-type``)
Operating      ``operate`` (AllowOps is true)
Preparing      ``preparing``
PreChecked     ``pre-checked`` (with the type's ``operation-permission``)
PreCheck       ``pre-check``
Begun          anything else (normally ``operating`` + ``operation-type`` only)
=============  ============================================================

Pod phase (:class:`PodPhase`): the least advanced live operation decides, because the
later steps are barriers every operation must reach together:

========================  ==================
operation phases          pod phase
========================  ==================
Begun, PreCheck           PreCheck
PreChecked, Preparing     Preparing
Operating, Operated       Operating
PostCheck, PostChecked    PostCheck
Completing                Completing
(no live operation)       ServiceAvailable with the ``service-available`` label, else
                          Idle with ``stay-offline`` (held out on purpose), else
                          NotAvailable (waiting for Ready / expected finalizers)
========================  ==================

Undone and abandoned operations (see :attr:`OperationState.is_live`) are not live: the
next write removes them.

Stage (:class:`Stage`, what PodTransitionRules are asked about) is deterministic, unlike
Operating's map-order pick (ref. §2.9): ``PostCheck`` when some operation carries
``post-check`` and every live operation is operated; otherwise ``PreCheck`` when some
operation carries ``pre-check``; otherwise none.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lifecycle.labels import (
    COMPLETING,
    DONE_OPERATION_TYPE,
    ID_PREFIXES,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_PERMISSION,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    SERVICE_AVAILABLE,
    STAY_OFFLINE,
    UNDO_OPERATION_TYPE,
    OperationId,
    OperationType,
    id_key,
)

_LIFECYCLE_PREFIXES = (*ID_PREFIXES, OPERATION_PERMISSION)
_LIFECYCLE_PREFIX_SET = frozenset(_LIFECYCLE_PREFIXES)


class InvalidLifecycleLabel(ValueError):
    """A label carries a lifecycle prefix but not the ``/<id>`` (or ``/<type>``) suffix."""

    def __init__(self, key: str) -> None:
        super().__init__(f"invalid label {key}")
        self.key = key


class OperationPhase(enum.StrEnum):
    """Where one operation (one id) is; see the module docstring for the precedence."""

    UNDO = "Undo"
    COMPLETING = "Completing"
    POST_CHECKED = "PostChecked"
    POST_CHECK = "PostCheck"
    OPERATED = "Operated"
    OPERATING = "Operating"
    PREPARING = "Preparing"
    PRE_CHECKED = "PreChecked"
    PRE_CHECK = "PreCheck"
    BEGUN = "Begun"


class PodPhase(enum.StrEnum):
    """Where the pod as a whole is; see the module docstring for the mapping."""

    PRE_CHECK = "PreCheck"
    PREPARING = "Preparing"
    OPERATING = "Operating"
    POST_CHECK = "PostCheck"
    COMPLETING = "Completing"
    SERVICE_AVAILABLE = "ServiceAvailable"
    IDLE = "Idle"
    NOT_AVAILABLE = "NotAvailable"


class Stage(enum.StrEnum):
    """The PodTransitionRule stage a pod is in (rules are evaluated per stage)."""

    PRE_CHECK = "PreCheck"
    POST_CHECK = "PostCheck"


#: Label present -> phase, in precedence order (Begun is the fallback).
_PHASE_ORDER: tuple[tuple[str, OperationPhase], ...] = (
    (UNDO_OPERATION_TYPE, OperationPhase.UNDO),
    (COMPLETING, OperationPhase.COMPLETING),
    (POST_CHECKED, OperationPhase.POST_CHECKED),
    (POST_CHECK, OperationPhase.POST_CHECK),
    (OPERATED, OperationPhase.OPERATED),
    (OPERATE, OperationPhase.OPERATING),
    (PREPARING, OperationPhase.PREPARING),
    (PRE_CHECKED, OperationPhase.PRE_CHECKED),
    (PRE_CHECK, OperationPhase.PRE_CHECK),
)

_POD_PHASE_OF: Mapping[OperationPhase, PodPhase] = {
    OperationPhase.BEGUN: PodPhase.PRE_CHECK,
    OperationPhase.PRE_CHECK: PodPhase.PRE_CHECK,
    OperationPhase.PRE_CHECKED: PodPhase.PREPARING,
    OperationPhase.PREPARING: PodPhase.PREPARING,
    OperationPhase.OPERATING: PodPhase.OPERATING,
    OperationPhase.OPERATED: PodPhase.OPERATING,
    OperationPhase.POST_CHECK: PodPhase.POST_CHECK,
    OperationPhase.POST_CHECKED: PodPhase.POST_CHECK,
    OperationPhase.COMPLETING: PodPhase.COMPLETING,
}

_POD_PHASE_RANK: Mapping[PodPhase, int] = {
    phase: rank
    for rank, phase in enumerate(
        (PodPhase.PRE_CHECK, PodPhase.PREPARING, PodPhase.OPERATING, PodPhase.POST_CHECK, PodPhase.COMPLETING)
    )
}


def split_lifecycle_key(key: str) -> tuple[str, str] | None:
    """``(prefix, suffix)`` of a lifecycle label key, ``None`` for any other key.

    The suffix is the operation id, or the operation type for ``operation-permission``.
    Raises :class:`InvalidLifecycleLabel` for a key that starts with a lifecycle prefix
    but is not exactly ``<prefix>/<non-empty suffix>``.
    """
    head, sep, tail = key.partition("/")
    if not sep:
        if key.startswith(_LIFECYCLE_PREFIXES):
            raise InvalidLifecycleLabel(key)
        return None
    if head not in _LIFECYCLE_PREFIX_SET:
        return None
    if not tail or "/" in tail:
        raise InvalidLifecycleLabel(key)
    return head, tail


@dataclass(frozen=True, kw_only=True)
class OperationState:
    """The lifecycle labels of one operation id: ``values`` maps prefix -> label value."""

    id: OperationId
    values: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    def has(self, prefix: str) -> bool:
        """Whether ``<prefix>/<id>`` is present."""
        return prefix in self.values

    def get(self, prefix: str) -> str | None:
        """The value of ``<prefix>/<id>``, if present."""
        return self.values.get(prefix)

    def key(self, prefix: str) -> str:
        """The label key ``<prefix>/<id>``."""
        return id_key(prefix, self.id)

    def label_keys(self) -> frozenset[str]:
        """Every label key of this id present on the pod."""
        return frozenset(self.key(p) for p in self.values)

    @property
    def active_type(self) -> OperationType | None:
        """``operation-type/<id>``: the type of an operation not yet operated."""
        value = self.values.get(OPERATION_TYPE)
        return None if value is None else OperationType(value)

    @property
    def done_type(self) -> OperationType | None:
        """``done-operation-type/<id>``: the type of an operated operation."""
        value = self.values.get(DONE_OPERATION_TYPE)
        return None if value is None else OperationType(value)

    @property
    def type(self) -> OperationType | None:
        """The operation type: ``operation-type`` else ``done-operation-type`` (as Operating counts types)."""
        return self.active_type or self.done_type

    @property
    def undo_type(self) -> OperationType | None:
        """``undo-operation-type/<id>``: set when the operation was cancelled."""
        value = self.values.get(UNDO_OPERATION_TYPE)
        return None if value is None else OperationType(value)

    @property
    def is_undone(self) -> bool:
        return UNDO_OPERATION_TYPE in self.values

    @property
    def is_abandoned(self) -> bool:
        """Neither operating, operate nor operated, and not undone.

        Only reachable when an operator finished (dropped ``operating``) before it was
        allowed to operate, or from hand edits: the operation never touched the pod.
        Operating loses track of such ids; the state machine treats them like an undo.
        """
        return not self.is_undone and not (
            OPERATING in self.values or OPERATE in self.values or OPERATED in self.values
        )

    @property
    def is_live(self) -> bool:
        """Taking part in the lifecycle (not undone, not abandoned)."""
        return not self.is_undone and not self.is_abandoned

    @property
    def phase(self) -> OperationPhase:
        for prefix, phase in _PHASE_ORDER:
            if prefix in self.values:
                return phase
        return OperationPhase.BEGUN


@dataclass(frozen=True, kw_only=True)
class LifecycleState:
    """The lifecycle part of a pod's labels, operations ordered by id."""

    operations: Mapping[OperationId, OperationState] = field(default_factory=dict)
    #: ``operation-permission/<type>`` -> value.
    permissions: Mapping[OperationType, str] = field(default_factory=dict)
    service_available: bool = False
    stay_offline: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "operations", MappingProxyType(dict(sorted(self.operations.items()))))
        object.__setattr__(self, "permissions", MappingProxyType(dict(sorted(self.permissions.items()))))

    def __iter__(self) -> Iterator[OperationState]:
        return iter(self.operations.values())

    @property
    def live(self) -> tuple[OperationState, ...]:
        """Operations taking part in the lifecycle (see :attr:`OperationState.is_live`)."""
        return tuple(op for op in self.operations.values() if op.is_live)

    def type_counts(self) -> dict[OperationType, int]:
        """Number of ids per operation type (``operation-type`` else ``done-operation-type``)."""
        counts: dict[OperationType, int] = {}
        for op in self.operations.values():
            if op.type is not None:
                counts[op.type] = counts.get(op.type, 0) + 1
        return counts

    @property
    def phase(self) -> PodPhase:
        live = self.live
        if not live:
            if self.service_available:
                return PodPhase.SERVICE_AVAILABLE
            return PodPhase.IDLE if self.stay_offline else PodPhase.NOT_AVAILABLE
        return min((_POD_PHASE_OF[op.phase] for op in live), key=_POD_PHASE_RANK.__getitem__)

    @property
    def stage(self) -> Stage | None:
        """The PodTransitionRule stage; deterministic when pre-check and post-check coexist."""
        live = self.live
        if any(op.has(POST_CHECK) for op in live) and all(op.has(OPERATED) for op in live):
            return Stage.POST_CHECK
        if any(op.has(PRE_CHECK) for op in live):
            return Stage.PRE_CHECK
        return None


def parse_state(labels: Mapping[str, str] | None) -> LifecycleState:
    """Read the lifecycle labels of a pod.

    Raises :class:`InvalidLifecycleLabel` on the first malformed lifecycle key (sorted
    order, so the error is stable); :func:`lifecycle.validating.validate` lists them all.
    """
    by_id: dict[str, dict[str, str]] = {}
    permissions: dict[OperationType, str] = {}
    labels = labels or {}
    for key in sorted(labels):
        split = split_lifecycle_key(key)
        if split is None:
            continue
        prefix, suffix = split
        if prefix == OPERATION_PERMISSION:
            permissions[OperationType(suffix)] = labels[key]
        else:
            by_id.setdefault(suffix, {})[prefix] = labels[key]
    return LifecycleState(
        operations={OperationId(i): OperationState(id=OperationId(i), values=v) for i, v in by_id.items()},
        permissions=permissions,
        service_available=SERVICE_AVAILABLE in labels,
        stay_offline=STAY_OFFLINE in labels,
    )


def has_operation(labels: Mapping[str, str] | None, op_id: str) -> bool:
    """Whether any lifecycle label of ``op_id`` is on the pod (Operating's ``IsLifecycleOnPod``)."""
    return OperationId(op_id) in parse_state(labels).operations
