"""A pure simulation of one pod and the actors around it, for the lifecycle sequence tests.

Actors: operation controllers (through :mod:`lifecycle.operations`), the lifecycle
(:func:`advance` / :func:`settle`, writing labels and the service-ready condition), a
traffic controller (adds its protection finalizer while the pod is Ready, removes it
otherwise) and the kubelet (Ready = containers ready and the gate condition True).
Every write is checked against :func:`validate` and the safety invariants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lifecycle.advancing import LifecyclePatch, PodFacts, advance, settle
from lifecycle.changes import LabelChange
from lifecycle.labels import OperationId, OperationType
from lifecycle.operations import (
    LabelAdapter,
    OperationConflict,
    allow_ops,
    begin,
    finish,
    is_during_ops,
    undo,
)
from lifecycle.states import OperationPhase, PodPhase, parse_state
from lifecycle.validating import validate

from .lifecycle_builders import CONTROLLED, NOW, TRAFFIC_FINALIZER


class InvariantBroken(AssertionError):
    pass


@dataclass
class World:
    labels: dict[str, str] = field(default_factory=lambda: dict(CONTROLLED))
    annotations: dict[str, str] = field(default_factory=dict)
    finalizers: set[str] = field(default_factory=set)
    has_gate: bool = True
    service_ready: bool | None = None
    containers_ready: bool = True
    traffic_controller: bool = True
    now: int = NOW
    #: Label sets after each write, for tests that assert the sequence.
    trail: list[dict[str, str]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.containers_ready and (not self.has_gate or self.service_ready is True)

    def facts(self, **verdicts: Any) -> PodFacts:
        return PodFacts(
            labels=self.labels,
            finalizers=frozenset(self.finalizers),
            annotations=self.annotations,
            has_readiness_gate=self.has_gate,
            service_ready=self.service_ready,
            ready=self.ready,
            **verdicts,
        )

    def tick(self) -> None:
        self.now += 1_000_000_000

    def write(self, change: LabelChange) -> bool:
        if change.is_empty:
            return False
        self.labels = change.apply(self.labels)
        self.trail.append(dict(self.labels))
        self.check()
        return True

    def lifecycle(self, *, settled: bool = False, pre: bool = True, post: bool = True) -> LifecyclePatch:
        """One lifecycle pass: labels written, then the status condition."""
        self.tick()
        facts = self.facts(pre_check_passed=pre, post_check_passed=post)
        patch = settle(facts, now_ns=self.now) if settled else advance(facts, now_ns=self.now)
        self.write(patch.labels)
        if patch.service_ready is not None:
            self.service_ready = patch.service_ready
            self.check()
        return patch

    def run_traffic_controller(self) -> None:
        if not self.traffic_controller:
            return
        if self.ready:
            self.finalizers.add(TRAFFIC_FINALIZER)
        else:
            self.finalizers.discard(TRAFFIC_FINALIZER)
        self.check()

    def check(self) -> None:
        errors = validate(self.labels, self.annotations)
        if errors:
            raise InvariantBroken(f"invalid labels {self.labels}: {errors}")
        state = parse_state(self.labels)
        operating = [op.id for op in state.live if op.phase is OperationPhase.OPERATING]
        if operating and self.has_gate and self.service_ready is True:
            raise InvariantBroken(f"{operating} may operate while service-ready is True: {self.labels}")
        exposed = [
            op.id for op in state.live if op.phase in (OperationPhase.PREPARING, OperationPhase.OPERATING)
        ]
        if exposed and state.service_available:
            raise InvariantBroken(f"{exposed} preparing/operating while service-available: {self.labels}")

    @property
    def phase(self) -> PodPhase:
        return parse_state(self.labels).phase


@dataclass
class Operator:
    """A level-based operation controller: begin, wait for operate, finish (or cancel)."""

    adapter: LabelAdapter
    wants: bool = False
    conflicts: int = 0

    @classmethod
    def of(cls, op_id: str, op_type: str, *, multi: bool = True) -> Operator:
        return cls(LabelAdapter(id=OperationId(op_id), type=OperationType(op_type), allow_multi_type=multi))

    def progress(self, world: World) -> None:
        if not self.wants:
            return
        if not is_during_ops(self.adapter, world.labels):
            try:
                world.write(begin(self.adapter, world.labels, now_ns=world.now))
            except OperationConflict:
                self.conflicts += 1
            return
        if allow_ops(self.adapter, world.labels, now_ns=world.now).allowed:
            world.write(finish(self.adapter, world.labels))
            self.wants = False

    def cancel(self, world: World) -> None:
        if self.wants and is_during_ops(self.adapter, world.labels):
            world.write(undo(self.adapter, world.labels))
            self.wants = False


def drain(world: World, operators: list[Operator], *, settled: bool, rounds: int = 60) -> int:
    """Let every actor behave until nothing changes; the number of rounds it took."""
    world.containers_ready = True
    quiet = 0
    for n in range(rounds):
        before = (dict(world.labels), set(world.finalizers), world.service_ready)
        for operator in operators:
            operator.progress(world)
        world.lifecycle(settled=settled)
        world.run_traffic_controller()
        after = (world.labels, world.finalizers, world.service_ready)
        quiet = quiet + 1 if before == after and not any(o.wants for o in operators) else 0
        if quiet >= 2:
            return n
    raise AssertionError(f"no quiescence after {rounds} rounds: {world.labels}")
