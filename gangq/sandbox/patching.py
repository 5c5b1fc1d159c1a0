"""Patch application for the sandbox API server.

Three patch formats, as the real kube-apiserver accepts them:

* JSON merge patch (RFC 7386): ``apply_merge_patch``.
* JSON patch (RFC 6902), delegated to the ``jsonpatch`` library: ``apply_json_patch``.
* Kubernetes strategic merge patch for built-in kinds: ``apply_strategic_merge_patch``.

The strategic merge is one generic recursive merger driven by a small table that maps a kind to the
lists of its API type that carry ``patchStrategy:"merge"`` (and their ``patchMergeKey``), mirroring the
struct tags of ``k8s.io/api``. Lists not named in the table are atomic (replaced), exactly like lists
without a patch strategy upstream. Supported directives: ``$patch`` (``replace``/``merge``/``delete``, on
maps and on list items), ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>`` and
``$retainKeys``; ``null`` deletes a key.

All functions are pure: inputs are never mutated, results share no containers with the inputs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import jsonpatch
import jsonpointer

log = logging.getLogger(__name__)

__all__ = [
    "STRATEGIC_MERGE_KINDS",
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "copy_json",
    "copy_object",
    "create_merge_patch",
    "merge_patch_value",
    "supports_strategic_merge",
]


class PatchError(Exception):
    """A patch that cannot be applied.

    ``code`` is the HTTP status the API server should answer with: 400 for a malformed patch body,
    422 for a patch that is well-formed but cannot be applied (failed ``test`` op, missing path, bad
    directive, missing merge key), 415 for an unsupported patch type.
    """

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __repr__(self) -> str:
        return f"PatchError(code={self.code}, message={self.message!r})"


def copy_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Deep copy of a JSON object (a dict at the top)."""
    return {k: copy_json(v) for k, v in obj.items()}


def copy_json(value: Any) -> Any:
    """Deep copy of a JSON-like value (dicts, lists, scalars); much faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386)
# --------------------------------------------------------------------------------------------------


def _merge_into(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply ``patch`` to ``target`` in place (``target`` must be owned by the caller)."""
    for key, pvalue in patch.items():
        if pvalue is None:
            target.pop(key, None)
        elif isinstance(pvalue, dict):
            tvalue = target.get(key)
            target[key] = _merge_into(tvalue if isinstance(tvalue, dict) else {}, pvalue)
        else:
            target[key] = copy_json(pvalue)
    return target


def merge_patch_value(target: Any, patch: Any) -> Any:
    """RFC 7386 ``MergePatch(Target, Patch)`` for arbitrary JSON values (a non-object patch replaces)."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    return _merge_into(copy_json(target) if isinstance(target, dict) else {}, patch)


def apply_merge_patch(target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply a JSON merge patch (RFC 7386) to an object. A patch that is not a JSON object -> 400."""
    if not isinstance(patch, dict):
        raise PatchError(f"merge patch must be a JSON object, got {type(patch).__name__}", 400)
    return _merge_into(copy_json(target), patch)


def create_merge_patch(original: Any, modified: Any) -> Any:
    """The smallest RFC 7386 merge patch turning ``original`` into ``modified`` (for controllers/tests).

    ``null`` values inside ``modified`` cannot be expressed by a merge patch; they are emitted as
    deletions, as every merge-patch producer does.
    """
    if not isinstance(original, dict) or not isinstance(modified, dict):
        return copy_json(modified)
    patch: dict[str, Any] = {}
    for key in original:
        if key not in modified:
            patch[key] = None
    for key, mvalue in modified.items():
        if key not in original:
            patch[key] = _strip_none(mvalue) if isinstance(mvalue, dict) else copy_json(mvalue)
            continue
        ovalue = original[key]
        if isinstance(ovalue, dict) and isinstance(mvalue, dict):
            sub = create_merge_patch(ovalue, mvalue)
            if sub:
                patch[key] = sub
        elif ovalue != mvalue or type(ovalue) is not type(mvalue):
            patch[key] = _strip_none(mvalue) if isinstance(mvalue, dict) else copy_json(mvalue)
    return patch


def _strip_none(value: dict[str, Any]) -> dict[str, Any]:
    return {k: (_strip_none(v) if isinstance(v, dict) else copy_json(v)) for k, v in value.items() if v is not None}


# --------------------------------------------------------------------------------------------------
# JSON patch (RFC 6902)
# --------------------------------------------------------------------------------------------------


def apply_json_patch(target: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch.

    A body that is not a JSON array of objects -> ``PatchError(400)``; every other failure (unknown op,
    missing path, failed ``test`` op, a result that is not an object) -> ``PatchError(422)``.
    """
    if not isinstance(patch, list):
        raise PatchError(f"json patch must be a JSON array of operations, got {type(patch).__name__}", 400)
    for i, op in enumerate(patch):
        if not isinstance(op, dict):
            raise PatchError(f"json patch operation {i} must be a JSON object, got {type(op).__name__}", 400)
    try:
        result = jsonpatch.JsonPatch(patch).apply(copy_json(target), in_place=True)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchError(f"the json patch test operation failed: {exc}", 422) from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"the json patch could not be applied: {exc}", 422) from exc
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        # malformed operations the library does not wrap (e.g. a non-string "path")
        raise PatchError(f"the json patch could not be applied: {exc!r}", 422) from exc
    if not isinstance(result, dict):
        raise PatchError(f"json patch result must be a JSON object, got {type(result).__name__}", 422)
    return result


# --------------------------------------------------------------------------------------------------
# Strategic merge patch
# --------------------------------------------------------------------------------------------------


class _MergeList:
    """A list with ``patchStrategy: merge``: maps merged by ``key``, or (key None) a primitive set-merge."""

    __slots__ = ("item", "key")

    def __init__(self, key: str | None, item: _Fields | None = None) -> None:
        self.key = key
        self.item = item


_Fields: TypeAlias = dict[str, "_Fields | _MergeList"]

_PRIMITIVE_SET: Final = _MergeList(None)
_CONDITIONS: Final = _MergeList("type")

_META: Final[_Fields] = {
    "finalizers": _PRIMITIVE_SET,  # ObjectMeta.Finalizers: patchStrategy merge (set of strings)
    "ownerReferences": _MergeList("uid"),
}
_CONTAINER: Final[_Fields] = {
    "ports": _MergeList("containerPort"),
    "env": _MergeList("name"),
    "volumeMounts": _MergeList("mountPath"),
    "volumeDevices": _MergeList("devicePath"),
}
# PodSpec; tolerations, readinessGates, affinity terms, envFrom... carry no patch strategy -> atomic.
_POD_SPEC: Final[_Fields] = {
    "volumes": _MergeList("name"),  # merge,retainKeys
    "initContainers": _MergeList("name", _CONTAINER),
    "containers": _MergeList("name", _CONTAINER),
    "ephemeralContainers": _MergeList("name", _CONTAINER),
    "imagePullSecrets": _MergeList("name"),
    "hostAliases": _MergeList("ip"),
    "topologySpreadConstraints": _MergeList("topologyKey"),
    "schedulingGates": _MergeList("name"),
    "resourceClaims": _MergeList("name"),  # merge,retainKeys
}
_POD_TEMPLATE: Final[_Fields] = {"metadata": _META, "spec": _POD_SPEC}
_WORKLOAD: Final[_Fields] = {
    "metadata": _META,
    "spec": {"template": _POD_TEMPLATE},
    "status": {"conditions": _CONDITIONS},
}
_ONLY_META: Final[_Fields] = {"metadata": _META}

_KIND_FIELDS: Final[dict[str, _Fields]] = {
    "Pod": {
        "metadata": _META,
        "spec": _POD_SPEC,
        "status": {"conditions": _CONDITIONS, "podIPs": _MergeList("ip"), "hostIPs": _MergeList("ip")},
    },
    "PodTemplate": {"metadata": _META, "template": _POD_TEMPLATE},
    "Job": _WORKLOAD,
    "CronJob": {"metadata": _META, "spec": {"jobTemplate": {"metadata": _META, "spec": {"template": _POD_TEMPLATE}}}},
    "Deployment": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    "StatefulSet": _WORKLOAD,
    "DaemonSet": _WORKLOAD,
    "ReplicationController": _WORKLOAD,
    # NodeSpec.Taints has no patch strategy upstream (atomic); podCIDRs is a merged primitive list.
    "Node": {
        "metadata": _META,
        "spec": {"podCIDRs": _PRIMITIVE_SET},
        "status": {"conditions": _CONDITIONS, "addresses": _MergeList("type")},
    },
    # NamespaceSpec.Finalizers is atomic upstream (+listType=atomic, no patch strategy).
    "Namespace": {"metadata": _META, "status": {"conditions": _CONDITIONS}},
    "Service": {"metadata": _META, "spec": {"ports": _MergeList("port")}, "status": {"conditions": _CONDITIONS}},
    "PersistentVolumeClaim": {"metadata": _META, "status": {"conditions": _CONDITIONS}},
    "PodDisruptionBudget": {"metadata": _META, "status": {"conditions": _CONDITIONS}},
    "ServiceAccount": {"metadata": _META, "secrets": _MergeList("name")},
    # webhooks: +patchMergeKey=name +patchStrategy=merge upstream
    "MutatingWebhookConfiguration": {"metadata": _META, "webhooks": _MergeList("name")},
    "ValidatingWebhookConfiguration": {"metadata": _META, "webhooks": _MergeList("name")},
    **{
        kind: _ONLY_META
        for kind in (
            "ConfigMap",
            "Secret",
            "Event",
            "Lease",
            "Endpoints",
            "EndpointSlice",
            "LimitRange",
            "ResourceQuota",
            "PriorityClass",
            "PersistentVolume",
            "CustomResourceDefinition",
            "APIService",
            "Binding",
            "ControllerRevision",
            "StorageClass",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
        )
    },
}

STRATEGIC_MERGE_KINDS: Final[frozenset[str]] = frozenset(_KIND_FIELDS)


def supports_strategic_merge(kind: str) -> bool:
    """True if ``kind`` is a built-in kind with known strategic-merge metadata."""
    return kind in _KIND_FIELDS


_DELETE: Final = object()  # a map patched with ``$patch: delete``
_SET_ORDER: Final = "$setElementOrder/"
_DELETE_PRIMITIVE: Final = "$deleteFromPrimitiveList/"


def apply_strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """Kubernetes strategic merge patch of ``target`` by ``patch`` for the built-in ``kind``.

    Unknown kinds fall back to atomic lists (maps still merge and directives are honoured). The API
    server answers 415 for strategic merge on custom resources itself; this function never does.
    """
    if not isinstance(patch, dict):
        raise PatchError(f"strategic merge patch must be a JSON object, got {type(patch).__name__}", 400)
    fields = _KIND_FIELDS.get(kind)
    result = _merge_map(copy_json(target), patch, fields, "")
    if result is _DELETE:
        return {}
    return result  # type: ignore[no-any-return]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _merge_map(orig: dict[str, Any], patch: dict[str, Any], fields: _Fields | None, path: str) -> Any:
    """Merge ``patch`` into ``orig`` (owned, mutated). Returns the merged map or ``_DELETE``."""
    directive = patch.get("$patch")
    if directive is not None:
        if directive == "delete":
            return _DELETE
        if directive == "replace":
            replacement = {k: v for k, v in patch.items() if k != "$patch"}
            return _merge_map({}, replacement, fields, path)
        if directive != "merge":
            raise PatchError(
                f"{path or '<root>'}: unknown $patch directive {directive!r} (want replace, merge or delete)"
            )

    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise PatchError(f"{path or '<root>'}: $retainKeys must be a list of field names, got {retain!r}")
        keep = set(retain)
        for key, pvalue in patch.items():
            if pvalue is not None and not key.startswith("$") and key not in keep:
                raise PatchError(f"{path or '<root>'}: field {key!r} is in the patch but not in $retainKeys {retain}")
        for key in [k for k in orig if k not in keep]:
            del orig[key]

    # $deleteFromPrimitiveList/<list> is applied before the list itself is merged.
    for key, pvalue in patch.items():
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if not isinstance(pvalue, list):
                raise PatchError(f"{_join(path, key)}: must be a list of values to delete")
            current = orig.get(field)
            if isinstance(current, list):
                orig[field] = [x for x in current if x not in pvalue]

    for key, pvalue in patch.items():
        if key[:1] == "$" and (key in ("$patch", "$retainKeys") or key.startswith((_SET_ORDER, _DELETE_PRIMITIVE))):
            continue
        if pvalue is None:
            orig.pop(key, None)
            continue
        spec = fields.get(key) if fields is not None else None
        if isinstance(pvalue, dict):
            current = orig.get(key)
            merged = _merge_map(
                current if isinstance(current, dict) else {},
                pvalue,
                spec if isinstance(spec, dict) else None,
                _join(path, key),
            )
            if merged is _DELETE:
                orig.pop(key, None)
            else:
                orig[key] = merged
        elif isinstance(pvalue, list):
            if isinstance(spec, _MergeList):
                current = orig.get(key)
                order = patch.get(_SET_ORDER + key)
                orig[key] = _merge_list(
                    current if isinstance(current, list) else [], pvalue, spec, order, _join(path, key)
                )
            else:
                orig[key] = copy_json(pvalue)
        else:
            orig[key] = pvalue

    # $setElementOrder for a merge list that the patch does not otherwise touch: reorder only.
    for key, order in patch.items():
        if key.startswith(_SET_ORDER):
            field = key[len(_SET_ORDER) :]
            spec = fields.get(field) if fields is not None else None
            current = orig.get(field)
            if field not in patch and isinstance(spec, _MergeList) and isinstance(current, list):
                orig[field] = _apply_order(current, order, current, spec.key, _join(path, key))
    return orig


def _merge_list(orig: list[Any], patch: list[Any], spec: _MergeList, order: Any, path: str) -> list[Any]:
    key = spec.key
    if key is None:
        # primitive list with merge strategy: set union, original order first
        result = list(orig)
        for value in patch:
            if isinstance(value, dict | list):
                raise PatchError(f"{path}: expected a list of primitive values, got {value!r}")
            if value not in result:
                result.append(value)
        if order is not None:
            result = _apply_order(result, order, orig, None, path)
        return result

    replace = False
    deletes: list[Any] = []
    merges: list[dict[str, Any]] = []
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"{path}: expected a list of objects merged by {key!r}, got item {item!r}")
        directive = item.get("$patch")
        if directive is not None:
            if directive == "replace":
                replace = True
                continue
            if directive == "delete":
                if key not in item:
                    raise PatchError(f"{path}: $patch: delete item has no merge key {key!r}: {item!r}")
                deletes.append(item[key])
                continue
            if directive != "merge":
                raise PatchError(f"{path}: unknown $patch directive {directive!r} (want replace, merge or delete)")
            item = {k: v for k, v in item.items() if k != "$patch"}
        if key not in item:
            raise PatchError(f"{path}: item {item!r} does not contain the merge key {key!r}")
        merges.append(item)

    if replace:
        out: list[Any] = []
        for item in merges:
            merged = _merge_map({}, item, spec.item, f"{path}[{key}={item[key]}]")
            if merged is not _DELETE:
                out.append(merged)
        return out

    result = [x for x in orig if not (isinstance(x, dict) and key in x and x[key] in deletes)] if deletes else orig
    for item in merges:
        kval = item[key]
        idx = -1
        for i, existing in enumerate(result):
            if isinstance(existing, dict) and existing.get(key, _DELETE) == kval:
                idx = i
                break
        item_path = f"{path}[{key}={kval}]"
        if idx < 0:
            merged = _merge_map({}, item, spec.item, item_path)
            if merged is not _DELETE:
                result.append(merged)
        else:
            merged = _merge_map(result[idx], item, spec.item, item_path)
            if merged is _DELETE:
                del result[idx]
            else:
                result[idx] = merged
    if order is not None:
        result = _apply_order(result, order, orig, key, path)
    return result


def _apply_order(merged: list[Any], order: Any, server: list[Any], key: str | None, path: str) -> list[Any]:
    """``$setElementOrder``: items named in ``order`` follow its order; server-only items keep their
    relative server positions, interleaved as the upstream merge of the two sorted runs does."""
    if not isinstance(order, list):
        raise PatchError(f"{path}: $setElementOrder must be a list")

    def ident(x: Any) -> Any:
        return x.get(key) if key is not None and isinstance(x, dict) else x

    try:
        order_pos: dict[Any, int] = {}
        for i, entry in enumerate(order):
            if key is not None and (not isinstance(entry, dict) or key not in entry):
                raise PatchError(f"{path}: $setElementOrder entry {entry!r} lacks the merge key {key!r}")
            order_pos.setdefault(ident(entry), i)
        server_pos: dict[Any, int] = {}
        for i, x in enumerate(server):
            server_pos.setdefault(ident(x), i)
        in_patch = sorted((x for x in merged if ident(x) in order_pos), key=lambda x: order_pos[ident(x)])
        server_only = sorted(
            (x for x in merged if ident(x) not in order_pos), key=lambda x: server_pos.get(ident(x), math.inf)
        )
    except TypeError as exc:  # unhashable identities
        raise PatchError(f"{path}: $setElementOrder needs hashable merge keys: {exc}") from exc

    out: list[Any] = []
    i = j = 0
    while i < len(server_only) and j < len(in_patch):
        li = server_pos.get(ident(server_only[i]))
        ri = server_pos.get(ident(in_patch[j]))
        if li is not None and ri is not None and li < ri:
            out.append(server_only[i])
            i += 1
        else:
            out.append(in_patch[j])
            j += 1
    out.extend(server_only[i:])
    out.extend(in_patch[j:])
    return out
