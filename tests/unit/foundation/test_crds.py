"""The committed CRDs are exactly what the generator writes from the models."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollouts.crdgen import model_schema, render_crds

CRDS_DIR = Path(__file__).resolve().parents[3] / "crds"


@pytest.mark.parametrize("name", sorted(render_crds()))
def test_committed_crd_matches_generator(name: str) -> None:
    committed = CRDS_DIR / name
    assert committed.exists(), f"{committed} missing: run `make crds` and commit it"
    assert committed.read_text() == render_crds()[name], f"{name} drifted from the models: run `make crds`"


def test_no_stray_crd_files() -> None:
    assert sorted(p.name for p in CRDS_DIR.glob("*.yaml")) == sorted(render_crds())


def _walk(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        found.append(node)
        for v in node.values():
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found


@pytest.mark.parametrize("name", sorted(render_crds()))
def test_schema_is_structural(name: str) -> None:
    crd = yaml.safe_load(render_crds()[name])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        assert node.get("default", 0) is not None


@pytest.mark.parametrize(
    ("name", "short", "columns"),
    [
        pytest.param(
            "apps.kusionstack.io_collasets.yaml",
            ["cls"],
            {
                "Desired",
                "Current",
                "Ready",
                "Available",
                "Updated",
                "Updated_Available",
                "Current_Revision",
                "Updated_Revision",
                "Hook",
                "Age",
            },
            id="collaset",
        ),
        pytest.param(
            "apps.kusionstack.io_podtransitionrules.yaml",
            ["ptr"],
            {"Selected", "Passed", "Rejected", "Age"},
            id="podtransitionrule",
        ),
    ],
)
def test_names_and_printer_columns(name: str, short: list[str], columns: set[str]) -> None:
    crd = yaml.safe_load(render_crds()[name])
    assert crd["spec"]["names"]["shortNames"] == short
    assert {c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]} == columns


def test_collaset_has_scale_subresource() -> None:
    crd = yaml.safe_load(render_crds()["apps.kusionstack.io_collasets.yaml"])
    scale = crd["spec"]["versions"][0]["subresources"]["scale"]
    assert scale["specReplicasPath"] == ".spec.replicas"


def test_int_or_string_and_pod_template_extensions() -> None:
    from lifecycle.rules.models import AvailablePolicy
    from rollouts.api.collasets import CollaSetSpec

    field = model_schema(AvailablePolicy)["properties"]["maxUnavailableValue"]
    assert field["x-kubernetes-int-or-string"] is True
    assert "type" not in field
    template = model_schema(CollaSetSpec)["properties"]["template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True
