"""The state file (`--state-file`): every object and the resourceVersion counter, as JSON.

Format: `{"resourceVersion": N, "objects": [{"group", "plural", "object"}...]}`, CRDs first so
that their resources are served again before their custom resources are restored. Uids and
resourceVersions are kept; the watch history is not, so a watch from before the restart gets 410.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.entry import Entry

__all__ = ["CRDS", "restored_objects", "snapshot", "state_resource_version"]

log = logging.getLogger(__name__)

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


def snapshot(rv: int, data: dict[tuple[str, str], dict[str, dict[str, Entry]]]) -> dict[str, Any]:
    """The state of a store whose tables are `data` and whose resourceVersion is `rv`."""
    keys: Iterable[tuple[str, str]] = [CRDS] + [k for k in data if k != CRDS]
    objects = []
    for key in keys:
        for d in data.get(key, {}).values():
            for e in d.values():
                objects.append({"group": key[0], "plural": key[1], "object": e.obj})
    return {"resourceVersion": rv, "objects": objects}


def restored_objects(
    state: dict[str, Any], resources: dict[tuple[str, str], ResourceInfo]
) -> Iterator[tuple[ResourceInfo, str, str, dict[str, Any]]]:
    """(resource, namespace, name, object) of each object of `state` whose resource is served.

    Lazy: `resources` is looked up as each object comes, so a CRD restored (and registered) by the
    caller serves the custom resources after it.
    """
    for item in state.get("objects", []):
        key = (item["group"], item["plural"])
        info = resources.get(key)
        if info is None:
            log.warning("state file: no resource %s/%s for a stored object; skipped", *key)
            continue
        obj = item["object"]
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if info.namespaced else ""
        yield info, ns, meta["name"], obj


def state_resource_version(state: dict[str, Any]) -> int:
    return int(state.get("resourceVersion", 0))
