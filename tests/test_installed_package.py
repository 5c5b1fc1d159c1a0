"""The installed package carries what ``gangq run`` and ``gangq simulate`` read at run time.

A regular ``pip install .`` puts gangq in site-packages, away from the checkout's ``crds/`` and
``policies/``; setup.py bundles them as ``gangq/_data/``. This runs the installed package in a
subprocess that does not see the checkout (``-P``, another working directory) and checks that it
finds the same CRDs and queue files as the checkout has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SCRIPT = """
import json
from gangq.operator.install import CRD_DIR, QUICKSTART, crd_documents
from gangq.sim.scenario import KUEUE_BASELINE_CONFIG
print(json.dumps({
    "crds": sorted(d["metadata"]["name"] for d in crd_documents()),
    "crd_dir": str(CRD_DIR),
    "quickstart": QUICKSTART.read_text(),
    "kueue_baseline": KUEUE_BASELINE_CONFIG.read_text(),
}))
"""


def test_installed_package_finds_its_crds_and_queue_files(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-P", "-c", _SCRIPT], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    installed = json.loads(out.stdout)
    from gangq.operator.install import crd_documents

    expected = sorted(d["metadata"]["name"] for d in crd_documents(sorted((REPO / "crds").glob("*.yaml"))))
    assert len(expected) >= 7  # gangq's six kinds and JobSet
    assert installed["crds"] == expected
    assert installed["quickstart"] == (REPO / "policies" / "quickstart.yaml").read_text()
    assert installed["kueue_baseline"] == (REPO / "policies" / "kueue-baseline.yaml").read_text()
