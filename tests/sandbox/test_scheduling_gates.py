"""A gated pod's scheduling directives, as kube-apiserver validates a pod update: node-selector
entries may be added while the pod has scheduling gates (how gangq puts a flavor's node labels on
a pod group's pods before it removes their gate), never changed or removed; once ungated, the
node selector is fixed; gates may only go."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.sandbox.store import ApiError, Store

NS = "default"
JSON_PATCH = "application/json-patch+json"
GATE = {"name": "gangq.io/admission"}


def make_pod(store: Store, name: str, *, gates: bool = True, selector: dict[str, str] | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}
    if gates:
        spec["schedulingGates"] = [GATE]
    if selector:
        spec["nodeSelector"] = selector
    store.create("", "pods", {"metadata": {"name": name}, "spec": spec}, namespace=NS)


def test_a_gated_pod_gets_node_selector_entries_with_its_gate_removed() -> None:
    store = Store()
    make_pod(store, "p", selector={"zone": "a"})
    patched = store.patch("", "pods", NS, "p", [
        {"op": "add", "path": "/spec/nodeSelector", "value": {"zone": "a", "pool": "a100"}},
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "gpu", "operator": "Exists"}]},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ], JSON_PATCH)
    assert patched["spec"]["nodeSelector"] == {"zone": "a", "pool": "a100"}
    assert not patched["spec"].get("schedulingGates")


@pytest.mark.parametrize("selector", [{"zone": "b", "pool": "a100"}, {"pool": "a100"}])
def test_a_gated_pods_node_selector_entries_cannot_change_or_go(selector: dict[str, str]) -> None:
    store = Store()
    make_pod(store, "p", selector={"zone": "a"})
    with pytest.raises(ApiError) as err:
        store.patch("", "pods", NS, "p", [{"op": "add", "path": "/spec/nodeSelector", "value": selector}], JSON_PATCH)
    assert err.value.code == 422 and "only additions to spec.nodeSelector" in err.value.message


def test_an_ungated_pods_node_selector_is_fixed_and_gates_cannot_come_back() -> None:
    store = Store()
    make_pod(store, "p", gates=False)
    with pytest.raises(ApiError) as err:
        store.patch("", "pods", NS, "p", [{"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}}],
                    JSON_PATCH)
    assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        store.patch("", "pods", NS, "p", [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}],
                    JSON_PATCH)
    assert err.value.code == 422 and "only deletion is allowed" in err.value.message
