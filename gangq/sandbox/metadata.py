"""Object metadata: the checks and bookkeeping every kind shares.

The body's apiVersion/kind, the namespace, `name` / `generateName`, labels, annotations,
finalizers and ownerReferences are checked as the kube-apiserver checks them (422 causes worded
the same, since clients show them to users). A create stamps `uid`, `creationTimestamp` and
`generation`; an update keeps what a client may not change and bumps `generation` only when the
spec changes, so controllers can tell spec edits from status and metadata edits.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Container
from typing import Any, cast

from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.errors import bad_request, invalid

__all__ = [
    "check_body",
    "check_update",
    "generate_name",
    "meta_problems",
    "namespace_of",
    "next_generation",
    "now",
    "owner_uids",
    "stamp_create",
    "stamp_update",
    "timestamp_in",
    "validate_name",
]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LOOSE_NAME = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# kinds whose names the apiserver does not hold to DNS rules (event names embed object names; node
# names are host names)
_LOOSE_NAMED = (("", "events"), ("events.k8s.io", "events"), ("", "nodes"))
_IMMUTABLE = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "name")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def timestamp_in(offset: float) -> str:
    """The RFC 3339 timestamp `offset` seconds from now."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


# ------------------------------------------------------------------------------------------ the body


def check_body(info: ResourceInfo, obj: Any) -> dict[str, Any]:
    """Check a request body's type, apiVersion and kind, fill them in; returns its metadata dict."""
    if not isinstance(obj, dict):
        raise bad_request(f"the body of a {info.kind} must be a JSON object, got {type(obj).__name__}")
    av = obj.get("apiVersion")
    kind = obj.get("kind")
    if av is not None and av != info.api_version:
        raise bad_request(
            f"the API version in the data ({av}) does not match the expected API version ({info.api_version})"
        )
    if kind is not None and kind != info.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({info.kind})")
    obj["apiVersion"] = info.api_version
    obj["kind"] = info.kind
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise bad_request(f"{info.kind}.metadata must be an object")
    return meta


def namespace_of(info: ResourceInfo, namespace: str | None, meta: dict[str, Any]) -> str:
    """The namespace a create goes to (the URL's and the body's must agree); "" for cluster scope."""
    if not info.namespaced:
        meta.pop("namespace", None)
        return ""
    body_ns = meta.get("namespace")
    if namespace and body_ns and body_ns != namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
    ns = namespace or body_ns
    if not ns:
        raise bad_request(f"a namespace is required to create a {info.kind}")
    meta["namespace"] = ns
    return str(ns)


def generate_name(info: ResourceInfo, meta: dict[str, Any], taken: Container[str]) -> str:
    """`metadata.name`, or one made from `generateName` and five random characters not in `taken`."""
    name = meta.get("name")
    if not name:
        gen = meta.get("generateName")
        if not gen:
            raise invalid(info, "", [("metadata.name", "FieldValueRequired",
                                      "Required value: name or generateName is required")])
        for _ in range(10):
            name = str(gen) + "".join(random.choice(_GEN_CHARS) for _ in range(5))
            if name not in taken:
                break
        meta["name"] = name
    if not isinstance(name, str):
        raise invalid(info, str(name), [("metadata.name", "FieldValueInvalid", "Invalid value: must be a string")])
    return name


def validate_name(info: ResourceInfo, name: str) -> None:
    """Namespaces need an RFC 1123 label, other kinds a subdomain (events and nodes are looser)."""
    if info.key == ("", "namespaces"):
        ok = len(name) <= 63 and _DNS_LABEL.match(name) is not None
        what = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
    else:
        ok = len(name) <= 253 and _DNS_SUBDOMAIN.match(name) is not None
        what = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character")
    if info.key in _LOOSE_NAMED:
        ok = ok or (len(name) <= 253 and _LOOSE_NAME.match(name) is not None)
    if not ok:
        raise invalid(info, name, [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {what}')])


# ------------------------------------------------------------------------------------- bookkeeping


def stamp_create(info: ResourceInfo, meta: dict[str, Any]) -> None:
    """What the server sets on every new object, whatever the client sent."""
    for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
        meta.pop(k, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    if info.generation:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)


def stamp_update(ometa: dict[str, Any], meta: dict[str, Any], ns: str) -> None:
    """Keep the fields of the stored metadata `ometa` that an update may not change."""
    for k in _IMMUTABLE:
        if k in ometa:
            meta[k] = ometa[k]
        else:
            meta.pop(k, None)
    if ns:
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)


def check_update(info: ResourceInfo, name: str, ometa: dict[str, Any], meta: dict[str, Any]) -> None:
    """422 when an update adds a finalizer to an object being deleted, or its metadata is invalid."""
    if ometa.get("deletionTimestamp"):
        added = set(meta.get("finalizers") or ()) - set(ometa.get("finalizers") or ())
        if added:
            raise invalid(info, name, [("metadata.finalizers", "FieldValueForbidden",
                                        "Forbidden: no new finalizers can be added if the object is being "
                                        "deleted, "
                                        f"found new finalizers {sorted(added)}")])
    problems = meta_problems(meta)
    if problems:
        raise invalid(info, name, problems)


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def next_generation(ometa: dict[str, Any], old: dict[str, Any], new: dict[str, Any], subresource: str | None) -> int:
    """The stored generation, plus one when a write to the main resource changed more than metadata and status."""
    gen = int(ometa.get("generation") or 1)
    if subresource is None and _spec_part(new) != _spec_part(old):
        gen += 1
    return gen


def owner_uids(obj: dict[str, Any] | None) -> tuple[str, ...]:
    """The uids in an object's ownerReferences."""
    if obj is None:
        return ()
    refs = obj["metadata"].get("ownerReferences")
    if not refs:
        return ()
    return tuple(cast(str, r.get("uid")) for r in refs if isinstance(r, dict) and r.get("uid"))


# ---------------------------------------------------------------------------------------- checks

_QNAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QNAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
              "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_MAX_ANNOTATIONS = 256 * 1024
def _qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character")
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QNAME.match(name):
        return _QNAME_MSG
    return None


def _label_value_problem(v: str) -> str | None:
    if v and (len(v) > 63 or not _QNAME.match(v)):
        return ("must be no more than 63 characters" if len(v) > 63 else
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                "or '.', and must start and end with an alphanumeric character")
    return None


def _map_problems(
    causes: list[tuple[str, str, str]],
    mapping: Any,
    field: str,
    what: str,
    value_problem: Callable[[str], str | None] | None,
) -> int:
    """Add the causes of a labels/annotations map (qualified-name keys, string values) to `causes`, in
    the map's order; returns the size of its keys and string values."""
    if not isinstance(mapping, dict):
        causes.append((field, "FieldValueInvalid", "Invalid value: must be a map of strings"))
        return 0
    size = 0
    for k, v in mapping.items():
        why = _qualified_name_problem(k)
        if why:
            causes.append((field, "FieldValueInvalid", f'Invalid value: "{k}": {why}'))
        if not isinstance(v, str):
            causes.append((f"{field}.{k}", "FieldValueInvalid", f"Invalid value: {v!r}: {what} values must be strings"))
            continue
        size += len(k) + len(v)
        bad = value_problem(v) if value_problem is not None else None
        if bad:
            causes.append((field, "FieldValueInvalid", f'Invalid value: "{v}": {bad}'))
    return size


def meta_problems(meta: dict[str, Any]) -> list[tuple[str, str, str]]:
    """422 causes for labels, annotations, finalizers and ownerReferences, as the apiserver reports them."""
    causes: list[tuple[str, str, str]] = []
    labels = meta.get("labels")
    if labels is not None:
        _map_problems(causes, labels, "metadata.labels", "label", _label_value_problem)
    ann = meta.get("annotations")
    if ann is not None and _map_problems(causes, ann, "metadata.annotations", "annotation", None) > _MAX_ANNOTATIONS:
        causes.append(("metadata.annotations", "FieldValueTooLong",
                       f"Too long: must have at most {_MAX_ANNOTATIONS} bytes"))
    fins = meta.get("finalizers")
    if fins is not None:
        if not isinstance(fins, list) or not all(isinstance(f, str) for f in fins):
            causes.append(("metadata.finalizers", "FieldValueInvalid", "Invalid value: must be a list of strings"))
        else:
            for f in fins:
                why = _qualified_name_problem(f)
                if why:
                    causes.append(("metadata.finalizers", "FieldValueInvalid", f'Invalid value: "{f}": {why}'))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            causes.append(("metadata.ownerReferences", "FieldValueInvalid", "Invalid value: must be a list"))
        else:
            controllers = 0
            for r in refs:
                if not isinstance(r, dict):
                    causes.append(("metadata.ownerReferences", "FieldValueInvalid", "Invalid value: must be objects"))
                    continue
                for f, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
                    if not r.get(f):
                        causes.append((f"metadata.ownerReferences.{f}", "FieldValueInvalid",
                                       f'Invalid value: "": {what} must not be empty'))
                if r.get("controller"):
                    controllers += 1
            if controllers > 1:
                causes.append(("metadata.ownerReferences", "FieldValueInvalid",
                               "Invalid value: Only one reference can have Controller set to true"))
    return causes


