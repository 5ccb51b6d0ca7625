"""Every manifest in examples/ parses and passes our admission checks, without a cluster.

The examples tier (tests/examples/) applies them to a real control plane; this catches a
broken example in the unit tier first: CollaSets and PodTransitionRules go through the
pydantic models and the same validation the admission webhooks run, other objects must at
least name their kind and metadata.name, and every example directory has a README paragraph,
an entry in examples/README.md and a test that applies it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.rules.models import PodTransitionRule
from lifecycle.rules.validating import validate_rule_object
from rollouts.api.collasets import CollaSet
from rollouts.api.validating import validate_collaset

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
EXAMPLE_TESTS = ROOT / "tests" / "examples"

MANIFESTS = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
DIRECTORIES = sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def documents(path: Path) -> list[dict[str, Any]]:
    found = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert found, f"{path} holds no object"
    assert all(isinstance(doc, dict) for doc in found), f"{path}: every document must be an object"
    return found


def test_there_are_examples() -> None:
    assert MANIFESTS, f"no manifests under {EXAMPLES}"


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(EXAMPLES))) for p in MANIFESTS])
def test_manifest_is_valid(path: Path) -> None:
    for doc in documents(path):
        kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
        assert isinstance(kind, str) and kind and doc.get("apiVersion"), f"{path}: apiVersion and kind"
        assert isinstance(name, str) and name, f"{path}: a {kind} without metadata.name"
        assert "namespace" not in doc["metadata"], f"{path}: {kind} {name} pins a namespace; `-n` chooses it"
        if kind == "CollaSet":
            CollaSet.model_validate(doc)
            assert validate_collaset(doc) == [], f"{path}: admission would refuse CollaSet {name}"
        elif kind == "PodTransitionRule":
            PodTransitionRule.model_validate(doc)
            assert validate_rule_object(doc) == [], f"{path}: admission would refuse PodTransitionRule {name}"


@pytest.mark.parametrize("directory", [pytest.param(d, id=d.name) for d in DIRECTORIES])
def test_example_is_documented_and_tested(directory: Path) -> None:
    assert (directory / "README.md").is_file(), f"{directory.name}/README.md missing"
    index = (EXAMPLES / "README.md").read_text()
    assert f"({directory.name}/)" in index, f"examples/README.md does not link {directory.name}/"
    tests = [p for p in EXAMPLE_TESTS.glob("test_*.py") if f'"{directory.name}' in p.read_text()]
    assert tests, f"no test in tests/examples/ applies examples/{directory.name}/"
