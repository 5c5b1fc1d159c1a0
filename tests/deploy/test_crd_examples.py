"""Every gangq.io / JobSet object in policies/, examples/ and the docs' YAML blocks validates
against the CRD schemas of crds/ (offline, with jsonschema; unknown fields are errors, as with
kubectl's default strict field validation). CEL rules are not evaluated here."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def to_json_schema(node: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "format", "description", "example", "default"):
            continue
        if key == "properties":  # keys are field names, values schemas
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        else:
            out[key] = to_json_schema(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in node
    ):
        out["additionalProperties"] = False
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> JSON schema, for every served version of every CRD in crds/."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = to_json_schema(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                props = schema.setdefault("properties", {})
                props.setdefault("metadata", {"type": "object"})
                props["metadata"] = {"type": "object"}  # ObjectMeta is validated by the API server
                out[(f"{group}/{version['name']}", kind)] = schema
    return out


def yaml_objects() -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every custom object in policies/, examples/ and ```yaml blocks of the docs."""
    found: list[tuple[str, dict[str, Any]]] = []
    files = sorted((ROOT / "policies").glob("*.yaml")) + sorted((ROOT / "examples").rglob("*.yaml"))
    for path in files:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and "apiVersion" in doc:
                found.append((f"{path.relative_to(ROOT)}#{i}", doc))
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for j, block in enumerate(re.findall(r"```yaml\n(.*?)```", md.read_text(), re.S)):
            try:
                docs = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue
            for i, doc in enumerate(docs):
                if isinstance(doc, dict) and "apiVersion" in doc:
                    found.append((f"{md.relative_to(ROOT)} block {j}#{i}", doc))
    return found


SCHEMAS = crd_schemas()
CUSTOM = [(where, doc) for where, doc in yaml_objects() if (doc["apiVersion"], doc.get("kind")) in SCHEMAS]


def test_there_are_examples_to_check() -> None:
    if not SCHEMAS:
        pytest.fail("no CRDs in crds/")
    assert len(CUSTOM) >= 5, [w for w, _ in CUSTOM]


@pytest.mark.parametrize(("where", "doc"), CUSTOM, ids=[w for w, _ in CUSTOM])
def test_example_validates_against_its_crd(where: str, doc: dict[str, Any]) -> None:
    schema = SCHEMAS[(doc["apiVersion"], doc["kind"])]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, f"{where}: " + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


def test_a_broken_cluster_queue_is_rejected() -> None:
    key = next(k for k in SCHEMAS if k[1] == "ClusterQueue")
    doc = next(d for _, d in CUSTOM if d["kind"] == "ClusterQueue")
    bad = copy.deepcopy(doc)
    bad["spec"]["resourceGroupz"] = []
    assert list(jsonschema.Draft7Validator(SCHEMAS[key]).iter_errors(bad))
