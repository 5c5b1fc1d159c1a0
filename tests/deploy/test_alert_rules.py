"""``promtool test rules`` on every alert of deploy/prometheus/gangq-rules.yaml, firing and not
firing (tests/deploy/data/gangq-rules.test.yaml). promtool comes with Debian's ``prometheus``
package (.ci/run installs it); without it the test is skipped, unless GANGQ_REQUIRE_REAL_CLUSTER=1
asks for the whole real tier."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import required_tool
from tests.deploy.conftest import DEPLOY

TESTS = Path(__file__).parent / "data" / "gangq-rules.test.yaml"


def _alerts(groups: list[dict[str, Any]]) -> set[str]:
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


@pytest.fixture
def promtool() -> str:
    return required_tool("promtool")


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_say(promtool: str, tmp_path: Path) -> None:
    rule = yaml.safe_load((DEPLOY / "prometheus" / "gangq-rules.yaml").read_text())
    groups = rule["spec"]["groups"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = yaml.safe_load(TESTS.read_text())
    tested = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]}
    assert tested == _alerts(groups), "every alert needs unit tests"
    for alert in _alerts(groups):  # each alert is checked firing and not firing
        cases = [c for test in tests["tests"] for c in test["alert_rule_test"] if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in cases) and any(not c["exp_alerts"] for c in cases), alert
    shutil.copy(TESTS, tmp_path / "tests.yaml")
    done = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_expectation_fails_promtool(promtool: str, tmp_path: Path) -> None:
    """The unit tests are real: an alert expected where it cannot fire makes promtool fail."""
    rule = yaml.safe_load((DEPLOY / "prometheus" / "gangq-rules.yaml").read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    tests = yaml.safe_load(TESTS.read_text())
    first = tests["tests"][0]["alert_rule_test"][0]
    first["exp_alerts"] = [{"exp_labels": {"severity": "warning", "cluster_queue": "slow"}}]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0
