"""The library operation controllers use to take part in PodOpsLifecycle (pure).

An operation controller (CollaSet update / scale-in, pod deletion, an OperationJob)
wants to change a pod safely. Its reconcile is, with the pod's current labels:

1. not :func:`is_during_ops` -> write :func:`begin` (``operating/<id>`` +
   ``operation-type/<id>``) and stop;
2. :func:`allow_ops` not allowed -> wait (the state machine in
   :mod:`lifecycle.advancing` moves the pod through pre-check and preparing; the pod's
   watch triggers the next reconcile, ``retry_after_seconds`` says when at the latest);
3. do the work, then write :func:`finish` (drops ``operating/<id>``; the state machine
   turns ``operation-type`` into ``done-operation-type`` and completes the lifecycle);
4. to cancel before operating, write :func:`undo` instead.

Every function returns a :class:`lifecycle.changes.LabelChange` for the caller to
write as one merge patch guarded by the pod's resourceVersion (``to_merge_patch(
resource_version=...)``); on 409 it observes again and recomputes.

Differences from Operating (ref. §2.2, §6): :func:`begin` never re-types an id that
is running another operation type (it raises :class:`OperationConflict`); beginning an
id that is still completing a previous operation restarts it cleanly; an id being
undone must be left alone until the state machine removed it. :func:`allow_ops` with
a delay reports "not allowed, retry after" instead of "allowed, but wait".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from lifecycle.changes import LabelChange
from lifecycle.labels import (
    DELETE,
    OPERATE,
    OPERATING,
    OPERATION_TYPE,
    PREPARING_TO_DELETE,
    UNDO_OPERATION_TYPE,
    OperationId,
    OperationType,
    id_key,
    lifecycle_id,
)
from lifecycle.states import parse_state

_NANOS_PER_SECOND: Final = 1_000_000_000


class OperationConflict(Exception):
    """The operation cannot begin/finish/undo on this pod as things stand; nothing was changed."""

    def __init__(self, message: str, *, op_id: OperationId, op_type: OperationType) -> None:
        super().__init__(message)
        self.op_id = op_id
        self.op_type = op_type


class OperationAdapter(Protocol):
    """How an operation controller identifies itself (Operating's ``LifecycleAdapter``)."""

    @property
    def id(self) -> OperationId:
        """Lifecycle id, the label suffix (a valid label-name segment, see ``lifecycle_id``)."""
        ...

    @property
    def type(self) -> OperationType:
        """Operation type, e.g. ``update``."""
        ...

    @property
    def allow_multi_type(self) -> bool:
        """Whether other ids may run the same operation type on the pod at the same time."""
        ...

    def when_begin(self, labels: Mapping[str, str], *, now_ns: int) -> LabelChange:
        """Extra label changes written with :func:`begin` (``labels`` already include the begin)."""
        ...

    def when_finish(self, labels: Mapping[str, str]) -> LabelChange:
        """Extra label changes written with :func:`finish`."""
        ...


@dataclass(frozen=True, kw_only=True)
class LabelAdapter:
    """An :class:`OperationAdapter` whose hooks only mark and unmark labels.

    ``mark_on_begin`` labels are set to the begin time when absent; ``unmark_on_finish``
    labels are removed by :func:`finish`.
    """

    id: OperationId
    type: OperationType
    allow_multi_type: bool = True
    mark_on_begin: frozenset[str] = frozenset()
    unmark_on_finish: frozenset[str] = frozenset()

    def when_begin(self, labels: Mapping[str, str], *, now_ns: int) -> LabelChange:
        return LabelChange(set_labels={k: str(now_ns) for k in sorted(self.mark_on_begin) if k not in labels})

    def when_finish(self, labels: Mapping[str, str]) -> LabelChange:
        return LabelChange(remove_labels=frozenset(k for k in self.unmark_on_finish if k in labels))


#: Deletion through the lifecycle (``podopslifecycle.kusionstack.io/to-delete``).
POD_DELETE_ADAPTER: Final = LabelAdapter(
    id=OperationId("pod-delete"), type=DELETE, mark_on_begin=frozenset({PREPARING_TO_DELETE})
)


def operation_job_adapter(*, job_name: str, action: str) -> LabelAdapter:
    """The adapter of an OperationJob: id derived from the job name, type = its action."""
    return LabelAdapter(id=OperationId(lifecycle_id(job_name)), type=OperationType(action))


@dataclass(frozen=True, kw_only=True)
class AllowDecision:
    """Whether the operation may act on the pod now; if not, when to look again at the latest."""

    allowed: bool
    retry_after_seconds: float | None = None


def is_during_ops(adapter: OperationAdapter, labels: Mapping[str, str]) -> bool:
    """``operating/<id>`` is present and ``operation-type/<id>`` is the adapter's type."""
    return (
        id_key(OPERATING, adapter.id) in labels
        and labels.get(id_key(OPERATION_TYPE, adapter.id)) == adapter.type
    )


def begin(adapter: OperationAdapter, labels: Mapping[str, str], *, now_ns: int) -> LabelChange:
    """Start (or resume) the adapter's operation on the pod.

    * already begun with this type -> only ``operating/<id>`` is restored if a
      :func:`finish` dropped it, plus the ``when_begin`` hook;
    * the id runs another type -> :class:`OperationConflict` (never re-typed);
    * the id is being undone -> :class:`OperationConflict`: retry once its labels are gone;
    * otherwise, if another id runs the same type and ``allow_multi_type`` is false ->
      :class:`OperationConflict` ``operationType <type> exists: [<keys>]``; else set
      ``operating/<id>`` = now and ``operation-type/<id>`` = type, removing what is left
      of a previous, already operated run of the id (its post-check/completing tail).

    Raises :class:`lifecycle.states.InvalidLifecycleLabel` for malformed lifecycle labels.
    """
    op_id, op_type = adapter.id, adapter.type
    state = parse_state(labels)
    op = state.operations.get(op_id)
    if op is not None and op.is_undone:
        raise OperationConflict(
            f"operatingID {op_id} is being undone ({op.key(UNDO_OPERATION_TYPE)}); "
            "begin again once the lifecycle removed its labels",
            op_id=op_id,
            op_type=op_type,
        )
    operating_key = id_key(OPERATING, op_id)
    if op is not None and op.active_type is not None:
        if op.active_type != op_type:
            raise OperationConflict(
                f"operatingID {op_id} already has operationType {op.active_type}; "
                f"finish or undo it before beginning {op_type}",
                op_id=op_id,
                op_type=op_type,
            )
        change = LabelChange(set_labels={} if operating_key in labels else {operating_key: str(now_ns)})
    else:
        if not adapter.allow_multi_type:
            holders = sorted(
                other.key(OPERATION_TYPE)
                for other in state
                if other.id != op_id and other.active_type == op_type
            )
            if holders:
                raise OperationConflict(
                    f"operationType {op_type} exists: [{', '.join(holders)}]", op_id=op_id, op_type=op_type
                )
        started: dict[str, str] = {id_key(OPERATION_TYPE, op_id): op_type}
        if operating_key not in labels:
            started[operating_key] = str(now_ns)
        stale = (op.label_keys() if op is not None else frozenset()) - {operating_key, *started}
        change = LabelChange(set_labels=started, remove_labels=stale)
    return change.then(adapter.when_begin(change.apply(labels), now_ns=now_ns))


def allow_ops(
    adapter: OperationAdapter, labels: Mapping[str, str], *, now_ns: int, delay_seconds: float = 0.0
) -> AllowDecision:
    """Whether the operation may act now: during ops and ``operate/<id>`` present.

    With ``delay_seconds`` > 0 the operation must also have been allowed for that long
    (measured from the ``operate`` timestamp); until then the answer is "not allowed,
    retry after the remaining time". An unparsable timestamp does not delay.
    """
    if not is_during_ops(adapter, labels):
        return AllowDecision(allowed=False)
    since = labels.get(id_key(OPERATE, adapter.id))
    if since is None:
        return AllowDecision(allowed=False)
    if delay_seconds > 0:
        try:
            started_ns = int(since)
        except ValueError:
            return AllowDecision(allowed=True)
        remaining = delay_seconds - (now_ns - started_ns) / _NANOS_PER_SECOND
        if remaining > 0:
            return AllowDecision(allowed=False, retry_after_seconds=remaining)
    return AllowDecision(allowed=True)


def finish(adapter: OperationAdapter, labels: Mapping[str, str]) -> LabelChange:
    """End the operation's work: drop ``operating/<id>`` (the type label stays for the state machine).

    Raises :class:`OperationConflict` when ``operation-type/<id>`` names another type
    (``operatingID <id> has invalid operationType <type>``). The ``when_finish`` hook
    runs in any case (it undoes what ``when_begin`` marked).
    """
    current = labels.get(id_key(OPERATION_TYPE, adapter.id))
    if current is not None and current != adapter.type:
        raise OperationConflict(
            f"operatingID {adapter.id} has invalid operationType {current}; "
            f"it is not a {adapter.type} operation",
            op_id=adapter.id,
            op_type=adapter.type,
        )
    operating_key = id_key(OPERATING, adapter.id)
    change = LabelChange(remove_labels=frozenset({operating_key} & set(labels)))
    return change.then(adapter.when_finish(change.apply(labels)))


def undo(adapter: OperationAdapter, labels: Mapping[str, str]) -> LabelChange:
    """Cancel the operation: set ``undo-operation-type/<id>`` = type; the state machine removes the id.

    Meant for operations not yet allowed to operate (no ``operate/<id>``), as CollaSet
    does; nothing to do when the id is not on the pod or already undone. Raises
    :class:`OperationConflict` when the id runs another type.
    """
    op = parse_state(labels).operations.get(adapter.id)
    if op is None or op.undo_type == adapter.type:
        return LabelChange()
    if op.active_type is not None and op.active_type != adapter.type:
        raise OperationConflict(
            f"operatingID {adapter.id} has operationType {op.active_type}; cannot undo it as {adapter.type}",
            op_id=adapter.id,
            op_type=adapter.type,
        )
    return LabelChange(set_labels={op.key(UNDO_OPERATION_TYPE): adapter.type})
