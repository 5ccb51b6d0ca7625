"""The webhook's JSON patch read off the merge patch equals kopf's copy-and-diff, applied."""

from __future__ import annotations

import copy
import random
from typing import Any

import jsonpatch
import kopf
import pytest

from rollouts.operator import fastpatch

KEYS = ["a", "b", "c", "x/y", "t~1", "app.kubernetes.io/name"]
LEAVES: list[Any] = ["v", "w", 1, 0, True, False, ["l", 1], [], "", {"deep": "x"}]


def random_doc(rng: random.Random, depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key in rng.sample(KEYS, rng.randint(0 if depth else 1, 4)):
        doc[key] = (
            random_doc(rng, depth - 1) if depth and rng.random() < 0.4 else copy.deepcopy(rng.choice(LEAVES))
        )
    return doc


def random_merge(rng: random.Random, doc: Any, depth: int) -> dict[str, Any]:
    merge: dict[str, Any] = {}
    existing = list(doc) if isinstance(doc, dict) else []
    for key in rng.sample(sorted(set(KEYS) | set(existing)), rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.3:
            merge[key] = None
        elif roll < 0.55 and depth:
            merge[key] = random_merge(rng, doc.get(key) if isinstance(doc, dict) else None, depth - 1)
        else:
            merge[key] = copy.deepcopy(rng.choice(LEAVES))
    return merge


def kopf_ops(doc: dict[str, Any], merge: dict[str, Any]) -> list[dict[str, Any]]:
    patch = kopf.Patch(merge, body=kopf.Body(copy.deepcopy(doc)))  # type: ignore[arg-type]
    return list(fastpatch._kopf_as_json_patch(patch))


def applied(doc: dict[str, Any], ops: list[dict[str, Any]]) -> Any:
    return jsonpatch.apply_patch(copy.deepcopy(doc), ops)


@pytest.mark.parametrize("seed", range(40))
def test_the_ops_do_what_kopfs_do(seed: int) -> None:
    rng = random.Random(seed)
    stated = 0
    for _ in range(100):
        doc = random_doc(rng, 3)
        merge = random_merge(rng, doc, 3)
        try:
            expected = applied(doc, kopf_ops(doc, merge))
        except (TypeError, AttributeError):
            continue  # kopf itself cannot apply a mapping over a scalar
        ops = fastpatch.merge_patch_ops(doc, merge)
        if ops is None:
            continue
        stated += 1
        assert applied(doc, ops) == expected, (doc, merge, ops)
    assert stated > 30  # the fast path is not vacuous


def test_a_pod_write_is_stated_and_kopf_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = {
        "metadata": {
            "name": "web-1",
            "labels": {
                "kusionstack.io/control": "true",
                "pre-check.podopslifecycle.kusionstack.io/collaset": "1",
            },
            "annotations": {"x": "y"},
        },
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    }
    merge = {
        "metadata": {
            "labels": {
                "pre-check.podopslifecycle.kusionstack.io/collaset": None,
                "preparing.podopslifecycle.kusionstack.io/collaset": "2",
            },
            "annotations": {"rollouts.kusionstack.io/lifecycle-history": "h"},
        }
    }
    ops = fastpatch.merge_patch_ops(pod, merge)
    assert ops == [
        {"op": "remove", "path": "/metadata/labels/pre-check.podopslifecycle.kusionstack.io~1collaset"},
        {
            "op": "add",
            "path": "/metadata/labels/preparing.podopslifecycle.kusionstack.io~1collaset",
            "value": "2",
        },
        {
            "op": "add",
            "path": "/metadata/annotations/rollouts.kusionstack.io~1lifecycle-history",
            "value": "h",
        },
    ]
    fastpatch.install()
    patch = kopf.Patch(merge, body=kopf.Body(pod))  # type: ignore[arg-type]
    copies: list[Any] = []
    monkeypatch.setattr(copy, "deepcopy", lambda x, *a: copies.append(x) or x)  # kopf copies the body
    assert patch.as_json_patch() == ops
    assert kopf.Patch(body=kopf.Body(pod)).as_json_patch() == []  # type: ignore[arg-type]
    assert copies == []  # the pod was not copied
    monkeypatch.undo()
    # with a transformation function kopf's own method answers
    patch.fns.append(lambda raw: raw["spec"].setdefault("readinessGates", []).append({"conditionType": "x"}))
    assert {
        "op": "add",
        "path": "/spec/readinessGates",
        "value": [{"conditionType": "x"}],
    } in patch.as_json_patch()


@pytest.mark.parametrize(
    ("doc", "merge"),
    [
        pytest.param({"m": {"only": "1"}}, {"m": {"only": None}}, id="empties-its-parent"),
        pytest.param({"m": "scalar"}, {"m": {"k": "v"}}, id="mapping-over-a-scalar"),
    ],
)
def test_what_kopf_does_differently_is_left_to_kopf(doc: dict[str, Any], merge: dict[str, Any]) -> None:
    assert fastpatch.merge_patch_ops(doc, merge) is None
