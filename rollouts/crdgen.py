"""Generating the CustomResourceDefinitions from the pydantic API models.

The models in :mod:`lifecycle.rules.models` and :mod:`rollouts.api.collasets` are the one
source of the API. This module turns their JSON schema into structural OpenAPI v3
schemas (``$ref`` inlined, ``Optional`` as ``nullable``, int-or-string and
preserve-unknown-fields extensions kept, titles dropped) and adds what a schema cannot
say: names, printer columns, subresources. ``rollouts crds`` writes ``crds/*.yaml``; a
test fails when the committed files differ from :func:`render_crds`; the operator
installs exactly :func:`render_crds` at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from lifecycle.rules.models import PodTransitionRuleSpec, PodTransitionRuleStatus
from rollouts.api.collasets import CollaSetSpec, CollaSetStatus

GROUP = "apps.kusionstack.io"
VERSION = "v1alpha1"

# Keys of JSON schema that a CRD's structural schema accepts and that we keep.
_KEPT = {
    "type",
    "format",
    "description",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "required",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
}


@dataclass(frozen=True, kw_only=True)
class CrdSpec:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    scale: Mapping[str, str] | None = None
    categories: tuple[str, ...] = ("kusionstack",)
    extra: dict[str, Any] = field(default_factory=dict)


def _resolve(node: Any, defs: Mapping[str, Any]) -> Any:
    """Inline ``$ref``s and rewrite pydantic's shapes into a structural schema."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    if node.get("x-kubernetes-int-or-string"):
        out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        if "description" in node:
            out["description"] = node["description"]
        return out
    node = dict(node)
    if "anyOf" in node:
        given = node.pop("anyOf")
        options = [o for o in given if o != {"type": "null"}]
        nullable = len(options) < len(given)
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {options}")
        inner = _resolve(options[0], defs)
        node = {**inner, **{k: v for k, v in node.items() if k not in ("anyOf",)}}
        if nullable:
            node["nullable"] = True
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = _resolve(node.pop("allOf")[0], defs)
        node = {**inner, **node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "prefixItems" in node:
        raise ValueError("tuples of fixed length cannot be expressed in a CRD schema")
    out = {}
    for key, value in node.items():
        if key == "properties":
            out["properties"] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _resolve(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = _resolve(value, defs)
        elif key == "default":
            if value is not None and value != [] and value != {}:
                out["default"] = value
        elif key in _KEPT:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    required = out.get("required")
    if isinstance(required, list):
        out["required"] = sorted(required)
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one model, as the API server stores it."""
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    if not isinstance(schema, dict):
        raise TypeError(f"schema of {model.__name__} is not an object")
    return schema


def _crd(spec: CrdSpec) -> dict[str, Any]:
    singular = spec.kind.lower()
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": (spec.spec_model.__doc__ or spec.kind).strip().splitlines()[0],
                "required": ["spec"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": model_schema(spec.spec_model),
                    "status": model_schema(spec.status_model),
                },
            }
        },
        "subresources": {"status": {}},
    }
    if spec.scale:
        version["subresources"]["scale"] = dict(spec.scale)
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [dict(c) for c in spec.printer_columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{spec.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": spec.plural,
                "singular": singular,
                "shortNames": list(spec.short_names),
                "categories": list(spec.categories),
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def _col(name: str, path: str, kind: str = "integer", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, **extra}


CRDS: tuple[CrdSpec, ...] = (
    CrdSpec(
        kind="PodTransitionRule",
        plural="podtransitionrules",
        short_names=("ptr",),
        spec_model=PodTransitionRuleSpec,
        status_model=PodTransitionRuleStatus,
        printer_columns=(
            _col("Selected", ".status.summary.selected", description="Pods the selector matches"),
            _col("Passed", ".status.summary.passed", description="Pods in a stage that passed every rule"),
            _col("Rejected", ".status.summary.rejected", description="Pods in a stage held back by a rule"),
            _col("Age", ".metadata.creationTimestamp", "date"),
        ),
    ),
    CrdSpec(
        kind="CollaSet",
        plural="collasets",
        short_names=("cls",),
        spec_model=CollaSetSpec,
        status_model=CollaSetStatus,
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
        printer_columns=(
            _col("Desired", ".spec.replicas"),
            _col("Current", ".status.replicas"),
            _col("Ready", ".status.readyReplicas"),
            _col("Available", ".status.availableReplicas"),
            _col("Updated", ".status.updatedReplicas"),
            _col("Updated_Available", ".status.updatedAvailableReplicas"),
            _col("Current_Revision", ".status.currentRevision", "string"),
            _col("Updated_Revision", ".status.updatedRevision", "string"),
            _col("Hook", ".status.hookPhase", "string"),
            _col("Age", ".metadata.creationTimestamp", "date"),
        ),
    ),
)


def render_crds() -> dict[str, str]:
    """File name -> YAML text of every CRD, deterministic (the drift check compares these)."""
    header = "# Generated by `rollouts crds` from the pydantic models; do not edit by hand.\n"
    return {
        f"{GROUP}_{spec.plural}.yaml": header + yaml.safe_dump(_crd(spec), sort_keys=False, width=100)
        for spec in CRDS
    }


def crd_objects() -> list[dict[str, Any]]:
    """The CRDs as API objects, for installing them at start-up."""
    return [_crd(spec) for spec in CRDS]


def write_crds(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_crds().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
