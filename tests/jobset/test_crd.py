"""The JobSet CRD on the sandbox API server: structural schema, defaults, enums, status subresource, columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gangq.sandbox.runtime import Sandbox

from .conftest import CRD_PATH, GROUP, PLURAL, jobset


@pytest.fixture
def api(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    sb = sandbox_factory(cluster=False)
    sb.call(sb.store.create, "apiextensions.k8s.io", "customresourcedefinitions", yaml.safe_load(CRD_PATH.read_text()))
    return sb


def test_crd_keeps_pod_templates_prunes_unknown_spec_fields_and_defaults(api: Sandbox) -> None:
    obj: dict[str, Any] = jobset("j", [{"name": "w", "pod": {"volumes": [{"name": "v", "emptyDir": {}}]}}],
                                 failurePolicy={"maxRestarts": 2, "rules": [{"action": "FailJobSet"}]})
    obj["spec"]["bogus"] = 1
    obj["status"] = {"restarts": 7}
    created = api.call(api.store.create, GROUP, PLURAL, obj, namespace="default")
    spec = created["spec"]
    assert "bogus" not in spec
    assert spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"] == [
        {"name": "v", "emptyDir": {}}]
    assert spec["replicatedJobs"][0]["groupName"] == "default"
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    assert "status" not in created or created["status"].get("restarts") is None  # status subresource
    # the /status subresource takes the status
    api.call(api.store.patch, GROUP, PLURAL, "default", "j", {"status": {"restarts": 1, "terminalState": "Failed"}},
             "merge", subresource="status")
    assert api.call(api.store.get, GROUP, PLURAL, "default", "j")["status"]["restarts"] == 1


@pytest.mark.parametrize(("field", "value"), [
    (("successPolicy",), {"operator": "Some"}),
    (("startupPolicy",), {"startupPolicyOrder": "Random"}),
    (("failurePolicy",), {"rules": [{"action": "Explode"}]}),
])
def test_crd_rejects_bad_enums(api: Sandbox, field: tuple[str, ...], value: Any) -> None:
    obj = jobset("bad", [{"name": "w"}], **{field[0]: value})
    with pytest.raises(Exception, match=r"(?i)unsupported value|invalid|enum"):
        api.call(api.store.create, GROUP, PLURAL, obj, namespace="default")


def test_crd_printer_columns() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    version = crd["spec"]["versions"][0]
    assert [col["name"] for col in version["additionalPrinterColumns"]] == [
        "TerminalState", "Restarts", "Completed", "Suspended", "Age"]
    assert version["subresources"] == {"status": {}}
    assert crd["metadata"]["name"] == "jobsets.jobset.x-k8s.io"
