"""The PodTransitionRule API model: the seed's manifests parse unchanged, the wire form round-trips."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.rules.models import (
    FailurePolicy,
    PodDetail,
    PodTransitionRule,
    PodTransitionRuleSpec,
    PodTransitionRuleStatus,
    RejectInfo,
    RuleState,
    Stage,
    Summary,
    TaskState,
    WebhookStatus,
)
from lifecycle.rules.validating import validate_rule_object

from .builders import NOW, SAMPLE, load_sample

#: SHA-256 of the seed's sample manifest, recorded when the fixture was copied from
#: ../shared/seeds/podtransitionrule.md, so the check also runs where the seed is absent.
SAMPLE_SHA256 = "b2b5db8d1284c5341f5b61cb049f6e39e37b8061f3ca4285aa7b3731f0df3f77"


def test_sample_fixture_is_the_seed_verbatim() -> None:
    assert hashlib.sha256(SAMPLE.read_bytes()).hexdigest() == SAMPLE_SHA256
    for seed in (
        SAMPLE.parents[4].parent / "shared" / "seeds" / "podtransitionrule.md",
        Path("/work/shared/seeds/podtransitionrule.md"),
    ):
        if seed.exists():
            assert SAMPLE.read_text() in seed.read_text()


def test_sample_manifest_parses_unchanged() -> None:
    manifest = load_sample()
    rule_obj = PodTransitionRule.model_validate(manifest)

    assert validate_rule_object(manifest) == []
    assert rule_obj.name == "podtransitionrule-sample"
    assert rule_obj.spec.selector.matches({"app": "foo"})
    budget, labels, hook = rule_obj.spec.rules
    assert (budget.name, budget.kind(), budget.stage) == (
        "maxUnavailable",
        "availablePolicy",
        Stage.PRE_CHECK,
    )
    assert budget.available_policy is not None
    assert budget.available_policy.max_unavailable_limit() == "50%"
    assert budget.available_policy.min_available_limit() is None
    assert (labels.name, labels.kind(), labels.stage) == ("labelCheck", "labelCheck", Stage.PRE_CHECK)
    assert labels.label_check is not None
    assert labels.label_check.requires.match_labels == {"app.custom/ready": "true"}
    assert (hook.name, hook.kind(), hook.stage) == ("webhookCheck", "webhook", Stage.POST_CHECK)
    assert hook.webhook is not None
    assert hook.webhook.failure_policy is FailurePolicy.FAIL
    client = hook.webhook.client_config
    assert (client.url, client.ca_bundle) == ("https://1.1.1.1:8089/post-stop", "Cg==")
    assert client.poll is not None
    assert (client.poll.url, client.poll.raw_query_key) == ("http://1.1.1.1:8089/fetch-result", "task-id")
    assert (client.poll.interval_seconds, client.poll.timeout_seconds) == (5, 60)
    (param,) = hook.webhook.parameters
    assert param.key == "podIP"
    assert param.value_from is not None
    assert param.value_from.field_ref.field_path == "status.podIP"


SNIPPETS = {
    "max-unavailable-nested": """
availablePolicy:
  maxUnavailable:
    value: 50%  # int or string
""",
    "min-available-nested": """
availablePolicy:
  minAvailable:
    value: 5  # int or string
""",
    "label-check-expressions": """
labelCheck:
  requires:
    matchLabels:
      app.custom/ready: 'true'
    matchExpressions:
    - key: app.custom/forbidden
      operator: DoesNotExist
""",
    "webhook": """
webhook:
  clientConfig: # custom server config
    url: https://1.1.1.1:8089/post-stop
    caBundle: Cg==
    poll:
      url: http://1.1.1.1:8089/fetch-result
      rawQueryKey: task-id
      intervalSeconds: 5
      timeoutSeconds: 60
  failurePolicy: Fail
  parameters:
    - key: podIP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
""",
}


@pytest.mark.parametrize("snippet", [pytest.param(text, id=name) for name, text in SNIPPETS.items()])
def test_seed_rule_snippets_parse(snippet: str) -> None:
    rule = {"name": "r", **yaml.safe_load(snippet)}
    spec = {"selector": {"matchLabels": {"app": "foo"}}, "rules": [rule]}
    assert validate_rule_object({"spec": spec}) == []
    PodTransitionRuleSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("policy", "max_unavailable", "min_available"),
    [
        pytest.param({"maxUnavailableValue": "50%"}, "50%", None, id="flat-max"),
        pytest.param({"maxUnavailable": {"value": 3}}, 3, None, id="nested-max"),
        pytest.param({"minAvailableValue": 2}, None, 2, id="flat-min"),
        pytest.param({"minAvailable": {"value": "25%"}}, None, "25%", id="nested-min"),
        pytest.param({"maxUnavailable": {"value": 1}, "minAvailableValue": "50%"}, 1, "50%", id="mixed"),
    ],
)
def test_available_policy_accessors_normalise_both_spellings(
    policy: dict[str, Any], max_unavailable: Any, min_available: Any
) -> None:
    spec = PodTransitionRuleSpec.model_validate(
        {"selector": {}, "rules": [{"name": "b", "availablePolicy": policy}]}
    )
    parsed = spec.rules[0].available_policy
    assert parsed is not None
    assert parsed.max_unavailable_limit() == max_unavailable
    assert parsed.min_available_limit() == min_available


def test_wire_form_round_trips_and_keeps_the_seed_spelling() -> None:
    manifest = load_sample()
    rule_obj = PodTransitionRule.model_validate(manifest)
    wire = rule_obj.to_api()

    assert PodTransitionRule.model_validate(wire) == rule_obj
    assert wire["spec"]["rules"][0]["availablePolicy"] == {"maxUnavailableValue": "50%"}
    assert wire["spec"]["rules"][2]["webhook"]["clientConfig"]["poll"]["rawQueryKey"] == "task-id"
    # defaults are written out, as the API server's structural defaulting would
    assert wire["spec"]["rules"][0]["stage"] == "PreCheck"


def test_status_serialises_camel_case_and_always_writes_passed() -> None:
    status = PodTransitionRuleStatus(
        observed_generation=3,
        update_time=NOW,
        targets=("a", "b"),
        details=(
            PodDetail(
                name="a",
                stage=Stage.PRE_CHECK,
                passed=False,
                passed_rules=("budget",),
                reject_info=(RejectInfo(rule_name="labels", reason="nope"),),
            ),
        ),
        rule_states=(
            RuleState(
                name="hook",
                webhook_status=WebhookStatus(
                    task_states=(
                        TaskState(
                            task_id="t1",
                            trace_id="tr",
                            processing=("a",),
                            approved=("b",),
                            begin_time=NOW,
                            last_time=NOW + timedelta(seconds=5),
                            message="m",
                        ),
                    )
                ),
            ),
        ),
        summary=Summary(selected=2, passed=0, rejected=1),
    )
    wire = status.to_api()

    assert wire["details"] == [
        {
            "name": "a",
            "stage": "PreCheck",
            "passed": False,
            "passedRules": ["budget"],
            "rejectInfo": [{"ruleName": "labels", "reason": "nope"}],
        }
    ]
    task = wire["ruleStates"][0]["webhookStatus"]["taskStates"][0]
    assert task["taskId"] == "t1"
    assert task["beginTime"] == "2024-10-10T12:00:00Z"
    assert task["lastTime"] == "2024-10-10T12:00:05Z"
    assert wire["summary"] == {"selected": 2, "passed": 0, "rejected": 1}
    assert wire["observedGeneration"] == 3
    assert PodTransitionRuleStatus.model_validate(json.loads(json.dumps(wire))) == status


def test_json_schema_is_flat_enough_for_the_crd_generator() -> None:
    schema = PodTransitionRule.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    text = json.dumps(schema)

    assert "x-kubernetes-int-or-string" in text
    assert defs["Stage"]["enum"] == ["PreCheck", "PostCheck"]
    assert defs["FailurePolicy"]["enum"] == ["Ignore", "Fail"]
    assert schema["required"] == ["spec"]
    assert defs["PodTransitionRuleSpec"]["required"] == ["selector"]
    assert defs["Poll"]["properties"]["intervalSeconds"]["minimum"] == 1
    # no model refers to itself
    for name, definition in defs.items():
        assert f'"#/$defs/{name}"' not in json.dumps(definition), name
