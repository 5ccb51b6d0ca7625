"""``rollouts trace``: a pod's operations, or a CollaSet rollout, as a timeline (pure).

Objects in, timeline out: :func:`trace_pod` and :func:`trace_collaset` take what the cluster
holds (as the API server sends it, camelCase dicts) and a clock, and return frozen
dataclasses; :func:`render_pod` / :func:`render_collaset` draw them for people and
:func:`to_json` for tools. :mod:`rollouts.trace_command` reads the objects.

Where a pod's timeline comes from:

* the lifecycle labels (``<prefix>/<id>`` = unix nanos) of the operations under way;
* the history annotation (:mod:`lifecycle.history`): the phases whose labels are gone, the
  finished operations, and who held each one (a PodTransitionRule, a finalizer) when;
* the PodTransitionRules of the namespace: the status details say which rule rejects the
  pod now and why, the spec names the rule when a rule object has only one for the stage;
* the pod's Events (``TransitionRuleRejected`` names the rule and its reason for an hour).

A CollaSet's trace adds its progress points and hooks (``spec.lifecycleHooks``,
``status.hooks``), the hook Jobs, and per pod the last operation's time in each pod phase,
slowest pod first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from lifecycle.history import (
    HISTORY_ANNOTATION,
    PHASE_ORDER,
    Hold,
    OperationRecord,
    parse_history,
    phase_stamps,
)
from lifecycle.labels import OPERATING
from lifecycle.states import InvalidLifecycleLabel, OperationPhase, parse_state

IN_PROGRESS: Final = "InProgress"

#: Operation phases grouped by the pod phase they belong to (the columns of a CollaSet trace).
POD_PHASE_OF: Final[Mapping[OperationPhase, str]] = {
    OperationPhase.BEGUN: "PreCheck",
    OperationPhase.PRE_CHECK: "PreCheck",
    OperationPhase.PRE_CHECKED: "Preparing",
    OperationPhase.PREPARING: "Preparing",
    OperationPhase.OPERATING: "Operating",
    OperationPhase.OPERATED: "Operating",
    OperationPhase.POST_CHECK: "PostCheck",
    OperationPhase.POST_CHECKED: "PostCheck",
    OperationPhase.COMPLETING: "Completing",
}
POD_PHASES: Final = ("PreCheck", "Preparing", "Operating", "PostCheck", "Completing")

_RANK: Final = {phase: rank for rank, phase in enumerate(PHASE_ORDER)}
_REJECTED_EVENT: Final = re.compile(
    r"^PodTransitionRule (?P<ptr>\S+) rule (?P<rule>\S+) blocks (?P<stage>\w+): (?P<why>.*)$", re.S
)
_PTR_PREFIX: Final = "podtransitionrule "


# -- the model ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PhaseStep:
    """An operation entered ``phase`` at ``entered`` and spent ``seconds`` there (so far when ongoing)."""

    phase: str
    entered: datetime
    seconds: float
    ongoing: bool = False


@dataclass(frozen=True, kw_only=True)
class HoldSpan:
    """``by`` kept the operation in ``phase`` for ``seconds`` (still holding when ``until`` is None)."""

    by: str
    phase: str
    reason: str
    since: datetime
    until: datetime | None
    seconds: float


@dataclass(frozen=True, kw_only=True)
class OperationTrace:
    id: str
    type: str
    #: ``InProgress``, or how it ended (``Completed``, ``Undone`` ...).
    outcome: str
    steps: tuple[PhaseStep, ...]
    holds: tuple[HoldSpan, ...] = ()
    started: datetime | None = None
    ended: datetime | None = None
    #: From the first known phase to the end (or now).
    seconds: float = 0.0

    def seconds_in(self, pod_phase: str) -> float:
        """Time spent in the operation phases of one pod phase (PreCheck, Preparing ...)."""
        return sum(s.seconds for s in self.steps if POD_PHASE_OF.get(OperationPhase(s.phase)) == pod_phase)


@dataclass(frozen=True, kw_only=True)
class RuleState:
    """What one PodTransitionRule says about the pod now."""

    rule: str
    stage: str
    passed: bool
    rejections: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EventLine:
    time: datetime | None
    type: str
    reason: str
    message: str
    count: int = 1


@dataclass(frozen=True, kw_only=True)
class PodTrace:
    namespace: str
    name: str
    owner: str | None
    phase: str
    operations: tuple[OperationTrace, ...]
    rules: tuple[RuleState, ...]
    events: tuple[EventLine, ...]
    now: datetime
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class HookTrace:
    name: str
    progress_point: str
    point: int | None
    revision: str | None
    phase: str
    job: str | None
    started: datetime | None
    finished: datetime | None
    seconds: float | None
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class JobTrace:
    name: str
    hook: str
    revision: str
    outcome: str
    started: datetime | None
    finished: datetime | None
    seconds: float | None


@dataclass(frozen=True, kw_only=True)
class PodSummary:
    """A pod's last operation, summed per pod phase."""

    name: str
    revision: str | None
    operation: str | None
    type: str | None
    outcome: str | None
    seconds: float
    phases: Mapping[str, float] = field(default_factory=dict)
    held_by: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CollaSetTrace:
    namespace: str
    name: str
    replicas: int
    current_revision: str | None
    updated_revision: str | None
    hook_phase: str | None
    conditions: tuple[tuple[str, str, str, str], ...]
    hooks: tuple[HookTrace, ...]
    jobs: tuple[JobTrace, ...]
    pods: tuple[PodSummary, ...]
    now: datetime


# -- small readers --------------------------------------------------------------------------------


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 API timestamp (or a datetime) as an aware datetime; None when absent or bad."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _from_ms(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _owner(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')} {ref.get('name')}"
    return None


def event_lines(events: Iterable[Mapping[str, Any]]) -> tuple[EventLine, ...]:
    """Events oldest first (by their last occurrence)."""
    lines = []
    for event in events:
        series = event.get("series") or {}
        moment = parse_time(
            series.get("lastObservedTime")
            or event.get("lastTimestamp")
            or event.get("eventTime")
            or event.get("firstTimestamp")
            or (event.get("metadata") or {}).get("creationTimestamp")
        )
        lines.append(
            EventLine(
                time=moment,
                type=str(event.get("type") or ""),
                reason=str(event.get("reason") or ""),
                message=str(event.get("message") or ""),
                count=int(event.get("count") or series.get("count") or 1),
            )
        )
    epoch = datetime.fromtimestamp(0, tz=UTC)
    merged: list[EventLine] = []
    for line in sorted(lines, key=lambda e: e.time or epoch):
        last = merged[-1] if merged else None
        if last is not None and (last.time, last.type, last.reason, last.message) == (
            line.time,
            line.type,
            line.reason,
            line.message,
        ):
            merged[-1] = replace(last, count=last.count + line.count)  # the same Event posted again
        else:
            merged.append(line)
    return tuple(merged)


# -- one pod --------------------------------------------------------------------------------------


def _rule_states(pod_name: str, rules: Iterable[Mapping[str, Any]]) -> tuple[RuleState, ...]:
    found = []
    for rule in rules:
        for detail in (rule.get("status") or {}).get("details") or []:
            if detail.get("name") != pod_name:
                continue
            rejections = tuple(
                f"rule {info.get('ruleName')}: {info.get('reason')}"
                for info in detail.get("rejectInfo") or []
            )
            found.append(
                RuleState(
                    rule=str((rule.get("metadata") or {}).get("name")),
                    stage=str(detail.get("stage")),
                    passed=bool(detail.get("passed")),
                    rejections=rejections,
                )
            )
    return tuple(sorted(found, key=lambda r: r.rule))


def _single_rule(rules: Iterable[Mapping[str, Any]], ptr: str, stage: str) -> str:
    """``rule <name>`` when the rule object has exactly one enabled rule for the stage."""
    for rule in rules:
        if (rule.get("metadata") or {}).get("name") != ptr:
            continue
        names = [
            r.get("name")
            for r in (rule.get("spec") or {}).get("rules") or []
            if (r.get("stage") or "PreCheck") == stage and not r.get("disabled")
        ]
        if len(names) == 1:
            return f"rule {names[0]}"
    return ""


def explain_hold(
    hold: Hold,
    *,
    events: Sequence[EventLine],
    rules: Sequence[Mapping[str, Any]],
    states: Sequence[RuleState],
) -> str:
    """The reason of a PodTransitionRule hold the history could not name a rule for.

    In order: the last ``TransitionRuleRejected`` Event of that rule object and stage up to the
    hold's end, the rule object's current rejection of the pod, the rule object's only rule for
    the stage.
    """
    if hold.reason or not hold.by.startswith(_PTR_PREFIX):
        return hold.reason
    ptr = hold.by.removeprefix(_PTR_PREFIX)
    until = _from_ms(hold.until_ms) if hold.until_ms is not None else None
    best = ""
    for event in events:
        if event.reason != "TransitionRuleRejected":
            continue
        match = _REJECTED_EVENT.match(event.message)
        if match is None or match["ptr"] != ptr or match["stage"] != hold.phase.value:
            continue
        if until is not None and event.time is not None and event.time > until:
            continue
        best = f"rule {match['rule']}: {match['why']}"
    if best:
        return best
    for state in states:
        if state.rule == ptr and not state.passed and state.rejections:
            return "; ".join(state.rejections)
    return _single_rule(rules, ptr, hold.phase.value)


def _operation(
    rec: OperationRecord,
    *,
    now: datetime,
    events: Sequence[EventLine],
    rules: Sequence[Mapping[str, Any]],
    states: Sequence[RuleState],
) -> OperationTrace:
    ordered = sorted(rec.entered.items(), key=lambda item: (item[1], _RANK.get(item[0], 99)))
    end_ms = rec.ended_ms if rec.outcome is not None else None
    now_ms = _ms(now)
    steps = []
    for index, (phase, millis) in enumerate(ordered):
        last = index + 1 == len(ordered)
        until = ordered[index + 1][1] if not last else (end_ms if end_ms is not None else now_ms)
        steps.append(
            PhaseStep(
                phase=phase.value,
                entered=_from_ms(millis),
                seconds=max(0, until - millis) / 1000,
                ongoing=last and rec.outcome is None,
            )
        )
    holds = tuple(
        HoldSpan(
            by=hold.by,
            phase=hold.phase.value,
            reason=explain_hold(hold, events=events, rules=rules, states=states),
            since=_from_ms(hold.since_ms),
            until=_from_ms(hold.until_ms) if hold.until_ms is not None else None,
            seconds=hold.seconds(now_ms=end_ms if end_ms is not None else now_ms),
        )
        for hold in rec.holds
    )
    started = _from_ms(ordered[0][1]) if ordered else None
    ended = _from_ms(end_ms) if end_ms is not None else None
    total = ((end_ms if end_ms is not None else now_ms) - ordered[0][1]) / 1000 if ordered else 0.0
    return OperationTrace(
        id=rec.id,
        type=rec.type,
        outcome=rec.outcome.value if rec.outcome is not None else IN_PROGRESS,
        steps=tuple(steps),
        holds=holds,
        started=started,
        ended=ended,
        seconds=max(0.0, total),
    )


def operation_records(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[OperationRecord, ...]:
    """Finished operations (oldest first), then the ones under way: history and labels merged."""
    history = parse_history(annotations.get(HISTORY_ANNOTATION))
    recorded = {r.id: r for r in history.live}
    live = []
    for op in parse_state(labels):
        stamps = phase_stamps(op)
        rec = recorded.get(op.id)
        if rec is not None and OPERATING in op.values:
            begun = rec.entered.get(OperationPhase.BEGUN)
            if begun is not None and begun != stamps.get(OperationPhase.BEGUN):
                rec = None  # the history describes an earlier run of this id
        base = rec if rec is not None else OperationRecord(id=op.id)
        live.append(
            OperationRecord(
                id=op.id,
                type=str(op.type or op.undo_type or base.type),
                entered={**base.entered, **stamps},
                holds=base.holds,
            )
        )
    return (*history.done, *live)


def trace_pod(
    pod: Mapping[str, Any],
    *,
    events: Iterable[Mapping[str, Any]] = (),
    rules: Iterable[Mapping[str, Any]] = (),
    now: datetime,
) -> PodTrace:
    """The timeline of every operation the pod shows, with who held it, its rules and its Events."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    lines = event_lines(events)
    rule_list = list(rules)
    states = _rule_states(str(meta.get("name")), rule_list)
    problems: list[str] = []
    try:
        records = operation_records(labels, annotations)
        phase = parse_state(labels).phase.value
    except InvalidLifecycleLabel as error:
        records, phase = (), "Unknown"
        problems.append(str(error))
    operations = tuple(
        _operation(rec, now=now, events=lines, rules=rule_list, states=states) for rec in records
    )
    return PodTrace(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        owner=_owner(meta),
        phase=phase,
        operations=operations,
        rules=states,
        events=lines,
        now=now,
        problems=tuple(problems),
    )


# -- one CollaSet ---------------------------------------------------------------------------------


def _job_outcome(job: Mapping[str, Any]) -> tuple[str, datetime | None]:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "Succeeded", parse_time(
                status.get("completionTime") or condition.get("lastTransitionTime")
            )
        if condition.get("type") in ("Failed", "FailureTarget"):
            return "Failed", parse_time(condition.get("lastTransitionTime"))
    return "Running", None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def _hooks(collaset: Mapping[str, Any], now: datetime) -> tuple[HookTrace, ...]:
    spec, status = collaset.get("spec") or {}, collaset.get("status") or {}
    points = {
        str(h.get("name")): str(
            ((h.get("trigger") or {}).get("progressAvailableParams") or {}).get("progressPoint", 0)
        )
        for h in spec.get("lifecycleHooks") or []
    }
    found = []
    recorded = set()
    for record in status.get("hooks") or []:
        name = str(record.get("name"))
        recorded.add(name)
        started, finished = parse_time(record.get("startTime")), parse_time(record.get("finishTime"))
        running = record.get("phase") == "Running"
        found.append(
            HookTrace(
                name=name,
                progress_point=points.get(name, ""),
                point=record.get("point"),
                revision=record.get("revision"),
                phase=str(record.get("phase") or "Pending"),
                job=record.get("jobName"),
                started=started,
                finished=finished,
                seconds=_seconds(started, finished if not running else now),
                message=str(record.get("message") or ""),
            )
        )
    for name, point in points.items():
        if name not in recorded:
            found.append(
                HookTrace(
                    name=name,
                    progress_point=point,
                    point=None,
                    revision=None,
                    phase="NotRun",
                    job=None,
                    started=None,
                    finished=None,
                    seconds=None,
                )
            )
    return tuple(found)


def _jobs(jobs: Iterable[Mapping[str, Any]], now: datetime) -> tuple[JobTrace, ...]:
    found = []
    for job in jobs:
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        outcome, finished = _job_outcome(job)
        started = parse_time((job.get("status") or {}).get("startTime") or meta.get("creationTimestamp"))
        found.append(
            JobTrace(
                name=str(meta.get("name")),
                hook=str(labels.get("rollouts.kusionstack.io/hook", "")),
                revision=str(labels.get("controller-revision-hash", "")),
                outcome=outcome,
                started=started,
                finished=finished,
                seconds=_seconds(started, finished if outcome != "Running" else now),
            )
        )
    epoch = datetime.fromtimestamp(0, tz=UTC)
    return tuple(sorted(found, key=lambda j: (j.started or epoch, j.name)))


def summarize_pod(pod: Mapping[str, Any], *, now: datetime) -> PodSummary:
    """A pod's last operation (the one under way, else the last finished) per pod phase."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    name, revision = str(meta.get("name")), labels.get("controller-revision-hash")
    try:
        records = operation_records(labels, annotations)
    except InvalidLifecycleLabel:
        records = ()
    if not records:
        return PodSummary(name=name, revision=revision, operation=None, type=None, outcome=None, seconds=0.0)
    trace = _operation(records[-1], now=now, events=(), rules=(), states=())
    held = tuple(f"{h.by} {format_seconds(h.seconds)}" for h in trace.holds)
    return PodSummary(
        name=name,
        revision=revision,
        operation=trace.id,
        type=trace.type,
        outcome=trace.outcome,
        seconds=trace.seconds,
        phases={phase: trace.seconds_in(phase) for phase in POD_PHASES},
        held_by=held,
    )


def trace_collaset(
    collaset: Mapping[str, Any],
    *,
    pods: Iterable[Mapping[str, Any]] = (),
    jobs: Iterable[Mapping[str, Any]] = (),
    now: datetime,
) -> CollaSetTrace:
    """The rollout: revisions, conditions, hooks and their Jobs, and the pods slowest first."""
    meta, spec, status = (
        collaset.get("metadata") or {},
        collaset.get("spec") or {},
        collaset.get("status") or {},
    )
    summaries = sorted((summarize_pod(p, now=now) for p in pods), key=lambda s: (-s.seconds, s.name))
    conditions = tuple(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason") or ""), str(c.get("message") or ""))
        for c in status.get("conditions") or []
    )
    return CollaSetTrace(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        replicas=int(spec.get("replicas") or 0),
        current_revision=status.get("currentRevision"),
        updated_revision=status.get("updatedRevision"),
        hook_phase=status.get("hookPhase"),
        conditions=conditions,
        hooks=_hooks(collaset, now),
        jobs=_jobs(jobs, now),
        pods=tuple(summaries),
        now=now,
    )


# -- output ---------------------------------------------------------------------------------------


def format_seconds(seconds: float | None) -> str:
    """``0.4s``, ``12.3s``, ``2m05s``, ``1h02m``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_time(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _table(rows: Sequence[Sequence[str]], *, indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))).rstrip() for row in rows
    ]


def _hold_text(hold: HoldSpan) -> str:
    state = "" if hold.until is not None else ", still holding"
    reason = f" ({hold.reason})" if hold.reason else ""
    return f"held by {hold.by}{reason} for {format_seconds(hold.seconds)}{state}"


def render_operation(op: OperationTrace) -> list[str]:
    ended = f", ended {format_time(op.ended)}" if op.ended is not None else ""
    lines = [f"operation {op.id}  type {op.type or '?'}  {op.outcome}  {format_seconds(op.seconds)}{ended}"]
    rows: list[list[str]] = [["PHASE", "ENTERED", "TOOK", "HELD BY"]]
    for step in op.steps:
        holds = [h for h in op.holds if h.phase == step.phase]
        took = format_seconds(step.seconds) + (" so far" if step.ongoing else "")
        rows.append([step.phase, format_time(step.entered), took, "; ".join(_hold_text(h) for h in holds)])
    lines.extend(_table(rows))
    placed = {step.phase for step in op.steps}
    for hold in op.holds:
        if hold.phase not in placed:
            lines.append(f"  {hold.phase}: {_hold_text(hold)}")
    return lines


def render_pod(trace: PodTrace) -> str:
    owner = f"  ({trace.owner})" if trace.owner else ""
    lines = [f"pod {trace.namespace}/{trace.name}{owner}  phase {trace.phase}  at {format_time(trace.now)}"]
    lines.extend(f"problem: {p}" for p in trace.problems)
    if not trace.operations:
        lines.append("no operation recorded on this pod")
    for op in trace.operations:
        lines.append("")
        lines.extend(render_operation(op))
    if trace.rules:
        lines.append("")
        lines.append("podtransitionrules now:")
        for state in trace.rules:
            verdict = "passed" if state.passed else "rejected: " + "; ".join(state.rejections)
            lines.append(f"  {state.rule} ({state.stage}): {verdict}")
    if trace.events:
        lines.append("")
        lines.append("events:")
        rows = [["TIME", "TYPE", "REASON", "MESSAGE"]]
        for event in trace.events:
            count = f" (x{event.count})" if event.count > 1 else ""
            rows.append([format_time(event.time), event.type, event.reason, event.message + count])
        lines.extend(_table(rows))
    return "\n".join(lines) + "\n"


def render_collaset(trace: CollaSetTrace) -> str:
    lines = [
        f"collaset {trace.namespace}/{trace.name}  replicas {trace.replicas}  "
        f"revision {trace.current_revision or '-'} -> {trace.updated_revision or '-'}  "
        f"hooks {trace.hook_phase or '-'}  at {format_time(trace.now)}"
    ]
    for kind, status, reason, message in trace.conditions:
        lines.append(f"  condition {kind}={status} {reason}: {message}".rstrip(": "))
    lines.append("")
    if trace.hooks:
        lines.append("progress points and hooks:")
        rows = [["HOOK", "POINT", "PODS", "REVISION", "PHASE", "JOB", "STARTED", "TOOK"]]
        for hook in trace.hooks:
            rows.append(
                [
                    hook.name,
                    hook.progress_point,
                    "-" if hook.point is None else str(hook.point),
                    hook.revision or "-",
                    hook.phase,
                    hook.job or "-",
                    format_time(hook.started),
                    format_seconds(hook.seconds),
                ]
            )
        lines.extend(_table(rows))
    else:
        lines.append("no lifecycle hooks")
    if trace.jobs:
        lines.append("")
        lines.append("hook jobs:")
        rows = [["JOB", "HOOK", "REVISION", "OUTCOME", "STARTED", "TOOK"]]
        for job in trace.jobs:
            rows.append(
                [
                    job.name,
                    job.hook,
                    job.revision,
                    job.outcome,
                    format_time(job.started),
                    format_seconds(job.seconds),
                ]
            )
        lines.extend(_table(rows))
    lines.append("")
    if trace.pods:
        lines.append("pods, slowest first (last operation, time per phase):")
        rows = [["POD", "OPERATION", "OUTCOME", "TOTAL", *POD_PHASES, "HELD BY"]]
        for pod in trace.pods:
            rows.append(
                [
                    pod.name,
                    f"{pod.operation} ({pod.type})" if pod.operation else "-",
                    pod.outcome or "-",
                    format_seconds(pod.seconds) if pod.operation else "-",
                    *(
                        format_seconds(pod.phases.get(phase)) if pod.operation else "-"
                        for phase in POD_PHASES
                    ),
                    "; ".join(pod.held_by),
                ]
            )
        lines.extend(_table(rows))
    else:
        lines.append("no pods")
    return "\n".join(lines) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def to_json(trace: PodTrace | CollaSetTrace) -> dict[str, Any]:
    """The trace as JSON-ready data (times as RFC 3339 strings with milliseconds)."""
    if not is_dataclass(trace):
        raise TypeError(f"not a trace: {trace!r}")
    document: dict[str, Any] = _jsonable(asdict(trace))
    document["kind"] = "PodTrace" if isinstance(trace, PodTrace) else "CollaSetTrace"
    return document
