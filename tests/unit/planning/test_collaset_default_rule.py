"""rollouts.operator.collasets_deciding: the default PodTransitionRule of rollingUpdate.maxUnavailable."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.rules.models import PodTransitionRule
from rollouts.api.collasets import CollaSet
from rollouts.operator.collasets_deciding import (
    CreateRule,
    DeleteRule,
    ReplaceRuleSpec,
    RulePlan,
    merge_patch,
    plan_default_rule,
    render_default_rule,
)

NAME = "web-max-unavailable"


def collaset(max_unavailable: int | str | None = None) -> CollaSet:
    rolling: dict[str, Any] = {} if max_unavailable is None else {"maxUnavailable": max_unavailable}
    return CollaSet.model_validate(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
                "updateStrategy": {"rollingUpdate": rolling},
            },
        }
    )


def existing(
    value: int | str = 1,
    *,
    owner: str | None = "uid-web",
    deleting: bool = False,
    selector: dict[str, Any] | None = None,
    stored_defaults: bool = True,
) -> dict[str, Any]:
    """The rule as the API server returns it: defaults filled in, a resourceVersion, maybe deleting."""
    rule: dict[str, Any] = {"name": "max-unavailable", "availablePolicy": {"maxUnavailableValue": value}}
    if stored_defaults:
        rule |= {"stage": "PreCheck", "disabled": False}
    meta: dict[str, Any] = {"name": NAME, "namespace": "ns", "uid": "uid-rule", "resourceVersion": "7"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps.kusionstack.io/v1alpha1",
                "kind": "CollaSet",
                "uid": owner,
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return {
        "metadata": meta,
        "spec": {"selector": selector or {"matchLabels": {"app": "web"}}, "rules": [rule]},
    }


def kinds(plan: RulePlan) -> list[str]:
    return [type(a).__name__ for a in plan.actions]


@pytest.mark.parametrize(
    ("value", "rules", "expected", "conflict"),
    [
        pytest.param(None, [], [], False, id="unset-nothing"),
        pytest.param(1, [], ["CreateRule"], False, id="set-creates"),
        pytest.param(1, [existing(1)], [], False, id="same-with-server-defaults"),
        pytest.param("25%", [existing("25%", stored_defaults=False)], [], False, id="same-percent"),
        pytest.param(2, [existing(1)], ["ReplaceRuleSpec"], False, id="value-changed"),
        pytest.param(
            1,
            [existing(1, selector={"matchLabels": {"app": "x"}})],
            ["ReplaceRuleSpec"],
            False,
            id="selector",
        ),
        pytest.param(None, [existing(1)], ["DeleteRule"], False, id="unset-deletes"),
        pytest.param(None, [existing(1, deleting=True)], [], False, id="unset-already-deleting"),
        pytest.param(1, [existing(1, deleting=True)], [], False, id="set-waits-for-deletion"),
        pytest.param(None, [existing(1, owner="someone")], [], False, id="unset-leaves-foreign"),
        pytest.param(1, [existing(1, owner=None)], [], True, id="set-conflicts-with-foreign"),
        pytest.param(
            1,
            [{**existing(1), "metadata": {**existing(1)["metadata"], "name": "other"}}],
            ["CreateRule"],
            False,
            id="other-name-ignored",
        ),
    ],
)
def test_plan_default_rule(
    value: int | str | None, rules: list[dict[str, Any]], expected: list[str], conflict: bool
) -> None:
    plan = plan_default_rule(collaset(value), rules)
    assert kinds(plan) == expected
    assert (plan.conflict is not None) is conflict
    if conflict:
        assert plan.conflict is not None and NAME in plan.conflict


def test_rendered_rule_selects_the_pods_and_is_owned_by_the_collaset() -> None:
    manifest = render_default_rule(collaset("25%"))
    assert manifest is not None
    parsed = PodTransitionRule.model_validate(manifest)
    assert parsed.name == NAME
    assert parsed.spec.selector.match_labels == {"app": "web"}
    (rule,) = parsed.spec.rules
    assert rule.available_policy is not None and rule.available_policy.max_unavailable_limit() == "25%"
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "CollaSet",
        "name": "web",
        "uid": "uid-web",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert render_default_rule(collaset()) is None


def test_actions_carry_what_the_apply_needs() -> None:
    (create,) = plan_default_rule(collaset(1), []).actions
    assert (
        isinstance(create, CreateRule) and create.name == NAME and create.manifest["metadata"]["name"] == NAME
    )
    (replace,) = plan_default_rule(collaset(3), [existing(1)]).actions
    assert isinstance(replace, ReplaceRuleSpec) and replace.resource_version == "7"
    assert replace.spec["rules"][0]["availablePolicy"] == {"maxUnavailableValue": 3}
    assert replace.patch == {"rules": replace.spec["rules"]}
    stale_selector = existing(3, selector={"matchLabels": {"app": "web", "tier": "x"}})
    (narrowed,) = plan_default_rule(collaset(3), [stale_selector]).actions
    assert isinstance(narrowed, ReplaceRuleSpec)
    assert narrowed.patch == {"selector": {"matchLabels": {"tier": None}}, "rules": replace.spec["rules"]}
    (delete,) = plan_default_rule(collaset(), [existing(1)]).actions
    assert delete == DeleteRule(name=NAME, uid="uid-rule")


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        pytest.param({"a": 1}, {"a": 1}, {}, id="same"),
        pytest.param({"a": 1}, {"a": 2}, {"a": 2}, id="changed"),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, {"b": None}, id="removed"),
        pytest.param({"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}, {"m": {"y": None}}, id="nested-removed"),
        pytest.param({"l": [1, 2]}, {"l": [1]}, {"l": [1]}, id="lists-whole"),
        pytest.param({}, {"m": {"x": 1}}, {"m": {"x": 1}}, id="added"),
    ],
)
def test_merge_patch(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(old, new) == patch
