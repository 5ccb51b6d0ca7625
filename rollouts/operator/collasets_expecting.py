"""Expectations of the CollaSet controller: what a write should make the watch show before deciding again.

The controller decides from kopf's in-memory indexes, which lag behind its own writes by
one watch event. Deciding again before the index shows a write would repeat it (a
second pod created, a hook Job started twice, a label patch on a stale version). So,
as KusionStack Operating's ``ActiveExpectations``, every write records an
:class:`Expectation` and the reconcile of that CollaSet waits until each one is met:

* ``PRESENT``: a created object (pod, revision, Job) is in the index;
* ``CHANGED``: a patched object shows another resourceVersion than the one the
  patch was guarded with (or is gone); a 409 proves the same, so conflicts record it too;
* ``GONE``: a deleted object is out of the index, terminating, or replaced (other uid).

An expectation that is not met by its deadline expires with a warning and is dropped:
level-based reconciling makes a late or lost event harmless, never a reason to stop.
Pure: the caller passes a ``find(kind, name)`` lookup into its indexes and the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

log = logging.getLogger("rollouts.collasets")

#: Seconds to wait for the watch to show a write before deciding anyway.
DEFAULT_TIMEOUT: Final = 30.0


class Kind(StrEnum):
    POD = "pod"
    REVISION = "controllerrevision"
    JOB = "job"
    COLLASET = "collaset"
    RULE = "podtransitionrule"


class Expect(StrEnum):
    PRESENT = "present"
    CHANGED = "changed"
    GONE = "gone"


#: ``find(kind, name)``: the object as the index holds it, or None.
Finder = Callable[[Kind, str], Mapping[str, Any] | None]


@dataclass(frozen=True, kw_only=True)
class Expectation:
    kind: Kind
    name: str
    expect: Expect
    #: CHANGED: the version the write was based on.
    resource_version: str = ""
    #: GONE: the uid of the deleted object (a new object of the same name counts as gone).
    uid: str = ""
    deadline: float

    def met(self, found: Mapping[str, Any] | None) -> bool:
        if self.expect == Expect.PRESENT:
            return found is not None
        if found is None:
            return True
        meta = found.get("metadata") or {}
        if self.expect == Expect.CHANGED:
            return str(meta.get("resourceVersion", "")) != self.resource_version
        return bool(meta.get("deletionTimestamp")) or (bool(self.uid) and meta.get("uid") != self.uid)

    def describe(self) -> str:
        return f"{self.kind} {self.name} {self.expect}"


@dataclass
class Expectations:
    """The open expectations of one CollaSet."""

    timeout: float = DEFAULT_TIMEOUT
    open: list[Expectation] = field(default_factory=list)

    def expect_present(self, kind: Kind, name: str, *, now: float) -> None:
        self.open.append(
            Expectation(kind=kind, name=name, expect=Expect.PRESENT, deadline=now + self.timeout)
        )

    def expect_changed(self, kind: Kind, name: str, *, resource_version: str, now: float) -> None:
        self.open.append(
            Expectation(
                kind=kind,
                name=name,
                expect=Expect.CHANGED,
                resource_version=resource_version,
                deadline=now + self.timeout,
            )
        )

    def expect_gone(self, kind: Kind, name: str, *, uid: str = "", now: float) -> None:
        self.open.append(
            Expectation(kind=kind, name=name, expect=Expect.GONE, uid=uid, deadline=now + self.timeout)
        )

    def settle(self, find: Finder, *, now: float, owner: str = "") -> float | None:
        """Drop met and expired expectations; seconds until the next deadline, None when all are met."""
        still: list[Expectation] = []
        for expectation in self.open:
            if expectation.met(find(expectation.kind, expectation.name)):
                continue
            if now >= expectation.deadline:
                log.warning(
                    "collaset %s: expectation %s not met within %.0fs; deciding anyway",
                    owner,
                    expectation.describe(),
                    self.timeout,
                )
                continue
            still.append(expectation)
        self.open = still
        if not still:
            return None
        return max(0.0, min(e.deadline for e in still) - now)

    def pending(self) -> list[str]:
        return [e.describe() for e in self.open]
