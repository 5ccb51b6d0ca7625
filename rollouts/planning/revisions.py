"""Pure revision handling for CollaSets: which ControllerRevision the template is, and which to prune.

First step of a CollaSet reconcile: from the current pod template and the observed
ControllerRevisions, :func:`plan_revisions` names the updated revision and returns the
typed actions that make it exist (create, or bump the number of an earlier identical
revision: a rollback) and that prune history. The update planner then reads pod
templates back from revisions with :func:`read_template`, and the hook planner gets
the rollout type from :func:`classify_rollout`.

As in Kubernetes' controller history (and KusionStack Operating):

* revision data is ``{"spec": {"template": <template + "$patch": "replace">}}``;
* the name is ``<collaset>-<hash>``, the hash being FNV-32a of the data as canonical
  JSON (plus the collision count when non-zero), safe-encoded like ``rand.SafeEncodeString``;
* a template equal to an existing revision reuses it; if that revision is not the latest,
  its ``revision`` number is bumped to latest + 1 (a rollback keeps the old name, so pods
  on it are already up to date);
* a name taken by different data bumps ``collisionCount`` and hashes again.

Pruning keeps ``historyLimit`` revisions besides the live ones and never deletes a live
one: the updated and current revisions and any revision a pod is on.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hooks.models import RolloutType
from rollouts.api.collasets import API_VERSION, HASH_LABEL, KIND

#: On ControllerRevisions we create: the ``revision`` number it was created with (a bump keeps it).
FIRST_REVISION_ANNOTATION: Final = "rollouts.kusionstack.io/first-revision"

_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


@dataclass(frozen=True, kw_only=True)
class RevisionView:
    """An observed ControllerRevision of the CollaSet."""

    name: str
    revision: int
    data: Mapping[str, Any]
    uid: str = ""
    created: datetime | None = None
    #: ``revision`` at creation (:data:`FIRST_REVISION_ANNOTATION`); None for revisions made elsewhere.
    first_revision: int | None = None


@dataclass(frozen=True, kw_only=True)
class CreateRevision:
    name: str
    revision: int
    manifest: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class BumpRevision:
    """Patch ``revision`` of an existing ControllerRevision (a rollback to it)."""

    name: str
    revision: int


@dataclass(frozen=True, kw_only=True)
class DeleteRevision:
    name: str


RevisionAction = CreateRevision | BumpRevision | DeleteRevision


@dataclass(frozen=True, kw_only=True)
class RevisionPlan:
    updated_revision: str
    collision_count: int
    #: The updated revision is an earlier one brought back (its number bumped).
    rollback: bool
    actions: tuple[RevisionAction, ...]


def make_revision_data(template: Mapping[str, Any]) -> dict[str, Any]:
    """The ControllerRevision ``data`` of a pod template (a strategic-merge patch replacing the template)."""
    return {"spec": {"template": {**template, "$patch": "replace"}}}


def read_template(data: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template stored in revision ``data`` (without the patch directive)."""
    template = dict((data.get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


def hash_revision(data: Mapping[str, Any], *, collision_count: int = 0) -> str:
    """Safe-encoded FNV-32a of the canonical JSON of ``data`` (and the collision count when set)."""
    payload = _canonical(data).encode()
    if collision_count:
        payload += str(collision_count).encode()
    value = _FNV_OFFSET
    for byte in payload:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(char) % len(_SAFE_ALPHABET)] for char in str(value))


def name_revision(*, collaset: str, revision_hash: str) -> str:
    return f"{collaset}-{revision_hash}"


def plan_revisions(
    *,
    collaset: str,
    namespace: str,
    collaset_uid: str,
    template: Mapping[str, Any],
    selector_labels: Mapping[str, str],
    revisions: Sequence[RevisionView],
    collision_count: int,
    history_limit: int,
    current_revision: str | None,
    pod_revisions: Collection[str],
) -> RevisionPlan:
    """Name the updated revision, make it exist, prune history; see the module docstring."""
    data = make_revision_data(template)
    wanted = _canonical(data)
    latest = max((r.revision for r in revisions), default=0)
    same = [r for r in revisions if _canonical(r.data) == wanted]
    actions: list[RevisionAction] = []
    rollback = False
    if same:
        match = max(same, key=lambda r: r.revision)
        updated = match.name
        if match.revision < latest:
            actions.append(BumpRevision(name=match.name, revision=latest + 1))
            rollback = True
    else:
        taken = {r.name for r in revisions}
        revision_hash = hash_revision(data, collision_count=collision_count)
        while name_revision(collaset=collaset, revision_hash=revision_hash) in taken:
            collision_count += 1
            revision_hash = hash_revision(data, collision_count=collision_count)
        updated = name_revision(collaset=collaset, revision_hash=revision_hash)
        manifest = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": updated,
                "namespace": namespace,
                "labels": {**selector_labels, HASH_LABEL: revision_hash},
                "annotations": {FIRST_REVISION_ANNOTATION: str(latest + 1)},
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": KIND,
                        "name": collaset,
                        "uid": collaset_uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": data,
            "revision": latest + 1,
        }
        actions.append(CreateRevision(name=updated, revision=latest + 1, manifest=manifest))
    live = {updated, *pod_revisions}
    if current_revision:
        live.add(current_revision)
    actions += prune_revisions(revisions=revisions, live=live, history_limit=history_limit)
    return RevisionPlan(
        updated_revision=updated, collision_count=collision_count, rollback=rollback, actions=tuple(actions)
    )


def prune_revisions(
    *, revisions: Sequence[RevisionView], live: Collection[str], history_limit: int
) -> list[DeleteRevision]:
    """Delete the oldest revisions beyond ``history_limit`` among those not live."""
    history = sorted((r for r in revisions if r.name not in live), key=lambda r: r.revision)
    excess = len(history) - max(history_limit, 0)
    return [DeleteRevision(name=r.name) for r in history[: max(excess, 0)]]


def classify_rollout(*, from_revision: RevisionView | None, to_revision: RevisionView) -> RolloutType:
    """ROLLBACK when the target revision existed before the source (an earlier template brought back).

    A rollback reuses the earlier ControllerRevision (bumping its number), so the number
    it was created with (:data:`FIRST_REVISION_ANNOTATION`), not its current number,
    tells it apart. Without that annotation on both, creation times decide; they have
    one-second resolution, so equal or unknown times count as ROLLOUT.
    """
    if from_revision is None or from_revision.name == to_revision.name:
        return RolloutType.ROLLOUT
    if from_revision.first_revision is not None and to_revision.first_revision is not None:
        older = to_revision.first_revision < from_revision.first_revision
        return RolloutType.ROLLBACK if older else RolloutType.ROLLOUT
    if (
        from_revision.created is not None
        and to_revision.created is not None
        and to_revision.created < from_revision.created
    ):
        return RolloutType.ROLLBACK
    return RolloutType.ROLLOUT


def _canonical(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
