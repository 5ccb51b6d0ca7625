"""``rollouts status cls/NAME``: follow a CollaSet rollout live, with kubectl rollout status' exit codes.

Where it sits: a read-only client of the API server, apart from the operator. Two watches
(the CollaSet, and the pods it controls) keep an in-memory copy of the objects; after
every change the copy goes through three pure steps:

* :func:`view_rollout` turns the CollaSet and its pods into a :class:`RolloutView`
  (counts, revisions, each pod's lifecycle phase, the hooks, why the rollout waits);
* :func:`assess` judges the CollaSet alone: complete, failed, deadline exceeded or
  still progressing (the view carries the verdict);
* :func:`render_plain` (one keyed line per fact; :func:`changed_lines` prints only what
  changed, no ANSI) or :func:`render_live` (a ``rich`` renderable redrawn in place when
  stdout is a terminal) draws it.

Semantics follow ``kubectl rollout status``: it waits by default (``-w``/``--watch``);
``--watch=false`` (or ``-w=false``) prints the state once. Exit codes:

====  =======================================================================================
0     the rollout is complete: status observed the latest generation, every replica is on
      the updated revision and service-available, ``currentRevision == updatedRevision``
      and no hook of the revision is pending or running. A rollout stopped by a partition
      is complete once the pods it allows are updated and available ("partitioned rollout
      complete", as kubectl says for a StatefulSet partition). With ``--watch=false``: also
      while the rollout is still in progress (kubectl does the same; read the printed line)
1     the rollout failed: condition ``Failed`` is True (reason ``HookFailed``: an ``Abort``
      hook failed); also any error (CollaSet not found or deleted, API unreachable)
2     the progress deadline was exceeded: condition ``Progressing`` False with reason
      ``ProgressDeadlineExceeded`` (``spec.progressDeadlineSeconds`` passed without progress)
3     ``--timeout`` passed before the rollout finished
130   interrupted (Ctrl-C)
====  =======================================================================================

kubectl returns 1 for every failure; the distinct codes here let scripts tell a failed hook
from a stuck rollout from their own impatience.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol, TextIO

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from lifecycle.labels import SERVICE_AVAILABLE
from lifecycle.states import InvalidLifecycleLabel, parse_state
from rollouts import kube
from rollouts.api.collasets import GROUP, KIND, REVISION_LABEL, VERSION, ConditionType

PLURAL: Final = "collasets"
#: Names ``rollouts status`` accepts before ``/NAME`` (kubectl's spellings of the resource).
RESOURCE_NAMES: Final = frozenset({"cls", "collaset", "collasets", f"collaset.{GROUP}", f"collasets.{GROUP}"})

PROGRESSING_CONDITION: Final = "Progressing"
DEADLINE_REASON: Final = "ProgressDeadlineExceeded"
#: Update condition reasons that mean "stopped on purpose by the partition".
PARTITION_REASONS: Final = frozenset({"Partitioned", "WaitingForPartition"})


class Outcome(StrEnum):
    PROGRESSING = "Progressing"
    COMPLETE = "Complete"
    FAILED = "Failed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"


EXIT_COMPLETE: Final = 0
EXIT_FAILED: Final = 1
EXIT_DEADLINE: Final = 2
EXIT_TIMEOUT: Final = 3
EXIT_INTERRUPTED: Final = 130

EXIT_CODES: Final[Mapping[Outcome, int]] = {
    Outcome.COMPLETE: EXIT_COMPLETE,
    Outcome.PROGRESSING: EXIT_COMPLETE,  # only reached with --watch=false, as kubectl does
    Outcome.FAILED: EXIT_FAILED,
    Outcome.DEADLINE_EXCEEDED: EXIT_DEADLINE,
}


class StatusError(Exception):
    """``rollouts status`` cannot follow the rollout (bad argument, not found, deleted)."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    outcome: Outcome
    #: One sentence: what the rollout is doing or how it ended.
    message: str


@dataclass(frozen=True, kw_only=True)
class PodRow:
    name: str
    revision: str
    #: On the CollaSet's updated revision.
    updated: bool
    #: ``update Preparing``, ``ServiceAvailable``, ``Terminating`` ...
    lifecycle: str
    ready: bool
    available: bool


@dataclass(frozen=True, kw_only=True)
class HookRow:
    name: str
    point: int
    phase: str
    job: str | None = None
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class RolloutView:
    namespace: str
    name: str
    replicas: int
    updated: int
    updated_available: int
    available: int
    current_revision: str | None
    updated_revision: str | None
    verdict: Verdict
    #: Why the rollout is not done yet (the Update condition's message); "" when it is not waiting.
    waiting: str = ""
    hooks: tuple[HookRow, ...] = ()
    pods: tuple[PodRow, ...] = ()

    @property
    def running_hook(self) -> HookRow | None:
        """The hook running now, else the next one pending."""
        for phase in ("Running", "Pending"):
            for hook in self.hooks:
                if hook.phase == phase:
                    return hook
        return None


# -- parsing arguments --------------------------------------------------------------------------


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float | None:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"250ms"`` or bare seconds -> seconds; 0 means no timeout (None).

    Raises :class:`StatusError` naming the accepted forms otherwise.
    """
    raw = text.strip()
    seconds: float
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = _DURATION_PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise StatusError(f"invalid duration {text!r}: use e.g. 90s, 5m, 1h30m or a number of seconds")
        scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
        seconds = sum(float(n) * scale[u] for n, u in parts)
    return None if seconds == 0 else seconds


def parse_target(text: str) -> str:
    """The CollaSet name from ``cls/NAME`` (also ``collaset/NAME``, ``collasets.<group>/NAME``, ``NAME``)."""
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "cls", text
    if kind.lower() not in RESOURCE_NAMES:
        raise StatusError(f"rollouts status follows CollaSets only: expected cls/NAME, got {text!r}")
    if not name or "/" in name:
        raise StatusError(f"expected cls/NAME, got {text!r}")
    return name


def parse_bool(text: str) -> bool:
    """kubectl's boolean flag values; ``-w=false`` reaches us as ``=false``."""
    value = text.lstrip("=").strip().lower()
    if value in ("true", "t", "1", "yes"):
        return True
    if value in ("false", "f", "0", "no"):
        return False
    raise StatusError(f"invalid boolean {text!r}: use true or false")


class WatchFlag(argparse.Action):
    """``-w``/``--watch`` as kubectl spells it: a bare flag, ``--watch=false`` or ``-w=false``.

    argparse lets an optional value swallow the next word, so ``status -w cls/web`` would take
    ``cls/web`` for the flag's value; a value that is no boolean is handed back as the target.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = values if isinstance(values, str) else "true"
        try:
            setattr(namespace, self.dest, parse_bool(value))
        except StatusError:
            setattr(namespace, self.dest, True)
            namespace.swallowed_target = value


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector as a label selector query (``app=web,tier in (a,b),!canary``)."""
    selector = selector or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(expression.get("values") or [])
        terms.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }.get(operator, key)
        )
    return ",".join(terms)


# -- the pure view ------------------------------------------------------------------------------


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _hooks_of(status: Mapping[str, Any]) -> tuple[HookRow, ...]:
    """The hooks of the updated revision, by point then name."""
    revision = status.get("updatedRevision")
    rows = [
        HookRow(
            name=str(h.get("name", "")),
            point=_int(h.get("point")),
            phase=str(h.get("phase") or "Pending"),
            job=h.get("jobName"),
            message=str(h.get("message") or ""),
        )
        for h in status.get("hooks") or []
        if isinstance(h, Mapping) and h.get("revision") == revision
    ]
    return tuple(sorted(rows, key=lambda h: (h.point, h.name)))


def assess(collaset: Mapping[str, Any]) -> Verdict:
    """Complete, failed, deadline exceeded or progressing, from the CollaSet alone (module docstring)."""
    meta = collaset.get("metadata") or {}
    spec = collaset.get("spec") or {}
    status = collaset.get("status") or {}
    conditions = _conditions(status)
    failed = conditions.get(ConditionType.FAILED)
    if failed is not None and failed.get("status") == "True":
        return Verdict(
            outcome=Outcome.FAILED, message=f"rollout failed: {failed.get('message') or 'a hook failed'}"
        )
    progressing = conditions.get(PROGRESSING_CONDITION)
    if (
        progressing is not None
        and progressing.get("status") == "False"
        and progressing.get("reason") == DEADLINE_REASON
    ):
        detail = progressing.get("message") or "no progress within spec.progressDeadlineSeconds"
        return Verdict(outcome=Outcome.DEADLINE_EXCEEDED, message=f"progress deadline exceeded: {detail}")
    if not status or _int(status.get("observedGeneration")) < _int(meta.get("generation")):
        return Verdict(
            outcome=Outcome.PROGRESSING, message="waiting for the rollout spec update to be observed"
        )

    wanted = _int(spec.get("replicas", 1))
    live, updated = _int(status.get("replicas")), _int(status.get("updatedReplicas"))
    updated_available = _int(status.get("updatedAvailableReplicas"))
    hooks = _hooks_of(status)
    busy_hooks = [h for h in hooks if h.phase in ("Pending", "Running")]
    revision = status.get("updatedRevision")
    if (
        live == updated == updated_available == wanted
        and revision is not None
        and status.get("currentRevision") == revision
        and not busy_hooks
    ):
        return Verdict(
            outcome=Outcome.COMPLETE,
            message=f"rollout complete: {wanted} of {wanted} pods updated and available, revision {revision}",
        )
    update = conditions.get(ConditionType.UPDATE) or {}
    if (
        update.get("status") == "False"
        and update.get("reason") in PARTITION_REASONS
        and live == wanted
        and updated == updated_available < wanted
        and _int(status.get("operatingReplicas")) == 0
        and not any(h.phase == "Running" for h in hooks)
    ):
        return Verdict(
            outcome=Outcome.COMPLETE,
            message=(
                f"partitioned rollout complete: {updated} of {wanted} pods updated and available on "
                f"revision {revision}; {update.get('message', '')}"
            ).rstrip("; "),
        )
    return Verdict(
        outcome=Outcome.PROGRESSING,
        message=f"waiting for the rollout to finish: {updated_available} of {wanted} updated pods available",
    )


def _condition_true(pod: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _controlled_by(pod: Mapping[str, Any], uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("kind") == KIND and r.get("uid") == uid for r in refs)


def describe_lifecycle(pod: Mapping[str, Any]) -> str:
    """The pod's place in PodOpsLifecycle: ``update Preparing``, ``ServiceAvailable``, ``Terminating`` ..."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    try:
        state = parse_state(meta.get("labels") or {})
    except InvalidLifecycleLabel as error:
        return f"invalid lifecycle labels ({error})"
    operations = [f"{op.type or op.id} {op.phase.value}" for op in state.live]
    return ", ".join(operations) if operations else state.phase.value


def view_pod(pod: Mapping[str, Any], *, updated_revision: str | None) -> PodRow:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    revision = str(labels.get(REVISION_LABEL, ""))
    return PodRow(
        name=str(meta.get("name", "")),
        revision=revision,
        updated=bool(revision) and revision == updated_revision,
        lifecycle=describe_lifecycle(pod),
        ready=_condition_true(pod, "Ready"),
        available=SERVICE_AVAILABLE in labels and not meta.get("deletionTimestamp"),
    )


def view_rollout(collaset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> RolloutView:
    """The whole picture of one CollaSet's rollout; ``pods`` may include pods it does not control."""
    meta = collaset.get("metadata") or {}
    status = collaset.get("status") or {}
    verdict = assess(collaset)
    updated_revision = status.get("updatedRevision")
    uid = meta.get("uid")
    rows = sorted(
        (view_pod(p, updated_revision=updated_revision) for p in pods if _controlled_by(p, uid)),
        key=lambda r: r.name,
    )
    waiting = ""
    if verdict.outcome == Outcome.PROGRESSING:
        update = _conditions(status).get(ConditionType.UPDATE) or {}
        if update.get("status") == "False" and update.get("message"):
            waiting = str(update["message"])
        elif verdict.message.startswith("waiting for the rollout spec"):
            waiting = verdict.message
        if (collaset.get("spec") or {}).get("paused") and "paused" not in waiting:
            waiting = f"{waiting}; paused (spec.paused)" if waiting else "paused (spec.paused)"
    return RolloutView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        replicas=_int((collaset.get("spec") or {}).get("replicas", 1)),
        updated=_int(status.get("updatedReplicas")),
        updated_available=_int(status.get("updatedAvailableReplicas")),
        available=_int(status.get("availableReplicas")),
        current_revision=status.get("currentRevision"),
        updated_revision=updated_revision,
        verdict=verdict,
        waiting=waiting,
        hooks=_hooks_of(status),
        pods=tuple(rows),
    )


# -- rendering ----------------------------------------------------------------------------------


def _hook_text(hook: HookRow) -> str:
    job = f", job {hook.job}" if hook.job else ""
    message = f" ({hook.message})" if hook.message and hook.phase == "Failed" else ""
    return f"hook {hook.name} (at {hook.point} available pods): {hook.phase}{job}{message}"


def _pod_text(pod: PodRow) -> str:
    revision = ("new " if pod.updated else "old ") + (pod.revision or "(no revision)")
    ready = "ready" if pod.ready else "not ready"
    available = "available" if pod.available else "not available"
    return f"pod {pod.name}: {revision}, {pod.lifecycle}, {ready}, {available}"


def _revisions(view: RolloutView) -> str:
    if view.current_revision and view.current_revision != view.updated_revision:
        return f"revision {view.current_revision} -> {view.updated_revision}"
    return f"revision {view.updated_revision or '(none yet)'}"


def render_plain(view: RolloutView) -> dict[str, str]:
    """One line per fact, keyed so a caller can print only the lines that changed."""
    ref = f"cls/{view.name}"
    lines = {
        "rollout": (
            f"{ref}: {view.updated}/{view.replicas} updated, {view.updated_available}/{view.replicas} "
            f"updated available, {_revisions(view)}"
        )
    }
    if view.waiting:
        lines["waiting"] = f"{ref}: waiting: {view.waiting}"
    for hook in view.hooks:
        lines[f"hook/{hook.name}"] = _hook_text(hook)
    for pod in view.pods:
        lines[f"pod/{pod.name}"] = _pod_text(pod)
    return lines


def changed_lines(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The lines of ``after`` that are new or differ from ``before``, then one line per pod gone."""
    out = [line for key, line in after.items() if before.get(key) != line]
    out += [
        f"{key.replace('/', ' ', 1)}: gone" for key in before if key not in after and key.startswith("pod/")
    ]
    return out


_PHASE_STYLES: Final = {
    "Succeeded": "green",
    "Running": "yellow",
    "Pending": "dim",
    "Failed": "red",
    "Cancelled": "dim",
}


def _bar(done: int, total: int) -> Table:
    """A progress bar followed by ``done/total``."""
    grid = Table.grid(padding=(0, 1))
    grid.add_row(
        ProgressBar(total=max(total, 1), completed=min(done, max(total, 1)), width=40), f"{done}/{total}"
    )
    return grid


def render_live(view: RolloutView) -> RenderableType:
    """The terminal view: header, two progress bars, hooks, the wait reason and a pod table."""
    header = Table.grid(padding=(0, 1))
    header.add_column(style="bold", no_wrap=True)
    header.add_column()
    header.add_row("CollaSet", Text(f"{view.namespace}/{view.name}  {_revisions(view)}"))
    header.add_row("updated", _bar(view.updated, view.replicas))
    header.add_row("available", _bar(view.updated_available, view.replicas))
    running = view.running_hook
    if running is not None:
        job = f"  job {running.job}" if running.job else ""
        header.add_row(
            "hook",
            Text.assemble(
                (f"{running.name} ", "bold"),
                f"(at {running.point} available pods) ",
                (running.phase, _PHASE_STYLES.get(running.phase, "")),
                job,
            ),
        )
    if view.hooks:
        summary = Text()
        for index, hook in enumerate(view.hooks):
            if index:
                summary.append("  ")
            summary.append(f"{hook.name} ")
            summary.append(hook.phase, style=_PHASE_STYLES.get(hook.phase, ""))
        header.add_row("hooks", summary)
    if view.waiting:
        header.add_row("waiting", Text(view.waiting, style="yellow"))
    style = {
        Outcome.COMPLETE: "bold green",
        Outcome.FAILED: "bold red",
        Outcome.DEADLINE_EXCEEDED: "bold red",
    }.get(view.verdict.outcome)
    if style is not None:
        header.add_row("result", Text(view.verdict.message, style=style))

    pods = Table(box=None, padding=(0, 2), header_style="bold")
    for column in ("pod", "revision", "lifecycle", "ready", "available"):
        pods.add_column(column, no_wrap=column != "lifecycle")
    for pod in view.pods:
        pods.add_row(
            pod.name,
            Text(("new " if pod.updated else "old ") + pod.revision, style="green" if pod.updated else "dim"),
            pod.lifecycle,
            Text("yes", style="green") if pod.ready else Text("no", style="red"),
            Text("yes", style="green") if pod.available else Text("no", style="red"),
        )
    return Group(header, Text(""), pods)


# -- following a rollout ------------------------------------------------------------------------


class Display(Protocol):
    def show(self, view: RolloutView) -> None: ...

    def close(self) -> None: ...


@dataclass
class PlainDisplay:
    """Prints the lines that changed since the last view (for pipes, logs and CI)."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    shown: dict[str, str] = field(default_factory=dict)

    def show(self, view: RolloutView) -> None:
        lines = render_plain(view)
        for line in changed_lines(self.shown, lines):
            print(line, file=self.out, flush=True)
        self.shown = lines

    def close(self) -> None:
        pass


class LiveDisplay:
    """Redraws :func:`render_live` in place (a terminal)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.live: Live | None = None

    def show(self, view: RolloutView) -> None:
        if self.live is None:
            self.live = Live(render_live(view), console=self.console, auto_refresh=False)
            self.live.start(refresh=True)
        else:
            self.live.update(render_live(view), refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def make_display(out: TextIO | None = None) -> Display:
    """Live view on a terminal, changed lines otherwise."""
    stream = out or sys.stdout
    if stream.isatty():
        return LiveDisplay(Console(file=stream))
    return PlainDisplay(out=stream)


@dataclass
class _Mirror:
    """What one watch has shown: objects by name, and whether the first listing arrived."""

    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)


async def _list_raw(list_call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A LIST as the server sent it (camelCase dicts), not as client models."""
    response = await list_call(*args, _preload_content=False, **kwargs)
    document: dict[str, Any] = await response.json()
    return document


async def _mirror(
    list_call: Callable[..., Awaitable[Any]],
    *args: Any,
    into: _Mirror,
    changed: asyncio.Event,
    **kwargs: Any,
) -> None:
    """List, then watch from the list's resourceVersion; list again when the server says 410 Gone."""
    while True:
        document = await _list_raw(list_call, *args, **kwargs)
        into.items = {i["metadata"]["name"]: i for i in document.get("items") or []}
        version = document["metadata"]["resourceVersion"]
        into.synced.set()
        changed.set()
        try:
            while True:
                async with Watch().stream(
                    list_call, *args, resource_version=version, timeout_seconds=240, **kwargs
                ) as stream:
                    async for event in stream:
                        obj = event["raw_object"]
                        name = obj["metadata"]["name"]
                        if event["type"] == "DELETED":
                            into.items.pop(name, None)
                        else:
                            into.items[name] = obj
                        changed.set()
                    version = stream.resource_version or version
        except ApiException as error:
            if error.status != 410:
                raise


async def follow_rollout(
    api: client.ApiClient,
    *,
    namespace: str,
    name: str,
    display: Display,
    watch: bool = True,
    timeout: float | None = None,
) -> tuple[int, str]:
    """Show the rollout of ``namespace/name`` until it ends; ``(exit code, final message)``."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    try:
        first: dict[str, Any] = await custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
    except ApiException as e:
        error = kube.map_error(e)
        if isinstance(error, kube.NotFound):
            raise StatusError(f'collaset "{name}" not found in namespace "{namespace}"') from e
        raise StatusError(f"reading collaset {namespace}/{name}: {error}") from e
    selector = selector_string((first.get("spec") or {}).get("selector"))
    if not watch:
        pods = await _list_raw(core.list_namespaced_pod, namespace, label_selector=selector)
        view = view_rollout(first, pods.get("items") or [])
        display.show(view)
        display.close()
        return EXIT_CODES[view.verdict.outcome], view.verdict.message

    changed = asyncio.Event()
    collasets, pods_seen = _Mirror(), _Mirror()
    tasks = [
        asyncio.create_task(
            _mirror(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                into=collasets,
                changed=changed,
                field_selector=f"metadata.name={name}",
            )
        ),
        asyncio.create_task(
            _mirror(
                core.list_namespaced_pod, namespace, into=pods_seen, changed=changed, label_selector=selector
            )
        ),
    ]
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    try:
        while True:
            waits = [asyncio.ensure_future(changed.wait()), *tasks]
            left = None if deadline is None else max(deadline - loop.time(), 0)
            done, _ = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            waits[0].cancel()
            for task in tasks:
                if task in done:
                    task.result()  # a watch failed for good: raise its error
            if not done:
                display.close()
                return EXIT_TIMEOUT, f"timed out waiting for the rollout of cls/{name} after {timeout:g}s"
            changed.clear()
            if not (collasets.synced.is_set() and pods_seen.synced.is_set()):
                continue
            current = collasets.items.get(name)
            if current is None or current["metadata"].get("uid") != first["metadata"].get("uid"):
                display.close()
                return EXIT_FAILED, f"collaset {namespace}/{name} was deleted"
            view = view_rollout(current, pods_seen.items.values())
            display.show(view)
            if view.verdict.outcome != Outcome.PROGRESSING:
                display.close()
                return EXIT_CODES[view.verdict.outcome], view.verdict.message
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        display.close()


def default_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context, else ``default``."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        _, active = config.list_kube_config_contexts(config_file=path)
    except Exception:  # no kubeconfig or no current context: the API client reports it better
        return "default"
    return str(((active or {}).get("context") or {}).get("namespace") or "default")


def run_status(
    *,
    target: str,
    namespace: str | None,
    kubeconfig: str | None,
    watch: bool,
    timeout: float | None,
    out: TextIO | None = None,
) -> int:
    """The ``rollouts status`` command: follow, print the final line, return the exit code."""
    name = parse_target(target)
    stream = out or sys.stdout
    ns = namespace or default_namespace(kubeconfig)

    async def main() -> tuple[int, str]:
        async with kube.api_session(kubeconfig) as api:
            return await follow_rollout(
                api, namespace=ns, name=name, display=make_display(stream), watch=watch, timeout=timeout
            )

    try:
        code, message = asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted", file=stream, flush=True)
        return EXIT_INTERRUPTED
    if code == EXIT_COMPLETE:
        print(message, file=stream, flush=True)
    else:
        print(f"rollouts: {message}", file=sys.stderr, flush=True)
    return code
