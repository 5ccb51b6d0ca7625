"""rollouts.planning.revisions: hashing, reuse and rollback, collisions, history pruning, rollout type."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from collaset_builders import template

from hooks.models import RolloutType
from rollouts.api.collasets import HASH_LABEL
from rollouts.planning.revisions import (
    FIRST_REVISION_ANNOTATION,
    BumpRevision,
    CreateRevision,
    DeleteRevision,
    RevisionView,
    classify_rollout,
    hash_revision,
    make_revision_data,
    name_revision,
    plan_revisions,
    prune_revisions,
    read_template,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def revision(image: str, number: int, *, name: str | None = None) -> RevisionView:
    data = make_revision_data(template(image))
    return RevisionView(
        name=name or name_revision(collaset="web", revision_hash=hash_revision(data)),
        revision=number,
        data=data,
        uid=f"uid-{number}",
        created=T0 + timedelta(minutes=number),
    )


def plan(image: str, revisions: list[RevisionView], **kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "collaset": "web",
        "namespace": "ns",
        "collaset_uid": "uid-web",
        "template": template(image),
        "selector_labels": {"app": "web"},
        "revisions": revisions,
        "collision_count": 0,
        "history_limit": 20,
        "current_revision": None,
        "pod_revisions": (),
        **kwargs,
    }
    return plan_revisions(**args)


def test_hash_is_stable_across_key_order() -> None:
    a = {
        "spec": {"containers": [{"name": "app", "image": "x"}]},
        "metadata": {"labels": {"a": "1", "b": "2"}},
    }
    b = {
        "metadata": {"labels": {"b": "2", "a": "1"}},
        "spec": {"containers": [{"image": "x", "name": "app"}]},
    }
    assert hash_revision(make_revision_data(a)) == hash_revision(make_revision_data(b))


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param(template("nginx:1"), template("nginx:2"), id="image"),
        pytest.param(template(env="a"), template(env="b"), id="env"),
        pytest.param(template(labels={"app": "web"}), template(labels={"app": "web", "x": "y"}), id="labels"),
    ],
)
def test_hash_differs_for_different_templates(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert hash_revision(make_revision_data(left)) != hash_revision(make_revision_data(right))


def test_hash_is_safe_encoded_and_collision_count_changes_it() -> None:
    data = make_revision_data(template())
    plain, bumped = hash_revision(data), hash_revision(data, collision_count=1)
    assert plain != bumped
    for value in (plain, bumped):
        assert set(value) <= set("bcdfghjklmnpqrstvwxz2456789")
        assert 1 <= len(value) <= 10


def test_read_template_round_trips() -> None:
    original = template("nginx:3")
    assert read_template(make_revision_data(original)) == original
    assert make_revision_data(original)["spec"]["template"]["$patch"] == "replace"


def test_first_revision_is_created() -> None:
    result = plan("nginx:1", [])
    (action,) = result.actions
    assert isinstance(action, CreateRevision)
    assert action.revision == 1
    assert (
        result.updated_revision
        == action.name
        == f"web-{hash_revision(make_revision_data(template('nginx:1')))}"
    )
    meta = action.manifest["metadata"]
    assert meta["labels"] == {"app": "web", HASH_LABEL: action.name.removeprefix("web-")}
    assert meta["ownerReferences"][0]["uid"] == "uid-web"
    assert action.manifest["data"] == make_revision_data(template("nginx:1"))
    assert not result.rollback


def test_same_template_as_latest_is_reused() -> None:
    revisions = [revision("nginx:1", 1), revision("nginx:2", 2)]
    result = plan("nginx:2", revisions)
    assert result.actions == ()
    assert result.updated_revision == revisions[1].name
    assert not result.rollback


def test_new_template_gets_next_number() -> None:
    revisions = [revision("nginx:1", 1), revision("nginx:2", 2)]
    (action,) = plan("nginx:3", revisions).actions
    assert isinstance(action, CreateRevision)
    assert action.revision == 3


def test_rollback_reuses_earlier_revision_and_bumps_its_number() -> None:
    revisions = [revision("nginx:1", 1), revision("nginx:2", 2)]
    result = plan("nginx:1", revisions)
    assert result.updated_revision == revisions[0].name
    assert result.actions == (BumpRevision(name=revisions[0].name, revision=3),)
    assert result.rollback


def test_name_collision_bumps_collision_count() -> None:
    taken = name_revision(
        collaset="web", revision_hash=hash_revision(make_revision_data(template("nginx:9")))
    )
    clash = revision("nginx:1", 1, name=taken)
    result = plan("nginx:9", [clash])
    assert result.collision_count == 1
    assert result.updated_revision != taken
    rehashed = hash_revision(make_revision_data(template("nginx:9")), collision_count=1)
    assert result.updated_revision == name_revision(collaset="web", revision_hash=rehashed)


@pytest.mark.parametrize(
    ("count", "limit", "live", "deleted"),
    [
        pytest.param(5, 20, set(), [], id="under-limit"),
        pytest.param(5, 2, set(), [1, 2, 3], id="oldest-go-first"),
        pytest.param(5, 2, {1, 2}, [3], id="live-never-counted-or-deleted"),
        pytest.param(5, 0, {3}, [1, 2, 4, 5], id="limit-zero-keeps-only-live"),
        pytest.param(25, 20, {1}, [2, 3, 4, 5], id="default-limit"),
    ],
)
def test_prune(count: int, limit: int, live: set[int], deleted: list[int]) -> None:
    revisions = [revision(f"img:{n}", n, name=f"web-{n}") for n in range(1, count + 1)]
    actions = prune_revisions(revisions=revisions, live={f"web-{n}" for n in live}, history_limit=limit)
    assert actions == [DeleteRevision(name=f"web-{n}") for n in deleted]


def test_plan_never_prunes_revisions_in_use() -> None:
    revisions = [revision(f"img:{n}", n) for n in range(1, 6)]
    result = plan(
        "img:6",
        revisions,
        history_limit=1,
        current_revision=revisions[0].name,
        pod_revisions={revisions[1].name},
    )
    deleted = [a.name for a in result.actions if isinstance(a, DeleteRevision)]
    assert deleted == [revisions[2].name, revisions[3].name]


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        pytest.param(2, 3, RolloutType.ROLLOUT, id="newer-target"),
        pytest.param(3, 1, RolloutType.ROLLBACK, id="older-target"),
        pytest.param(None, 1, RolloutType.ROLLOUT, id="no-source"),
    ],
)
def test_classify_rollout(source: int | None, target: int, expected: RolloutType) -> None:
    source_view = revision(f"img:{source}", source) if source is not None else None
    assert (
        classify_rollout(from_revision=source_view, to_revision=revision(f"img:{target}", target)) == expected
    )


def test_rollback_stays_rollback_after_its_number_is_bumped() -> None:
    old = revision("img:1", 1)
    bumped = RevisionView(name=old.name, revision=3, data=old.data, created=old.created)
    assert classify_rollout(from_revision=revision("img:2", 2), to_revision=bumped) == RolloutType.ROLLBACK


def test_rollback_within_the_same_second_is_told_by_the_first_revision_number() -> None:
    """Creation times have one-second resolution: a rollout then rollback within it looked like a rollout."""
    first = replace(revision("img:1", 3), created=T0, first_revision=1)
    second = replace(revision("img:2", 2), created=T0, first_revision=2)
    assert classify_rollout(from_revision=second, to_revision=first) == RolloutType.ROLLBACK
    assert classify_rollout(from_revision=first, to_revision=second) == RolloutType.ROLLOUT


def test_created_revisions_record_their_first_number() -> None:
    (create,) = plan("img:2", [revision("img:1", 1)]).actions
    assert create.manifest["metadata"]["annotations"] == {FIRST_REVISION_ANNOTATION: "2"}
