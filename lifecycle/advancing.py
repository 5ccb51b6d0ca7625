"""THE PodOpsLifecycle state machine: facts about a pod in, one label/condition patch out.

Operating splits this work between a mutating webhook (label steps, ref. §2.4) and a
controller (rule approval, readiness condition, ``service-available``, ref. §2.6).
:func:`advance` is both, pure: the I/O layers (a webhook, a reconcile) build a
:class:`PodFacts` snapshot, call :func:`advance` or :func:`settle` with the clock, and
write the :class:`LifecyclePatch`: labels as one merge patch (guarded by the pod's
resourceVersion), the ``pod.kusionstack.io/service-ready`` condition through the status
subresource, the readiness gate only when creating the pod.

One call of :func:`advance` does, in order (``<x>`` means ``<x>/<id>``):

1. Creating: declare the ``service-ready`` readiness gate.
2. Undone (``undo-operation-type``) and abandoned operations (no ``operating``,
   ``operate`` nor ``operated``): remove every label of the id; for each of their types
   drop ``operation-permission/<type>`` unless another pre-checked operation of that
   type still holds it.
3. Per live operation, from the input labels:
   ``operating`` without ``pre-checked`` -> add ``pre-check``;
   ``operating`` + ``pre-checked`` -> remove ``pre-check``; add ``preparing`` (and remove
   ``service-available``) unless ``preparing``/``operate`` is there; then, when
   :func:`ready_to_operate`, ``preparing`` -> ``operate``;
   ``post-checked`` -> remove ``post-check``, add ``completing``.
4. Barriers, only when no operation holds ``operating`` (counted on the input labels):
   every operation ``completing`` -> once the expected finalizers are on the pod,
   remove every label of every id (cleanup);
   else every operation reached ``operate`` (or ``operated``) -> per id remove
   ``pre-checked``, ``operate`` -> ``operated``, ``operation-type`` ->
   ``done-operation-type``, remove ``operation-permission/<type>``;
   then, every operation ``operated`` -> add ``post-check`` where neither
   ``post-check`` nor ``post-checked`` is.
5. Rule approval, only for the stage the verdicts were computed for (the input's):
   PreCheck passed -> ``pre-checked`` + ``operation-permission/<type>`` for every live
   operation that has an ``operation-type``; PostCheck passed -> ``post-checked`` for
   every live operation.
6. Readiness condition (only when the gate is declared): ``False`` while any operation
   is ``preparing``; ``True`` when none is preparing, some is ``completing`` and none
   is being operated (phase Operating); ``True`` with no operation
   unless ``stay-offline``; otherwise left alone.
7. ``service-available``: added with no operation, no ``stay-offline``, pod Ready and
   expected finalizers present; removed whenever the pod is not Ready.

Where this differs from Operating (its defects, ref. §6 and below):

* ids are found from every id-keyed label, so undo-only / pre-check-only ids are
  cleaned up instead of lingering (abandoned ids are treated as undone);
* the operated barrier counts ``operated`` as having reached ``operate``: in Operating
  an id that begins after another one is already operated deadlocks the pod;
* the readiness condition does not turn ``True`` while a late id is being operated;
* the stage is deterministic (:attr:`lifecycle.states.LifecycleState.stage`);
* the type for ``done-operation-type`` comes from the current labels, falling back to
  the previous pod's (for operators that drop ``operation-type`` with ``operating``);
  an operation whose type is unknown holds the operated barrier instead of producing
  an ``operated`` label without ``done-operation-type``;
* a malformed available-conditions annotation blocks cleanup and
  ``service-available`` (with a reason) rather than failing every pod write.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from lifecycle.changes import LabelChange
from lifecycle.finalizers import AvailableConditionsError, missing_expected_finalizers, protection_finalizers
from lifecycle.labels import (
    COMPLETING,
    DONE_OPERATION_TYPE,
    ID_PREFIXES,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    SERVICE_AVAILABLE,
    SERVICE_READY,
    SERVICE_READY_MESSAGE,
    OperationType,
    id_key,
    is_controlled,
    permission_key,
)
from lifecycle.states import LifecycleState, OperationPhase, OperationState, Stage, parse_state

#: Bound of :func:`settle`; a full single-id lifecycle needs fewer steps than this.
DEFAULT_MAX_ITERATIONS: Final = 16


@dataclass(frozen=True, kw_only=True)
class PodFacts:
    """What the state machine knows about a pod.

    ``pre_check_passed`` / ``post_check_passed`` are the PodTransitionRule verdicts for
    the pod's current stage (with no rules a stage passes); they are only used when the
    pod is in that stage, and default to "not approved".
    """

    labels: Mapping[str, str]
    finalizers: frozenset[str] = frozenset()
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: ``spec.readinessGates`` declares ``pod.kusionstack.io/service-ready``.
    has_readiness_gate: bool = False
    #: Status of the ``service-ready`` condition; ``None`` when the pod has none.
    service_ready: bool | None = None
    #: The pod's ``Ready`` condition is True.
    ready: bool = False
    #: The pod is being created (admission CREATE).
    creating: bool = False
    pre_check_passed: bool = False
    post_check_passed: bool = False
    #: Labels of the pod before this write (admission UPDATE), used only to recover an
    #: operation type an operator removed together with ``operating``.
    previous_labels: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))
        object.__setattr__(self, "finalizers", frozenset(self.finalizers))


@dataclass(frozen=True, kw_only=True)
class LifecyclePatch:
    """What to write: labels (metadata merge patch), the service-ready condition (status), the gate."""

    set_labels: Mapping[str, str] = field(default_factory=dict)
    remove_labels: frozenset[str] = frozenset()
    #: Desired status of the ``service-ready`` condition; ``None`` = leave it.
    service_ready: bool | None = None
    #: Append the ``service-ready`` readiness gate (only possible on CREATE).
    add_readiness_gate: bool = False
    #: Why, for logs and events.
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "set_labels", MappingProxyType(dict(self.set_labels)))
        object.__setattr__(self, "remove_labels", frozenset(self.remove_labels))

    @property
    def labels(self) -> LabelChange:
        return LabelChange(set_labels=self.set_labels, remove_labels=self.remove_labels)

    @property
    def is_empty(self) -> bool:
        """Nothing to write (reasons do not count)."""
        return (
            not self.set_labels
            and not self.remove_labels
            and self.service_ready is None
            and not self.add_readiness_gate
        )

    def to_merge_patch(self, *, resource_version: str | None = None) -> dict[str, Any]:
        """JSON merge patch of ``metadata.labels`` (``None`` removes); ``{}`` when no label changes."""
        return self.labels.to_merge_patch(resource_version=resource_version)

    def service_ready_condition(self, *, now_ns: int) -> dict[str, str] | None:
        """The ``service-ready`` pod condition to write through the status subresource, if any."""
        if self.service_ready is None:
            return None
        return {
            "type": SERVICE_READY,
            "status": "True" if self.service_ready else "False",
            "lastTransitionTime": format_rfc3339(now_ns),
            "message": SERVICE_READY_MESSAGE,
        }

    def apply_to(self, pod: PodFacts, *, apply_condition: bool = True) -> PodFacts:
        """The facts as they would be after this patch is written (kubelet-owned facts unchanged)."""
        service_ready = pod.service_ready
        if apply_condition and self.service_ready is not None:
            service_ready = self.service_ready
        return replace(
            pod,
            labels=self.labels.apply(pod.labels),
            has_readiness_gate=pod.has_readiness_gate or self.add_readiness_gate,
            service_ready=service_ready,
        )


def format_rfc3339(now_ns: int) -> str:
    """Unix nanoseconds as a Kubernetes ``metav1.Time`` string (UTC, second precision)."""
    moment = datetime.datetime.fromtimestamp(now_ns // 1_000_000_000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_to_operate(*, finalizers: Iterable[str], service_ready: bool | None) -> bool:
    """Whether a preparing operation may move to ``operate`` (Operating's ``readyToOperate``).

    No ``service-ready`` condition -> yes (nothing routes traffic by it); any protection
    finalizer -> no (a cooperation controller still serves the pod); condition False ->
    yes; condition True -> no (traffic not yet turned off).
    """
    if service_ready is None:
        return True
    if protection_finalizers(finalizers):
        return False
    return service_ready is False


class _Labels:
    """The label dict being edited, plus the reasons for each edit."""

    def __init__(self, labels: Mapping[str, str], now_ns: int) -> None:
        self.original = dict(labels)
        self.current = dict(labels)
        self.stamp = str(now_ns)
        self.reasons: list[str] = []

    def add(self, key: str, value: str | None = None) -> bool:
        """Set ``key`` (to now by default) when absent."""
        if key in self.current:
            return False
        self.current[key] = self.stamp if value is None else value
        return True

    def put(self, key: str, value: str) -> None:
        self.current[key] = value

    def remove(self, key: str) -> bool:
        return self.current.pop(key, None) is not None

    def note(self, reason: str) -> None:
        self.reasons.append(reason)


def advance(pod: PodFacts, *, now_ns: int) -> LifecyclePatch:
    """One step of the lifecycle (webhook + controller), see the module docstring.

    Idempotent in the sense that matters: applying the result and calling again
    converges to an empty patch (:func:`settle` does exactly that). Pods without
    ``kusionstack.io/control: "true"`` are left alone. Raises
    :class:`lifecycle.states.InvalidLifecycleLabel` for a malformed lifecycle label.
    """
    if not is_controlled(dict(pod.labels)):
        return LifecyclePatch(reasons=("pod is not controlled (kusionstack.io/control != true): left alone",))
    before = parse_state(pod.labels)
    edit = _Labels(pod.labels, now_ns)

    add_gate = pod.creating and not pod.has_readiness_gate
    if add_gate:
        edit.note(f"declare readiness gate {SERVICE_READY}")

    live = _drop_finished_ids(edit, before)
    _step_operations(edit, live, pod)
    _pass_barriers(edit, live, pod)

    _approve_stage(edit, before.stage, pod)

    after = parse_state(edit.current)
    has_gate = pod.has_readiness_gate or add_gate
    desired = _desired_service_ready(after) if has_gate else None
    service_ready = desired if desired is not None and desired != pod.service_ready else None
    if service_ready is not None:
        edit.note(f"set condition {SERVICE_READY}={service_ready}")
    _sync_service_available(edit, after, pod)

    change = LabelChange.between(edit.original, edit.current)
    return LifecyclePatch(
        set_labels=change.set_labels,
        remove_labels=change.remove_labels,
        service_ready=service_ready,
        add_readiness_gate=add_gate,
        reasons=tuple(edit.reasons),
    )


def settle(
    pod: PodFacts,
    *,
    now_ns: int,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    apply_condition: bool = False,
) -> LifecyclePatch:
    """:func:`advance` repeated on the hypothetically patched pod until nothing changes.

    The result is one patch relative to ``pod`` carrying several steps (e.g. pre-check
    approved -> preparing -> operate), all stamped ``now_ns``. Safety rules:

    * the rule verdicts only count while the pod stays in the stage they were computed
      for; a stage reached during settling is never approved here;
    * by default the ``service-ready`` condition is assumed *not yet written*, so
      ``preparing`` never becomes ``operate`` on the strength of a condition still in
      flight. Pass ``apply_condition=True`` only when the caller writes the condition
      before the labels.

    Stops after ``max_iterations`` steps (with a reason) if no fixed point is reached;
    every intermediate step is itself a valid state, so the partial result is safe.
    """
    if not is_controlled(dict(pod.labels)):
        return advance(pod, now_ns=now_ns)
    initial_stage = parse_state(pod.labels).stage
    current = pod
    reasons: dict[str, None] = {}  # ordered set: steps repeat their "waiting" reasons
    condition: bool | None = None
    add_gate = False
    for _ in range(max_iterations):
        stage = parse_state(current.labels).stage
        still_in_stage = stage is initial_stage
        facts = replace(
            current,
            pre_check_passed=pod.pre_check_passed and still_in_stage and stage is Stage.PRE_CHECK,
            post_check_passed=pod.post_check_passed and still_in_stage and stage is Stage.POST_CHECK,
        )
        step = advance(facts, now_ns=now_ns)
        reasons.update(dict.fromkeys(step.reasons))
        if step.service_ready is not None:
            condition = step.service_ready
        add_gate = add_gate or step.add_readiness_gate
        condition_moves = apply_condition and step.service_ready is not None
        if step.labels.is_empty and not step.add_readiness_gate and not condition_moves:
            break
        current = step.apply_to(current, apply_condition=apply_condition)
    else:
        reasons[f"settle stopped after {max_iterations} steps without reaching a fixed point"] = None
    change = LabelChange.between(pod.labels, current.labels)
    return LifecyclePatch(
        set_labels=change.set_labels,
        remove_labels=change.remove_labels,
        service_ready=condition if condition is not None and condition != pod.service_ready else None,
        add_readiness_gate=add_gate,
        reasons=tuple(reasons),
    )


def _wipe(edit: _Labels, op: OperationState) -> None:
    for prefix in ID_PREFIXES:
        edit.remove(id_key(prefix, op.id))


def _drop_finished_ids(edit: _Labels, state: LifecycleState) -> tuple[OperationState, ...]:
    """Step 2: remove undone and abandoned ids; the live ones are returned."""
    released: set[OperationType] = set()
    for op in state:
        if op.is_live:
            continue
        _wipe(edit, op)
        if op.is_undone:
            edit.note(f"undo {op.id} ({op.undo_type}): removed its lifecycle labels")
        else:
            edit.note(f"{op.id} left before operating: removed its lifecycle labels")
        released.update(t for t in (op.undo_type, op.active_type, op.done_type) if t is not None)
    live = state.live
    _release_permissions(edit, released, live)
    return live


def _release_permissions(
    edit: _Labels, types: Iterable[OperationType], holders: Iterable[OperationState]
) -> None:
    """Drop ``operation-permission/<t>`` unless a pre-checked holder of type ``t`` remains."""
    held = {op.active_type for op in holders if op.has(PRE_CHECKED)}
    for op_type in sorted(types):
        if op_type not in held and edit.remove(permission_key(op_type)):
            edit.note(f"removed {permission_key(op_type)}: no pre-checked {op_type} operation left")


def _step_operations(edit: _Labels, live: Iterable[OperationState], pod: PodFacts) -> None:
    """Step 3: the per-id moves."""
    can_operate = ready_to_operate(finalizers=pod.finalizers, service_ready=pod.service_ready)
    for op in live:
        if op.has(OPERATING):
            if op.has(PRE_CHECKED):
                edit.remove(op.key(PRE_CHECK))
                if not op.has(PREPARING) and not op.has(OPERATE):
                    if edit.remove(SERVICE_AVAILABLE):
                        edit.note(f"removed {SERVICE_AVAILABLE}: {op.id} is preparing")
                    edit.add(op.key(PREPARING))
                    edit.note(f"{op.id} preparing")
                if not op.has(OPERATE):
                    if can_operate:
                        edit.remove(op.key(PREPARING))
                        edit.add(op.key(OPERATE))
                        edit.note(f"{op.id} may operate")
                    else:
                        edit.note(f"{op.id} waits to operate: {_not_ready_to_operate_reason(pod)}")
            elif edit.add(op.key(PRE_CHECK)):
                edit.note(f"{op.id} pre-check")
        if op.has(POST_CHECKED):
            edit.remove(op.key(POST_CHECK))
            if edit.add(op.key(COMPLETING)):
                edit.note(f"{op.id} completing")


def _not_ready_to_operate_reason(pod: PodFacts) -> str:
    held = protection_finalizers(pod.finalizers)
    if held:
        return f"protection finalizers present {list(held)}"
    return f"condition {SERVICE_READY} is not False yet"


def _pass_barriers(edit: _Labels, live: tuple[OperationState, ...], pod: PodFacts) -> None:
    """Step 4: the steps every operation takes together."""
    if any(op.has(OPERATING) for op in live):
        return
    if all(op.has(COMPLETING) for op in live):
        if live:
            _clean_up(edit, live, pod)
        return
    if not all(op.has(OPERATE) or op.has(OPERATED) for op in live):
        return
    types = _operated_types(edit, live, pod)
    if types is None:
        return
    for op in live:
        edit.remove(op.key(PRE_CHECKED))
        if not op.has(OPERATED):
            edit.remove(op.key(OPERATE))
            edit.add(op.key(OPERATED))
            edit.note(f"{op.id} operated")
        op_type = types.get(op.id)
        if op_type is not None:
            edit.remove(permission_key(op_type))
            edit.remove(op.key(OPERATION_TYPE))
            edit.put(op.key(DONE_OPERATION_TYPE), op_type)
    for op in live:
        if not op.has(POST_CHECK) and not op.has(POST_CHECKED) and edit.add(op.key(POST_CHECK)):
            edit.note(f"{op.id} post-check")


def _operated_types(
    edit: _Labels, live: Iterable[OperationState], pod: PodFacts
) -> dict[str, OperationType] | None:
    """Type to move to ``done-operation-type`` per id, or ``None`` when one is unknown (barrier held)."""
    previous = parse_state(pod.previous_labels) if pod.previous_labels else None
    types: dict[str, OperationType] = {}
    for op in live:
        if op.active_type is not None:
            types[op.id] = op.active_type
        elif op.done_type is not None:
            continue
        else:
            before = previous.operations.get(op.id) if previous else None
            if before is None or before.active_type is None:
                edit.note(f"{op.id} cannot be marked operated: its operation type is unknown")
                return None
            types[op.id] = before.active_type
    return types


def _clean_up(edit: _Labels, live: Iterable[OperationState], pod: PodFacts) -> None:
    try:
        missing = missing_expected_finalizers(annotations=pod.annotations, finalizers=pod.finalizers)
    except AvailableConditionsError as exc:
        edit.note(f"lifecycle not cleaned up: {exc}")
        return
    if missing:
        edit.note(f"lifecycle not cleaned up: waiting for expected finalizers {sorted(missing.values())}")
        return
    released: set[OperationType] = set()
    for op in live:
        _wipe(edit, op)
        released.update(t for t in (op.active_type, op.done_type) if t is not None)
    _release_permissions(edit, released, ())
    edit.note("lifecycle completed: removed the labels of " + ", ".join(op.id for op in live))


def _approve_stage(edit: _Labels, stage: Stage | None, pod: PodFacts) -> None:
    """Step 5: rule verdicts for the input's stage."""
    if stage is Stage.PRE_CHECK and pod.pre_check_passed:
        for op in parse_state(edit.current).live:
            if op.active_type is None:
                continue
            added = edit.add(permission_key(op.active_type))
            if edit.add(op.key(PRE_CHECKED)) or added:
                edit.note(f"{op.id} pre-checked (PreCheck rules passed)")
    elif stage is Stage.POST_CHECK and pod.post_check_passed:
        for op in parse_state(edit.current).live:
            if edit.add(op.key(POST_CHECKED)):
                edit.note(f"{op.id} post-checked (PostCheck rules passed)")


def _desired_service_ready(state: LifecycleState) -> bool | None:
    """Step 6: the status the ``service-ready`` condition should have, ``None`` = leave it."""
    live = state.live
    if not live:
        return None if state.stay_offline else True
    if any(op.has(PREPARING) for op in live):
        return False
    # A late operation being operated while earlier ones complete keeps traffic off.
    being_operated = any(op.phase is OperationPhase.OPERATING for op in live)
    if any(op.has(COMPLETING) for op in live) and not being_operated:
        return True
    return None


def _sync_service_available(edit: _Labels, state: LifecycleState, pod: PodFacts) -> None:
    """Step 7: the ``service-available`` label."""
    if not pod.ready:
        if edit.remove(SERVICE_AVAILABLE):
            edit.note(f"removed {SERVICE_AVAILABLE}: pod is not Ready")
        return
    if state.live or state.stay_offline or SERVICE_AVAILABLE in edit.current:
        return
    try:
        missing = missing_expected_finalizers(annotations=pod.annotations, finalizers=pod.finalizers)
    except AvailableConditionsError as exc:
        edit.note(f"not service-available: {exc}")
        return
    if missing:
        edit.note(f"not service-available: waiting for expected finalizers {sorted(missing.values())}")
        return
    edit.add(SERVICE_AVAILABLE)
    edit.note(f"added {SERVICE_AVAILABLE}")
