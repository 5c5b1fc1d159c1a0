"""Copy into the Helm chart (deploy/helm/gangq/files) the install's files it ships as they are.

A chart is self-contained (``helm package`` takes nothing outside its directory), so it carries
copies of the CRDs (``crds/``), the Grafana dashboard (``deploy/grafana``) and the alerts
(``deploy/prometheus``). Those sources stay the only ones to edit: run this after changing one.

    python hack/gen-chart.py          # write the copies
    python hack/gen-chart.py --check  # exit 1, naming them, when a copy differs from its source

tests/deploy/test_chart.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "deploy" / "helm" / "gangq" / "files"


def copies(root: Path = ROOT) -> dict[Path, Path]:
    """Each copy in the chart and its source."""
    files = root / "deploy" / "helm" / "gangq" / "files"
    crds = sorted(p for p in (root / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    wanted = {files / "crds" / p.name: p for p in crds}
    wanted[files / "gangq-dashboard.json"] = root / "deploy" / "grafana" / "gangq-dashboard.json"
    wanted[files / "gangq-rules.yaml"] = root / "deploy" / "prometheus" / "gangq-rules.yaml"
    return wanted


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
