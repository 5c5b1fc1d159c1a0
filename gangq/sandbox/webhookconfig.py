"""Admission webhook configurations: the v1 defaults and validation of
MutatingWebhookConfigurations and ValidatingWebhookConfigurations, as kube-apiserver v1.36 applies
them when one is stored (strategies.py calls them).

Calling the webhooks they register is admission.py's job; both import the names here, and this
module imports nothing of the store, the strategies or admission.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gangq.sandbox import selection

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "GROUP",
    "MUTATING",
    "REVIEW_VERSIONS",
    "SCOPES",
    "SIDE_EFFECTS",
    "VALIDATING",
    "Cause",
    "configuration_problems",
    "default_configuration",
]

GROUP = "admissionregistration.k8s.io"
MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"
DEFAULT_TIMEOUT_SECONDS = 10
REVIEW_VERSIONS = ("v1", "v1beta1")
SCOPES = ("*", "Cluster", "Namespaced")
SIDE_EFFECTS = ("None", "NoneOnDryRun")  # the values that allow a dry-run call
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_URL_FORM = "; desired format: https://host[/path]"
_OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
_FAILURE_POLICIES = ("Fail", "Ignore")
_MATCH_POLICIES = ("Equivalent", "Exact")
_REINVOCATION = ("IfNeeded", "Never")

Cause = tuple[str, str, str]


def default_configuration(obj: dict[str, Any], *, mutating: bool) -> None:
    """The v1 defaults of a webhook configuration, in place: failurePolicy Fail, matchPolicy
    Equivalent, empty selectors, timeoutSeconds 10, reinvocationPolicy Never, rule scope "*", and
    service port 443."""
    hooks = obj.get("webhooks")
    if not isinstance(hooks, list):
        return
    for hook in hooks:
        if not isinstance(hook, dict):
            continue
        defaults: dict[str, Any] = {
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "namespaceSelector": {},
            "objectSelector": {},
            "timeoutSeconds": DEFAULT_TIMEOUT_SECONDS,
        }
        if mutating:
            defaults["reinvocationPolicy"] = "Never"
        for key, value in defaults.items():
            if hook.get(key) is None:
                hook[key] = value
        for rule in hook.get("rules") or ():
            if isinstance(rule, dict) and rule.get("scope") is None:
                rule["scope"] = "*"
        cc = hook.get("clientConfig")
        service = cc.get("service") if isinstance(cc, dict) else None
        if isinstance(service, dict) and service.get("port") is None:
            service["port"] = 443


def _show(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else json.dumps(value)


def _required(path: str, detail: str = "") -> Cause:
    return (path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def _invalid(path: str, value: Any, detail: str) -> Cause:
    return (path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {detail}")


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> Cause:
    values = ", ".join(f'"{s}"' for s in supported)
    return (path, "FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {values}")


def _list_of_strings(hook: Mapping[str, Any], key: str) -> list[str]:
    value = hook.get(key)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _wildcard_problems(path: str, values: list[str], what: str) -> list[Cause]:
    if len(values) > 1 and "*" in values:
        return [_invalid(path, values, f"if '*' is present, must not specify other {what}")]
    return []


def _rule_problems(rule: Any, path: str) -> list[Cause]:
    if not isinstance(rule, dict):
        return [_invalid(path, rule, "must be an object")]
    out: list[Cause] = []
    ops = _list_of_strings(rule, "operations")
    if not ops:
        out.append(_required(f"{path}.operations"))
    out += _wildcard_problems(f"{path}.operations", ops, "operations")
    for i, op in enumerate(ops):
        if op not in _OPERATIONS:
            out.append(_unsupported(f"{path}.operations[{i}]", op, _OPERATIONS))
    groups = rule.get("apiGroups")
    if not isinstance(groups, list) or not groups:
        out.append(_required(f"{path}.apiGroups"))
    else:
        out += _wildcard_problems(f"{path}.apiGroups", groups, "API groups")
    versions = _list_of_strings(rule, "apiVersions")
    if not versions:
        out.append(_required(f"{path}.apiVersions"))
    out += _wildcard_problems(f"{path}.apiVersions", versions, "API versions")
    out += [_required(f"{path}.apiVersions[{i}]") for i, v in enumerate(versions) if not v]
    resources = _list_of_strings(rule, "resources")
    if not resources:
        out.append(_required(f"{path}.resources"))
    out += [_required(f"{path}.resources[{i}]") for i, r in enumerate(resources) if not r]
    if len(resources) > 1 and "*/*" in resources:
        out.append(_invalid(f"{path}.resources", resources, "if '*/*' is present, must not specify other resources"))
    if "*" in resources and any(r and r != "*" and "/" not in r for r in resources):
        out.append(_invalid(f"{path}.resources", resources,
                            "if '*' is present, must not specify other resources without subresources"))
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        out.append(_unsupported(f"{path}.scope", scope, SCOPES))
    return out


def _url_problems(url: Any, path: str) -> list[Cause]:
    if not isinstance(url, str):
        return [_required(path, "url must be a valid URL" + _URL_FORM)]
    try:
        u = urlsplit(url)
        u.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        return [_required(path, f"url must be a valid URL: {e}{_URL_FORM}")]
    out: list[Cause] = []
    if u.scheme != "https":
        out.append(_invalid(path, u.scheme, "'https' is the only allowed URL scheme" + _URL_FORM))
    if not u.hostname:
        out.append(_invalid(path, u.netloc, "host must be specified" + _URL_FORM))
    if u.username is not None:
        out.append(_invalid(path, u.username, "user information is not permitted in the URL"))
    if u.fragment:
        out.append(_invalid(path, u.fragment, "fragments are not permitted in the URL"))
    if u.query:
        out.append(_invalid(path, u.query, "query parameters are not permitted in the URL"))
    return out


def _client_config_problems(cc: Any, path: str) -> list[Cause]:
    if not isinstance(cc, dict) or (cc.get("url") is None) == (cc.get("service") is None):
        return [_required(path, "exactly one of url or service is required")]
    if cc.get("url") is not None:
        return _url_problems(cc["url"], f"{path}.url")
    service = cc["service"]
    if not isinstance(service, dict):
        return [_invalid(f"{path}.service", service, "must be an object")]
    out: list[Cause] = [_required(f"{path}.service.{k}") for k in ("name", "namespace") if not service.get(k)]
    port = service.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        out.append(_invalid(f"{path}.service.port", port,
                            "port is not valid: must be between 1 and 65535, inclusive"))
    return out


def _review_version_problems(hook: Mapping[str, Any], path: str) -> list[Cause]:
    versions = hook.get("admissionReviewVersions")
    if not isinstance(versions, list) or not versions:
        return [_required(path, "must specify one of " + ", ".join(REVIEW_VERSIONS))]
    out: list[Cause] = []
    seen: set[str] = set()
    for i, v in enumerate(versions):
        if not isinstance(v, str) or not _DNS_LABEL.match(v):
            out.append(_invalid(f"{path}[{i}]", v, "a DNS-1035 label must consist of lower case alphanumeric "
                                "characters or '-', start with an alphabetic character, and end with an "
                                "alphanumeric character"))
        elif v in seen:
            out.append(_invalid(f"{path}[{i}]", v, "duplicate version"))
        else:
            seen.add(v)
    if not seen & set(REVIEW_VERSIONS):
        out.append(_invalid(path, versions, "must include at least one of " + ", ".join(REVIEW_VERSIONS)))
    return out


def _name_problems(name: Any, path: str) -> list[Cause]:
    if not name:
        return [_required(path)]
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [_invalid(path, name, _DNS_SUBDOMAIN_MSG)]
    if len(name.split(".")) < 3:
        return [_invalid(path, name, "should be a domain with at least three segments separated by dots")]
    return []


def _hook_problems(hook: dict[str, Any], path: str, *, mutating: bool) -> list[Cause]:
    out = _name_problems(hook.get("name"), f"{path}.name")
    rules = hook.get("rules")
    if rules is not None and not isinstance(rules, list):
        out.append(_invalid(f"{path}.rules", rules, "must be a list"))
    for i, rule in enumerate(rules if isinstance(rules, list) else ()):
        out += _rule_problems(rule, f"{path}.rules[{i}]")
    for key, allowed in (("failurePolicy", _FAILURE_POLICIES), ("matchPolicy", _MATCH_POLICIES)):
        if hook.get(key) not in allowed:
            out.append(_unsupported(f"{path}.{key}", hook.get(key), allowed))
    side_effects = hook.get("sideEffects")
    if side_effects is None:
        out.append(_required(f"{path}.sideEffects", "must specify one of " + ", ".join(SIDE_EFFECTS)))
    elif side_effects not in SIDE_EFFECTS:
        out.append(_unsupported(f"{path}.sideEffects", side_effects, SIDE_EFFECTS))
    timeout = hook.get("timeoutSeconds")
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
        out.append(_invalid(f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"))
    for key in ("namespaceSelector", "objectSelector"):
        try:
            selection.label_selector_from_object(hook.get(key), where=f"{path}.{key}")
        except selection.SelectorError as e:
            out.append((f"{path}.{key}", "FieldValueInvalid", f"Invalid value: {e}"))
    if mutating and hook.get("reinvocationPolicy") not in _REINVOCATION:
        out.append(_unsupported(f"{path}.reinvocationPolicy", hook.get("reinvocationPolicy"), _REINVOCATION))
    out += _client_config_problems(hook.get("clientConfig"), f"{path}.clientConfig")
    if hook.get("matchConditions"):
        out.append((f"{path}.matchConditions", "FieldValueForbidden",
                    "Forbidden: matchConditions are not supported by the gangq sandbox (it cannot evaluate CEL)"))
    return out


def configuration_problems(obj: dict[str, Any], *, mutating: bool) -> list[Cause]:
    """The 422 causes (field, reason, message) of a defaulted webhook configuration, worded as
    kube-apiserver words them; [] when it is valid."""
    hooks = obj.get("webhooks")
    if hooks is None:
        return []
    if not isinstance(hooks, list):
        return [_invalid("webhooks", hooks, "must be a list")]
    out: list[Cause] = []
    names: set[str] = set()
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            out.append(_invalid(path, hook, "must be an object"))
            continue
        out += _hook_problems(hook, path, mutating=mutating)
        out += _review_version_problems(hook, f"{path}.admissionReviewVersions")
        name = hook.get("name")
        if isinstance(name, str) and name:
            if name in names:
                out.append((f"{path}.name", "FieldValueDuplicate", f"Duplicate value: {_show(name)}"))
            names.add(name)
    return out
