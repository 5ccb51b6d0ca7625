"""A bounded record of a pod's operations in one annotation: what the labels forget.

The lifecycle labels carry the time each phase began (``<prefix>/<id>`` = unix nanos),
but the state machine removes most of them as the operation moves on (``pre-check``
once pre-checked, ``preparing`` once operating ...) and every one of them when the
operation completes. To trace a pod afterwards (``rollouts trace pod/NAME``) the
operator keeps what it saw in the pod annotation :data:`HISTORY_ANNOTATION`.

Why an annotation and not Events: Events expire (the API server keeps them an hour by
default), are rate-limited and deduplicated, and reading them back needs a list per
pod. The annotation lives as long as the pod and **costs no API write**: it rides on the
writes the lifecycle makes anyway. The mutating webhook sees every write of a controlled
pod (an operation controller's begin / finish, a PodTransitionRule verdict annotation,
a cooperation controller removing its finalizer, the kubelet's status) and adds the
annotation to its admission patch when the record changed; the lifecycle controller
adds it to the label merge patch it writes (same resourceVersion guard). When the
webhook is unavailable the controller alone still records phase times and the end of
operations (it writes when labels change), but holds that began and ended between two
label writes are missed.

Format (compact JSON, times in unix milliseconds)::

    {"live": [<operation>], "done": [<operation>, ... oldest first, at most MAX_DONE]}
    <operation> = {"id": "...", "type": "update",
                   "at": {"Begun": ms, "PreCheck": ms, ..., "Completing": ms},
                   "held": [{"by": "podtransitionrule gate", "in": "PreCheck",
                             "why": "rule check: ...", "from": ms, "to": ms}],
                   "outcome": "Completed", "end": ms}          # outcome/end: done only

``at`` holds the entry time of each :class:`~lifecycle.states.OperationPhase` that was
seen (from the labels' own stamps, so a late observer records the true times). ``held``
lists who kept the operation in a phase: a PodTransitionRule rejecting the pod (from
its ``detail.podtransitionrule.kusionstack.io/<ptr>`` annotation, the rule and reason
when the I/O layer knows them), a protection finalizer in Preparing, an expected
finalizer missing in Completing. Bounds: :data:`MAX_DONE` finished operations,
:data:`MAX_HOLDS` holds per operation, :data:`MAX_TEXT` characters per text, so the
annotation stays a few kilobytes at most.

Everything here is pure: :func:`updated_annotation` takes the labels before and after a
write plus what the pod carries, and returns the new annotation value or ``None``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from lifecycle.finalizers import AvailableConditionsError, missing_expected_finalizers, protection_finalizers
from lifecycle.labels import (
    COMPLETING,
    OPERATE,
    OPERATED,
    OPERATING,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    OperationId,
)
from lifecycle.rules.models import DETAIL_ANNOTATION_PREFIX
from lifecycle.states import LifecycleState, OperationPhase, OperationState, parse_state

HISTORY_ANNOTATION: Final = "rollouts.kusionstack.io/lifecycle-history"
#: Finished operations kept (oldest dropped first).
MAX_DONE: Final = 8
#: Holds kept per operation (oldest closed ones dropped first).
MAX_HOLDS: Final = 6
#: Longest text (holder, reason) kept.
MAX_TEXT: Final = 200

_NANOS_PER_MILLI: Final = 1_000_000

#: Label prefix -> the phase its timestamp starts, in lifecycle order.
PHASE_STAMPS: Final[tuple[tuple[str, OperationPhase], ...]] = (
    (OPERATING, OperationPhase.BEGUN),
    (PRE_CHECK, OperationPhase.PRE_CHECK),
    (PRE_CHECKED, OperationPhase.PRE_CHECKED),
    (PREPARING, OperationPhase.PREPARING),
    (OPERATE, OperationPhase.OPERATING),
    (OPERATED, OperationPhase.OPERATED),
    (POST_CHECK, OperationPhase.POST_CHECK),
    (POST_CHECKED, OperationPhase.POST_CHECKED),
    (COMPLETING, OperationPhase.COMPLETING),
)
#: The phases of a run in lifecycle order (Undo is no phase a run stays in).
PHASE_ORDER: Final[tuple[OperationPhase, ...]] = tuple(phase for _, phase in PHASE_STAMPS)
_RANK: Final[Mapping[OperationPhase, int]] = {phase: rank for rank, phase in enumerate(PHASE_ORDER)}


class Outcome(enum.StrEnum):
    """How an operation left the pod's labels."""

    COMPLETED = "Completed"
    """Cleaned up by the state machine after Completing."""
    UNDONE = "Undone"
    """Cancelled with ``undo-operation-type``."""
    ABANDONED = "Abandoned"
    """Finished before it was allowed to operate (the state machine removed it)."""
    RESTARTED = "Restarted"
    """The same id began again while this run was still on the pod."""
    REMOVED = "Removed"
    """Its labels went away without the lifecycle seeing why (a hand edit, a missed write)."""


#: Which phases a holder of each kind keeps an operation in.
_HELD_PHASES: Final[Mapping[OperationPhase, frozenset[OperationPhase]]] = {
    OperationPhase.PRE_CHECK: frozenset({OperationPhase.BEGUN, OperationPhase.PRE_CHECK}),
    OperationPhase.PREPARING: frozenset({OperationPhase.PREPARING}),
    OperationPhase.POST_CHECK: frozenset({OperationPhase.OPERATED, OperationPhase.POST_CHECK}),
    OperationPhase.COMPLETING: frozenset({OperationPhase.COMPLETING}),
}


@dataclass(frozen=True, kw_only=True)
class Hold:
    """Someone kept the operation in ``phase`` from ``since_ms`` (to ``until_ms`` once released)."""

    by: str
    phase: OperationPhase
    since_ms: int
    until_ms: int | None = None
    #: The rule and its reason, when known.
    reason: str = ""

    @property
    def key(self) -> tuple[str, OperationPhase]:
        return self.by, self.phase

    def seconds(self, *, now_ms: int) -> float:
        """How long it held (so far, when still holding)."""
        end = self.until_ms if self.until_ms is not None else now_ms
        return max(0, end - self.since_ms) / 1000


@dataclass(frozen=True, kw_only=True)
class OperationRecord:
    """One run of one operation id: phase entry times, holds, and how it ended."""

    id: str
    type: str = ""
    entered: Mapping[OperationPhase, int] = field(default_factory=dict)
    holds: tuple[Hold, ...] = ()
    outcome: Outcome | None = None
    ended_ms: int | None = None

    def __post_init__(self) -> None:
        ordered = sorted(self.entered.items(), key=lambda item: (item[1], _RANK.get(item[0], 99)))
        object.__setattr__(self, "entered", MappingProxyType(dict(ordered)))


@dataclass(frozen=True, kw_only=True)
class History:
    """Operations on the pod now (``live``, by id) and finished ones (``done``, oldest first)."""

    live: tuple[OperationRecord, ...] = ()
    done: tuple[OperationRecord, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.live and not self.done


@dataclass(frozen=True, kw_only=True)
class Holder:
    """Something keeping operations in ``phase`` right now."""

    by: str
    phase: OperationPhase
    reason: str = ""


# -- reading and writing the annotation -----------------------------------------------------------


def _text(value: object) -> str:
    text = value if isinstance(value, str) else ""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _millis(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _phase(value: object) -> OperationPhase | None:
    try:
        return OperationPhase(str(value))
    except ValueError:
        return None


def _parse_hold(raw: object) -> Hold | None:
    if not isinstance(raw, Mapping):
        return None
    phase, since = _phase(raw.get("in")), _millis(raw.get("from"))
    by = _text(raw.get("by"))
    if phase is None or since is None or not by:
        return None
    return Hold(
        by=by, phase=phase, since_ms=since, until_ms=_millis(raw.get("to")), reason=_text(raw.get("why"))
    )


def _parse_record(raw: object) -> OperationRecord | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str) or not raw["id"]:
        return None
    entered: dict[OperationPhase, int] = {}
    at = raw.get("at")
    for name, value in at.items() if isinstance(at, Mapping) else ():
        phase, millis = _phase(name), _millis(value)
        if phase is not None and millis is not None:
            entered[phase] = millis
    held = raw.get("held")
    holds = tuple(h for h in map(_parse_hold, held if isinstance(held, list) else ()) if h is not None)
    outcome: Outcome | None
    try:
        outcome = Outcome(str(raw["outcome"])) if "outcome" in raw else None
    except ValueError:
        outcome = Outcome.REMOVED
    return OperationRecord(
        id=raw["id"],
        type=_text(raw.get("type")),
        entered=entered,
        holds=holds[-MAX_HOLDS:],
        outcome=outcome,
        ended_ms=_millis(raw.get("end")),
    )


def parse_history(value: str | None) -> History:
    """The history in an annotation value; anything unreadable is skipped (never an error)."""
    if not value:
        return History()
    try:
        document = json.loads(value)
    except ValueError:
        return History()
    if not isinstance(document, Mapping):
        return History()

    def records(key: str) -> tuple[OperationRecord, ...]:
        items = document.get(key)
        return tuple(r for r in map(_parse_record, items if isinstance(items, list) else ()) if r is not None)

    done = records("done")
    return History(live=records("live"), done=done[-MAX_DONE:])


def _hold_document(hold: Hold) -> dict[str, Any]:
    document: dict[str, Any] = {"by": hold.by, "in": hold.phase.value}
    if hold.reason:
        document["why"] = hold.reason
    document["from"] = hold.since_ms
    if hold.until_ms is not None:
        document["to"] = hold.until_ms
    return document


def _record_document(record: OperationRecord) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": record.id,
        "type": record.type,
        "at": {phase.value: millis for phase, millis in record.entered.items()},
    }
    if record.holds:
        document["held"] = [_hold_document(h) for h in record.holds]
    if record.outcome is not None:
        document["outcome"] = record.outcome.value
    if record.ended_ms is not None:
        document["end"] = record.ended_ms
    return document


def format_history(history: History) -> str:
    """The annotation value: compact JSON, stable key order."""
    document = {
        "live": [_record_document(r) for r in history.live],
        "done": [_record_document(r) for r in history.done],
    }
    return json.dumps(document, separators=(",", ":"))


# -- what the labels say --------------------------------------------------------------------------


def phase_stamps(op: OperationState) -> dict[OperationPhase, int]:
    """Entry time (ms) of each phase whose label is on the pod; unparsable stamps are skipped."""
    entered: dict[OperationPhase, int] = {}
    for prefix, phase in PHASE_STAMPS:
        value = op.get(prefix)
        if value is None:
            continue
        try:
            nanos = int(value)
        except ValueError:
            continue
        if nanos >= 0:
            entered[phase] = nanos // _NANOS_PER_MILLI
    return entered


def holders_of(
    *,
    annotations: Mapping[str, str],
    finalizers: Iterable[str],
    rejections: Mapping[str, str] | None = None,
) -> tuple[Holder, ...]:
    """Who holds the pod now: rejecting PodTransitionRules, protection and missing expected finalizers.

    ``rejections`` maps a PodTransitionRule name to the rule and reason it rejected the pod
    with, when the caller knows them (the detail annotation only says passed or not).
    """
    rejections = rejections or {}
    found: list[Holder] = []
    prefix = f"{DETAIL_ANNOTATION_PREFIX}/"
    for key in sorted(annotations):
        if not key.startswith(prefix):
            continue
        try:
            detail = json.loads(annotations[key])
        except ValueError:
            continue
        if not isinstance(detail, Mapping) or detail.get("passed") is not False:
            continue
        phase = _phase(detail.get("stage"))
        if phase not in (OperationPhase.PRE_CHECK, OperationPhase.POST_CHECK):
            continue
        ptr = key.removeprefix(prefix)
        found.append(
            Holder(by=f"podtransitionrule {ptr}", phase=phase, reason=_text(rejections.get(ptr, "")))
        )
    for finalizer in protection_finalizers(finalizers):
        found.append(Holder(by=f"finalizer {finalizer}", phase=OperationPhase.PREPARING))
    try:
        missing = missing_expected_finalizers(annotations=annotations, finalizers=finalizers)
    except AvailableConditionsError as error:
        found.append(
            Holder(
                by="available-conditions annotation",
                phase=OperationPhase.COMPLETING,
                reason=_text(str(error)),
            )
        )
    else:
        for finalizer in sorted(missing.values()):
            found.append(Holder(by=f"expected finalizer {finalizer}", phase=OperationPhase.COMPLETING))
    return tuple(found)


# -- recording ------------------------------------------------------------------------------------


#: Phases an operated operation passes on its way out; one settled write can pass them all.
_FINAL_PHASES: Final = (OperationPhase.POST_CHECK, OperationPhase.POST_CHECKED, OperationPhase.COMPLETING)


def _outcome(op: OperationState | None) -> Outcome:
    """How an operation whose labels this write removed ended.

    Only the state machine's clean-up removes the labels of an operated operation, and it
    runs once every operation is completing; a settled write may add ``post-checked`` and
    ``completing`` and clean up at once, so an operated operation that goes completed.
    """
    if op is None:
        return Outcome.REMOVED
    if op.is_undone:
        return Outcome.UNDONE
    if op.has(COMPLETING) or (op.has(OPERATED) and op.is_live):
        return Outcome.COMPLETED
    if op.is_abandoned:
        return Outcome.ABANDONED
    return Outcome.REMOVED


def _close(record: OperationRecord, outcome: Outcome, now_ms: int) -> OperationRecord:
    holds = tuple(h if h.until_ms is not None else replace(h, until_ms=now_ms) for h in record.holds)
    return replace(record, holds=holds, outcome=outcome, ended_ms=now_ms)


def _type_of(op: OperationState) -> str:
    return str(op.type or op.undo_type or "")


def _track_holds(
    holds: tuple[Hold, ...], phase: OperationPhase, holders: Iterable[Holder], now_ms: int
) -> tuple[Hold, ...]:
    current = {(h.by, h.phase): h for h in holders if phase in _HELD_PHASES.get(h.phase, frozenset())}
    kept: list[Hold] = []
    still_open: set[tuple[str, OperationPhase]] = set()
    for hold in holds:
        if hold.until_ms is not None:
            kept.append(hold)
            continue
        holder = current.get(hold.key)
        if holder is None:
            kept.append(replace(hold, until_ms=now_ms))
            continue
        still_open.add(hold.key)
        kept.append(replace(hold, reason=hold.reason or holder.reason))
    for key, holder in current.items():
        if key not in still_open:
            kept.append(Hold(by=holder.by, phase=holder.phase, since_ms=now_ms, reason=holder.reason))
    while len(kept) > MAX_HOLDS:
        closed = next((i for i, h in enumerate(kept) if h.until_ms is not None), 0)
        del kept[closed]
    return tuple(kept)


def _restarted(rec: OperationRecord, stamps: Mapping[OperationPhase, int]) -> bool:
    """The id's ``operating`` stamp changed: a new run of the id began."""
    begun, recorded = stamps.get(OperationPhase.BEGUN), rec.entered.get(OperationPhase.BEGUN)
    return begun is not None and recorded is not None and begun != recorded


def record(
    history: History,
    *,
    before: Mapping[str, str],
    after: Mapping[str, str],
    holders: Iterable[Holder] = (),
    now_ns: int,
) -> History:
    """The history once a write turned the labels ``before`` into ``after``.

    Operations whose labels are gone in ``after`` move to ``done`` with their outcome
    (read from ``before``); the others get the phase stamps of both label sets and their
    holds opened or closed at ``now_ns``. Raises
    :class:`lifecycle.states.InvalidLifecycleLabel` for malformed lifecycle labels.
    """
    now_ms = now_ns // _NANOS_PER_MILLI
    previous: LifecycleState = parse_state(before)
    current: LifecycleState = parse_state(after)
    holders = tuple(holders)
    live = {r.id: r for r in history.live}
    done = list(history.done)

    for op_id in sorted((set(live) | set(previous.operations)) - set(current.operations)):
        was = previous.operations.get(OperationId(op_id))
        rec = live.pop(op_id, None) or OperationRecord(id=op_id)
        outcome = _outcome(was)
        if was is not None:
            entered = {**rec.entered, **phase_stamps(was)}
            if outcome is Outcome.COMPLETED:
                # the phases it passed within this very write were stamped with its time
                reached = max((_RANK[p] for p in entered if p in _RANK), default=-1)
                entered.update({phase: now_ms for phase in _FINAL_PHASES if _RANK[phase] > reached})
            rec = replace(rec, type=rec.type or _type_of(was), entered=entered)
        done.append(_close(rec, outcome, now_ms))

    for op in current:
        stamps = phase_stamps(op)
        was = previous.operations.get(op.id)
        if was is not None and was.get(OPERATING) in (None, op.get(OPERATING)):
            stamps = {**phase_stamps(was), **stamps}
        found = live.get(op.id)
        if found is not None and _restarted(found, stamps):
            done.append(_close(found, Outcome.RESTARTED, now_ms))
            found = None
        base = found if found is not None else OperationRecord(id=op.id)
        live[op.id] = replace(
            base,
            type=_type_of(op) or base.type,
            entered={**base.entered, **stamps},
            holds=_track_holds(base.holds, op.phase, holders, now_ms),
        )

    return History(live=tuple(live[i] for i in sorted(live)), done=tuple(done[-MAX_DONE:]))


def updated_annotation(
    *,
    annotations: Mapping[str, str],
    before: Mapping[str, str],
    after: Mapping[str, str],
    finalizers: Iterable[str] = (),
    rejections: Mapping[str, str] | None = None,
    now_ns: int,
) -> str | None:
    """The new :data:`HISTORY_ANNOTATION` value after a write, or ``None`` when it stays as is.

    ``annotations`` and ``finalizers`` are the pod's as written (they decide the holders);
    ``before`` / ``after`` the labels before and after the write. A pod that never had an
    operation gets no annotation.
    """
    value = annotations.get(HISTORY_ANNOTATION)
    history = parse_history(value)
    holders = holders_of(annotations=annotations, finalizers=finalizers, rejections=rejections)
    updated = record(history, before=before, after=after, holders=holders, now_ns=now_ns)
    if updated == history and value is not None:
        return None
    if updated.is_empty and value is None:
        return None
    formatted = format_history(updated)
    return None if formatted == value else formatted
