"""Copy into the Helm chart (deploy/helm/gangq/files) the install's files it ships as they are,
write the schema of its ``config`` value from the controller's configuration model, and write the
admission webhook's rules from the registered kinds.

A chart is self-contained (``helm package`` takes nothing outside its directory), so it carries
copies of the CRDs (``crds/``), the Grafana dashboard (``deploy/grafana``) and the alerts
(``deploy/prometheus``). Those sources stay the only ones to edit: run this after changing one.
``values.schema.json`` is edited by hand but for ``definitions.operator*``: the JSON schema of
``gangq.operator.config.OperatorConfig``, so that a misspelt or mistyped configuration key fails
``helm install`` naming its path instead of the controller's start. Run this after changing the
model too.

The webhook's rules — which kinds the API server sends to gangq's webhook — are the kinds of
``gangq.integrations.registry``: every region between ``# generated rules (<operations>)`` and
``# end of generated rules`` in the kustomize components, and the chart's ``gangq.webhookRules``
template, are written from it; so is the rule for pods (every region between ``# generated pod
rules`` and ``# end of generated pod rules``, and ``gangq.podWebhookRules``), there when a
registered kind gates its pods at creation. Run this after registering a kind.

    python hack/gen-chart.py          # write the copies
    python hack/gen-chart.py --check  # exit 1, naming them, when a copy differs from its source

tests/deploy/test_chart.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The configuration model's definitions in values.schema.json: "operatorConfig" and one
# "operator<Model>" per nested model.
PREFIX = "operator"


RULE_FILES = ("deploy/components/webhook/configurations.yaml",
              "deploy/components/webhook-unlabelled/kustomization.yaml")
"""The kustomize files with generated webhook rules."""
HELPERS = "deploy/helm/gangq/templates/_helpers.tpl"
_REGION = re.compile(r"^( *)# generated rules \(([A-Z,]+)\)[^\n]*\n(?:.*\n)*?\1# end of generated rules$", re.MULTILINE)
_TEMPLATE = re.compile(r'(\{\{- define "gangq.webhookRules" -\}\}\n)(?:.*\n)*?(\{\{- end \}\})')
_POD_REGION = re.compile(r"^( *)# generated pod rules[^\n]*\n(?:.*\n)*?\1# end of generated pod rules$", re.MULTILINE)
_POD_TEMPLATE = re.compile(r'(\{\{- define "gangq.podWebhookRules" -\}\}\n)(?:.*\n)*?(\{\{- end \}\})')


def _rules(operations: list[str], root: Path) -> list[dict[str, Any]]:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from gangq.integrations.registry import webhook_rules

    return webhook_rules(operations)


def _pod_rules(root: Path) -> list[dict[str, Any]]:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from gangq.integrations.registry import pod_webhook_rules

    return pod_webhook_rules()


def _yaml(value: Any, indent: str) -> str:
    import yaml

    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
    return "".join(indent + line + "\n" for line in text.splitlines())


def with_rules(text: str, root: Path = ROOT) -> str:
    """A kustomize file with every generated region written from the registry."""
    def region(m: re.Match[str]) -> str:
        indent, ops = m.group(1), m.group(2).split(",")
        head = m.group(0).splitlines()[0]
        return f"{head}\n{_yaml(_rules(ops, root), indent)}{indent}# end of generated rules"

    def pod_region(m: re.Match[str]) -> str:
        indent = m.group(1)
        head = m.group(0).splitlines()[0]
        rules = _pod_rules(root)
        return f"{head}\n{_yaml(rules, indent) if rules else ''}{indent}# end of generated pod rules"

    return _POD_REGION.sub(pod_region, _REGION.sub(region, text))


def with_template_rules(text: str, root: Path = ROOT) -> str:
    """The chart's helpers with ``gangq.webhookRules`` written from the registry (its operations
    are the template's ``.operations``), and ``gangq.podWebhookRules``."""
    body = _yaml(_rules(["OPERATIONS"], root), "").replace(
        "  operations:\n  - OPERATIONS\n", "  operations: {{ toYaml .operations | nindent 2 }}\n")
    rules = _pod_rules(root)
    pods = _yaml(rules, "") if rules else ""
    text = _TEMPLATE.sub(lambda m: m.group(1) + body + m.group(2), text)
    return _POD_TEMPLATE.sub(lambda m: m.group(1) + pods + m.group(2), text)


def generated(root: Path = ROOT) -> dict[Path, str]:
    """Each file with generated webhook rules and its text as the registry makes it."""
    out = {root / name: with_rules((root / name).read_text(), root) for name in RULE_FILES}
    out[root / HELPERS] = with_template_rules((root / HELPERS).read_text(), root)
    return out


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
    problems += [str(path.relative_to(root)) for path, text in generated(root).items() if path.read_text() != text]
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
    for path, text in generated(root).items():
        path.write_text(text)


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
