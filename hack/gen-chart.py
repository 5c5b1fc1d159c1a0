"""Copy into the Helm chart (deploy/helm/gangq/files) the install's files it ships as they are,
and write the schema of its ``config`` value from the controller's configuration model.

A chart is self-contained (``helm package`` takes nothing outside its directory), so it carries
copies of the CRDs (``crds/``), the Grafana dashboard (``deploy/grafana``) and the alerts
(``deploy/prometheus``). Those sources stay the only ones to edit: run this after changing one.
``values.schema.json`` is edited by hand but for ``definitions.operator*``: the JSON schema of
``gangq.operator.config.OperatorConfig``, so that a misspelt or mistyped configuration key fails
``helm install`` naming its path instead of the controller's start. Run this after changing the
model too.

    python hack/gen-chart.py          # write the copies
    python hack/gen-chart.py --check  # exit 1, naming them, when a copy differs from its source

tests/deploy/test_chart.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The configuration model's definitions in values.schema.json: "operatorConfig" and one
# "operator<Model>" per nested model.
PREFIX = "operator"


def copies(root: Path = ROOT) -> dict[Path, Path]:
    """Each copy in the chart and its source."""
    files = root / "deploy" / "helm" / "gangq" / "files"
    crds = sorted(p for p in (root / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    wanted = {files / "crds" / p.name: p for p in crds}
    wanted[files / "gangq-dashboard.json"] = root / "deploy" / "grafana" / "gangq-dashboard.json"
    wanted[files / "gangq-rules.yaml"] = root / "deploy" / "prometheus" / "gangq-rules.yaml"
    return wanted


def _without_titles(node: Any) -> Any:
    """The model's schema without pydantic's generated titles (its field names, capitalised)."""
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def values_schema(root: Path = ROOT) -> str:
    """values.schema.json with the configuration model's definitions as the model has them now."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from gangq.operator.config import OperatorConfig

    model = OperatorConfig.model_json_schema(by_alias=True, mode="validation")
    text = json.dumps(_without_titles(model)).replace('"#/$defs/', f'"#/definitions/{PREFIX}')
    model = json.loads(text)
    nested = model.pop("$defs")
    schema = json.loads((root / "deploy" / "helm" / "gangq" / "values.schema.json").read_text())
    definitions = {k: v for k, v in schema["definitions"].items() if not k.startswith(PREFIX)}
    definitions[f"{PREFIX}Config"] = model
    definitions.update({f"{PREFIX}{name}": body for name, body in sorted(nested.items())})
    schema["definitions"] = definitions
    return json.dumps(schema, indent=2) + "\n"


def stale(root: Path = ROOT) -> list[str]:
    """The chart's copies that differ from their sources, are missing, or have no source."""
    wanted = copies(root)
    files = root / "deploy" / "helm" / "gangq" / "files"
    problems = [
        str(copy.relative_to(root))
        for copy, source in wanted.items()
        if not copy.is_file() or copy.read_bytes() != source.read_bytes()
    ]
    problems += [str(p.relative_to(root)) for p in sorted(files.rglob("*")) if p.is_file() and p not in wanted]
    schema = root / "deploy" / "helm" / "gangq" / "values.schema.json"
    if schema.read_text() != values_schema(root):
        problems.append(str(schema.relative_to(root)))
    return problems


def write(root: Path = ROOT) -> None:
    wanted = copies(root)
    files = root / "deploy" / "helm" / "gangq" / "files"
    for path in sorted(files.rglob("*")) if files.is_dir() else []:
        if path.is_file() and path not in wanted:
            path.unlink()
    for copy, source in wanted.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(source.read_bytes())
    schema = root / "deploy" / "helm" / "gangq" / "values.schema.json"
    schema.write_text(values_schema(root))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report copies that differ from their sources")
    args = parser.parse_args()
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: {problem} (run python hack/gen-chart.py)", file=sys.stderr)
        sys.exit(1 if problems else 0)
    write()


if __name__ == "__main__":
    main()
