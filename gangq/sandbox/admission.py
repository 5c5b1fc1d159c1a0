"""Admission webhooks: the sandbox calls Mutating/ValidatingWebhookConfigurations as kube-apiserver does.

The sandbox serves `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations and
ValidatingWebhookConfigurations (cluster-scoped, with their v1 defaults and validation:
webhookconfig.py) and, on every CREATE, UPDATE (PUT and PATCH,
main resource and subresources) and DELETE that comes in over HTTP, calls the webhooks they
register, as kube-apiserver v1.36 does:

- Order. A create or update is decoded and defaulted (the kind's `decode_defaults`: scheme defaults,
  CRD structural defaults, the built-in admission plugins that run before webhooks); then the
  mutating webhooks run, one after the other, configurations by name and webhooks in their order;
  then the kind's validation (the store's `prepare_create` / `prepare_update`); then the validating
  webhooks, all at once; then the object is stored. A DELETE sends `oldObject` and no `object`, to
  mutating and validating webhooks alike (a mutating webhook that returns a patch there fails the
  request with 500); a DELETE of a collection admits each object with an empty `name`.
- Matching. A webhook is called when one of its `rules` matches (operations, apiGroups, apiVersions,
  resources with "*" and "res/sub" forms: "jobs" does not match "jobs/status", "*/*" matches every
  subresource, and scope), its `namespaceSelector` matches the labels of the request's namespace (not
  checked for cluster-scoped objects; for a Namespace it is checked against the namespace's own
  labels), and its `objectSelector` matches the labels of the new or the old object. Empty selectors
  match everything. The webhook configurations themselves are never sent to webhooks.
- The call. An `admission.k8s.io/v1` AdmissionReview (or v1beta1, the first of the webhook's
  `admissionReviewVersions` that is known) is POSTed to `clientConfig.url` with `?timeout=<n>s`, over
  HTTPS verified with `clientConfig.caBundle` (the system roots when it is empty), within
  `timeoutSeconds`. The request carries uid, kind, resource, subResource, requestKind,
  requestResource, requestSubResource, name (empty for a create with generateName), namespace
  (a Namespace's own name for namespaces), operation, userInfo, object, oldObject, dryRun and
  options (CreateOptions, UpdateOptions, DeleteOptions; a PATCH sends UpdateOptions).
- Failures. A webhook that cannot be called or answers with an invalid AdmissionReview is skipped
  when its `failurePolicy` is Ignore; with Fail (the default) the request fails with 500
  InternalError, "Internal error occurred: failed calling webhook "<name>": <why>".
- Answers. `allowed: false` fails the request with the webhook's `status` as the Status body:
  code 400 when it gives none below 400, status Failure, its reason and details, and the message
  `admission webhook "<name>" denied the request: <message>` (or `...: <reason>`, or `... denied
  the request without explanation`). A mutating webhook's JSONPatch (`patchType: JSONPatch`, a
  base64 `patch`) is applied to the object, and the kind's decode defaults are applied again. A
  response's `warnings` come back to the client as `Warning: 299 - "..."` headers.
- Dry run. A dryRun request calls only webhooks whose `sideEffects` is None or NoneOnDryRun, with
  `dryRun: true`; any other is a 400 (`admission webhook "<name>" does not support dry run`).
- Users. The sandbox has no authentication: the user is `system:admin` in `system:masters`, unless
  the request carries impersonation headers (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`, as
  `kubectl --as` sends them), which then make userInfo as kube-apiserver would.
- Concurrency. Admission awaits the webhooks, so other requests run meanwhile. An update whose object
  changed during admission is admitted again from the start (up to 5 times, then 409), unless the
  request named a resourceVersion: then it is a 409 Conflict, as on a real server.

Not supported, and why:

- `clientConfig.service`: the sandbox has no Services network to reach a Service through. Such a
  webhook counts as one that cannot be called (so its failurePolicy decides). Use `clientConfig.url`.
- `matchConditions` (CEL): the sandbox cannot evaluate CEL. A configuration that has any is refused
  with 422, rather than calling its webhook when the real server would not.
- `matchPolicy`: Exact and Equivalent behave the same, since the sandbox serves one version of each
  resource; a rule matches that version only.
- `reinvocationPolicy: IfNeeded`: accepted, but no webhook is ever called a second time.
- Writes that do not come over HTTP (the simulated cluster's controllers, kubelet and scheduler, the
  garbage collector, `Sandbox.store` calls from Python) and `pods/binding` are not admitted.
- ValidatingAdmissionPolicies and MutatingAdmissionPolicies are not served.
- A strategic merge patch of a configuration (client-side `kubectl apply` of a changed one) replaces
  its `webhooks` list instead of merging it by name: patching.py has no merge key for these kinds.

The configurations' defaults and validation are plain functions in webhookconfig.py (strategies.py
calls them); this module is `WebhookAdmission`, the API server's write path. It names the `Store` it
is given only as a type, and nothing it imports imports it back.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import ssl
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import aiohttp
from multidict import MultiMapping

from gangq.sandbox import patching, selection
from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.entry import Entry, dumps
from gangq.sandbox.errors import ApiError, conflict, not_found
from gangq.sandbox.webhookconfig import (
    DEFAULT_TIMEOUT_SECONDS,
    GROUP,
    MUTATING,
    REVIEW_VERSIONS,
    SCOPES,
    SIDE_EFFECTS,
    VALIDATING,
)

if TYPE_CHECKING:
    from gangq.sandbox.store import Store

__all__ = [
    "AdmissionContext",
    "WebhookAdmission",
    "WebhookRejection",
    "delete_options",
    "user_info",
    "warning_header",
]

log = logging.getLogger(__name__)

MAX_ADMISSION_ATTEMPTS = 5
DEFAULT_USERNAME = "system:admin"
DEFAULT_GROUPS = ("system:masters", "system:authenticated")
_NAMESPACES = ("", "namespaces")
_SA_PREFIX = "system:serviceaccount:"
_EXTRA_PREFIX = "impersonate-extra-"
_STATUS_DETAIL_KEYS = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")


# ------------------------------------------------------------------------------- requests


def _header_values(headers: MultiMapping[str] | Mapping[str, str], key: str) -> list[str]:
    if isinstance(headers, MultiMapping):
        return list(headers.getall(key, []))
    value = headers.get(key)
    return [value] if value else []


def user_info(headers: MultiMapping[str] | Mapping[str, str]) -> dict[str, Any]:
    """The AdmissionReview userInfo of a request: the impersonated user when the request carries
    Impersonate-* headers (groups, uid and extra as kube-apiserver derives them), else system:admin."""
    username = headers.get("Impersonate-User")
    if not username:
        return {"username": DEFAULT_USERNAME, "groups": list(DEFAULT_GROUPS)}
    groups = _header_values(headers, "Impersonate-Group")
    if not groups and username.startswith(_SA_PREFIX) and username.count(":") == 3:
        ns = username.split(":")[2]
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}"]
    if username == "system:anonymous":
        if "system:unauthenticated" not in groups:
            groups.append("system:unauthenticated")
    elif "system:authenticated" not in groups and "system:unauthenticated" not in groups:
        groups.append("system:authenticated")
    out: dict[str, Any] = {"username": username, "groups": groups}
    uid = headers.get("Impersonate-Uid")
    if uid:
        out["uid"] = uid
    extra: dict[str, list[str]] = {}
    for key in dict.fromkeys(headers.keys()):
        if key.lower().startswith(_EXTRA_PREFIX):
            extra.setdefault(unquote(key[len(_EXTRA_PREFIX):].lower()), []).extend(_header_values(headers, key))
    if extra:
        out["extra"] = extra
    return out


def delete_options(*, policy: str | None, grace: int | None, preconditions: Any, dry_run: bool) -> dict[str, Any]:
    """The DeleteOptions a DELETE's webhooks are sent (from its body and query)."""
    out: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    if grace is not None:
        out["gracePeriodSeconds"] = grace
    if preconditions:
        out["preconditions"] = preconditions
    if policy:
        out["propagationPolicy"] = policy
    if dry_run:
        out["dryRun"] = ["All"]
    return out


def warning_header(text: str) -> str:
    """A `Warning` header value for a webhook's warning, as kube-apiserver writes it."""
    clean = "".join(c if c.isprintable() else " " for c in text)
    return '299 - "' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class AdmissionContext:
    """What admission needs to know of the request: dryRun, the user, the write's options; and the
    warnings webhooks returned, for the response's headers."""

    dry_run: bool = False
    user: dict[str, Any] = field(
        default_factory=lambda: {"username": DEFAULT_USERNAME, "groups": list(DEFAULT_GROUPS)}
    )
    field_manager: str | None = None
    field_validation: str | None = None
    warnings: list[str] = field(default_factory=list)

    def options(self, kind: str) -> dict[str, Any]:
        """CreateOptions or UpdateOptions for the request's AdmissionReview."""
        out: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if self.dry_run:
            out["dryRun"] = ["All"]
        if self.field_manager:
            out["fieldManager"] = self.field_manager
        if self.field_validation:
            out["fieldValidation"] = self.field_validation
        return out


@dataclass
class _Attributes:
    """One admission request (kube-apiserver's admission.Attributes)."""

    info: ResourceInfo
    operation: str
    subresource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    options: dict[str, Any]
    ctx: AdmissionContext


class _Webhook:
    """One webhook of a stored configuration (a shared stored dict: never modified)."""

    __slots__ = ("configuration", "mutating", "spec")

    def __init__(self, configuration: str, spec: dict[str, Any], *, mutating: bool) -> None:
        self.configuration = configuration
        self.spec = spec
        self.mutating = mutating

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")

    @property
    def ignores_failures(self) -> bool:
        return self.spec.get("failurePolicy") == "Ignore"

    @property
    def timeout(self) -> int:
        t = self.spec.get("timeoutSeconds")
        return t if isinstance(t, int) and t > 0 else DEFAULT_TIMEOUT_SECONDS


class _CallError(Exception):
    """The webhook could not be called or answered nonsense (ErrCallingWebhook): failurePolicy decides."""


class WebhookRejection(ApiError):
    """A webhook's `allowed: false`, with the Status body kube-apiserver answers it with."""

    def __init__(self, webhook: str, result: Any) -> None:
        status = dict(result) if isinstance(result, dict) else {}
        code = status.get("code")
        code = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 400
        denied = f'admission webhook "{webhook}" denied the request'
        message, reason = status.get("message"), status.get("reason")
        if message:
            text = f"{denied}: {message}"
        elif reason:
            text = f"{denied}: {reason}"
        else:
            text = f"{denied} without explanation"
        super().__init__(code, str(reason or ""), text)
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": text}
        if status.get("status") not in (None, "", "Success"):
            body["status"] = status["status"]
        if reason:
            body["reason"] = reason
        det = status.get("details")
        if isinstance(det, dict):
            body["details"] = {k: det[k] for k in _STATUS_DETAIL_KEYS if det.get(k) not in (None, "", [])}
        body["code"] = code
        self.body = body

    def status(self) -> dict[str, Any]:
        return self.body


def _internal(text: str) -> ApiError:
    """apierrors.NewInternalError."""
    return ApiError(500, "InternalError", f"Internal error occurred: {text}", details={"causes": [{"message": text}]})


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    meta = obj.get("metadata") if obj is not None else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def _gvk_string(doc: Mapping[str, Any]) -> str:
    api_version, kind = str(doc.get("apiVersion") or ""), str(doc.get("kind") or "")
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


def _exact_or_wildcard(items: Any, value: str) -> bool:
    return isinstance(items, list) and ("*" in items or value in items)


def _rule_matches(rule: Any, attrs: _Attributes) -> bool:
    """rules.Matcher: scope, operation, group, version, resource (with "res/sub" and wildcards)."""
    if not isinstance(rule, dict):
        return False
    scope = rule.get("scope") or "*"
    cluster_level = attrs.info.key == _NAMESPACES or not attrs.namespace
    if (scope == "Namespaced" and cluster_level) or (scope == "Cluster" and not cluster_level):
        return False
    if scope not in SCOPES:
        return False
    ops = rule.get("operations")
    if not isinstance(ops, list) or ("*" not in ops and attrs.operation not in ops):
        return False
    if not _exact_or_wildcard(rule.get("apiGroups"), attrs.info.group):
        return False
    if not _exact_or_wildcard(rule.get("apiVersions"), attrs.info.version):
        return False
    for res_sub in rule.get("resources") or ():
        if not isinstance(res_sub, str):
            continue
        res, _, sub = res_sub.partition("/")
        if res in ("*", attrs.info.plural) and sub in ("*", attrs.subresource):
            return True
    return False


def _selector_matches(selector: Any, labels: Mapping[str, str], where: str) -> bool:
    if selector is None:
        return True
    try:
        return selection.label_selector_from_object(selector, where=where).matches(labels)
    except selection.SelectorError as e:
        raise _internal(str(e)) from None


# ------------------------------------------------------------------------------- admission


class WebhookAdmission:
    """The API server's write path through admission webhooks (see the module docstring).

    Each write method does what the store would do, with the webhooks called at their places; with no
    webhook configuration stored (or for the configurations themselves) it is the store's plain write.
    Everything that touches the store runs without suspending; only the webhook calls are awaited.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ssl: dict[str, ssl.SSLContext] = {}

    # ------------------------------------------------------------------ helpers
    def _applies(self, info: ResourceInfo) -> bool:
        if info.group == GROUP:  # the webhook configurations are never sent to webhooks
            return False
        return bool(self.store.count(GROUP, MUTATING) or self.store.count(GROUP, VALIDATING))

    def _writing(self, ctx: AdmissionContext) -> contextlib.AbstractContextManager[None]:
        """Around the store calls that write: dryRun=All mode for a dry-run request (they never suspend)."""
        return self.store.dry_run_mode() if ctx.dry_run else contextlib.nullcontext()

    def _webhooks(self, *, mutating: bool) -> list[_Webhook]:
        out: list[_Webhook] = []
        for cfg in self.store.stored_objects(GROUP, MUTATING if mutating else VALIDATING):
            for spec in cfg.get("webhooks") or ():
                if isinstance(spec, dict):
                    out.append(_Webhook(cfg["metadata"]["name"], spec, mutating=mutating))
        return out

    @staticmethod
    def _request_namespace(info: ResourceInfo, namespace: str, name: str) -> str:
        return name if info.key == _NAMESPACES else namespace

    def _namespace_labels(self, attrs: _Attributes) -> dict[str, str]:
        if attrs.info.key == _NAMESPACES and not attrs.subresource and attrs.operation in ("CREATE", "UPDATE"):
            return _labels(attrs.obj)
        ns_info = self.store.resource(*_NAMESPACES)
        entry = self.store.current_entry(ns_info, None, attrs.namespace)
        if entry is None:
            raise not_found(ns_info, attrs.namespace)
        return _labels(entry.obj)

    def _matches(self, hook: _Webhook, attrs: _Attributes) -> bool:
        if not any(_rule_matches(r, attrs) for r in hook.spec.get("rules") or ()):
            return False
        if attrs.namespace or attrs.info.key == _NAMESPACES:
            selector = hook.spec.get("namespaceSelector")
            if selector and not _selector_matches(selector, self._namespace_labels(attrs), "namespaceSelector"):
                return False
        selector = hook.spec.get("objectSelector")
        if selector:  # the new object's labels or the old one's
            return any(o is not None and _selector_matches(selector, _labels(o), "objectSelector")
                       for o in (attrs.obj, attrs.old))
        return True

    def _ssl_context(self, ca_bundle: Any) -> ssl.SSLContext:
        key = ca_bundle if isinstance(ca_bundle, str) else ""
        ctx = self._ssl.get(key)
        if ctx is None:
            if key:
                try:
                    pem = base64.b64decode(key, validate=True).decode("ascii")
                    ctx = ssl.create_default_context(cadata=pem)
                except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as e:
                    raise _CallError(f"could not get REST client: unable to load root certificates: {e}") from None
            else:
                ctx = ssl.create_default_context()
            # Go's verifier, which kube-apiserver uses, does not hold certificates to X.509 strict mode
            # (Python 3.13 turns it on: it requires key identifiers that many webhook certificates lack)
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
            if len(self._ssl) > 64:
                self._ssl.clear()
            self._ssl[key] = ctx
        return ctx

    # ------------------------------------------------------------------ one call
    def _review(self, attrs: _Attributes, uid: str, version: str) -> dict[str, Any]:
        info = attrs.info
        gvk = {"group": info.group, "version": info.version, "kind": info.kind}
        gvr = {"group": info.group, "version": info.version, "resource": info.plural}
        req: dict[str, Any] = {"uid": uid, "kind": gvk, "resource": gvr}
        if attrs.subresource:
            req["subResource"] = attrs.subresource
        req["requestKind"] = dict(gvk)
        req["requestResource"] = dict(gvr)
        if attrs.subresource:
            req["requestSubResource"] = attrs.subresource
        if attrs.name:
            req["name"] = attrs.name
        if attrs.namespace:
            req["namespace"] = attrs.namespace
        req.update(operation=attrs.operation, userInfo=attrs.ctx.user, object=attrs.obj, oldObject=attrs.old,
                   dryRun=attrs.ctx.dry_run, options=attrs.options)
        return {"kind": "AdmissionReview", "apiVersion": f"admission.k8s.io/{version}", "request": req}

    async def _post(self, hook: _Webhook, url: str, ca_bundle: Any, body: bytes) -> tuple[int, str, bytes]:
        ssl_ctx = self._ssl_context(ca_bundle)
        timeout = aiohttp.ClientTimeout(total=hook.timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json, */*"}
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, data=body, headers=headers, ssl=ssl_ctx) as resp,
            ):
                return resp.status, resp.content_type, await resp.read()
        except TimeoutError:
            why = "context deadline exceeded"
        except aiohttp.ClientConnectorCertificateError as e:
            cert_err = e.certificate_error
            why = f"tls: failed to verify certificate: {getattr(cert_err, 'verify_message', None) or cert_err}"
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, ConnectionRefusedError):
                why = f"dial tcp {e.host}:{e.port}: connect: connection refused"
            else:
                why = f"dial tcp {e.host}:{e.port}: {e.os_error.strerror or e.os_error}"
        except aiohttp.ClientError as e:
            why = str(e) or type(e).__name__
        raise _CallError(f'failed to call webhook: Post "{url}": {why}')

    @staticmethod
    def _http_error(code: int, content_type: str, data: bytes) -> str:
        """What client-go makes of a non-2xx answer (its Status message, or the generic wording)."""
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("message"):
            return str(doc["message"])
        text = data[:1024].decode("utf-8", "replace").strip() if content_type.startswith("text/plain") else ""
        text = text or "unknown"
        generic = {
            400: "the server rejected our request for an unknown reason",
            401: "the server has asked for the client to provide credentials",
            403: text,
            404: "the server could not find the requested resource",
            405: "the server does not allow this method on the requested resource",
            409: "the server reported a conflict",
            415: text,
            422: "the server rejected our request due to an error in our request",
            429: "the server has received too many requests and has asked us to try again later",
            503: "the server is currently unable to handle the request",
            504: "the server was unable to return a response in the time allotted, but may still be processing "
                 "the request",
        }
        if code in generic:
            return generic[code]
        if code >= 500:
            return f"an error on the server ({json.dumps(text)}) has prevented the request from succeeding"
        return f"the server responded with the status code {code} but did not return more information"

    async def _call(self, hook: _Webhook, attrs: _Attributes) -> dict[str, Any]:
        """Call one webhook; its checked AdmissionReview response (with `patch` decoded to bytes)."""
        if attrs.ctx.dry_run and hook.spec.get("sideEffects") not in SIDE_EFFECTS:
            if hook.spec.get("sideEffects") is None:
                raise _CallError("Webhook SideEffects is nil")
            raise ApiError(400, "BadRequest", f'admission webhook "{hook.name}" does not support dry run')
        versions = hook.spec.get("admissionReviewVersions") or ()
        version = next((v for v in versions if v in REVIEW_VERSIONS), None)
        if version is None:
            raise _CallError("could not create admission objects: webhook does not accept known AdmissionReview "
                             "versions (v1, v1beta1)")
        cc = hook.spec.get("clientConfig") or {}
        url = cc.get("url") if isinstance(cc, dict) else None
        if not isinstance(url, str):
            raise _CallError("could not get REST client: clientConfig.service is not supported by the gangq "
                             "sandbox (it has no Services network); use clientConfig.url")
        uid = str(uuid.uuid4())
        body = dumps(self._review(attrs, uid, version)).encode()
        post_url = f"{url}?timeout={hook.timeout}s"
        log.debug("calling admission webhook %s", hook.name,
                  extra={"webhook": hook.name, "configuration": hook.configuration, "url": post_url,
                         "operation": attrs.operation, "resource": attrs.info.plural, "uid": uid})
        code, content_type, data = await self._post(hook, post_url, cc.get("caBundle"), body)
        if not 200 <= code < 300:
            raise _CallError("failed to call webhook: " + self._http_error(code, content_type, data))
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise _CallError(f"failed to call webhook: couldn't get version/kind; json parse error: {e}") from None
        if not isinstance(doc, dict):
            raise _CallError("failed to call webhook: couldn't get version/kind; json parse error: not an object")
        resp = doc.get("response")
        if not isinstance(resp, dict):
            raise _CallError("received invalid webhook response: webhook response was absent")
        patch = resp.get("patch")
        if patch is not None:
            try:
                resp = dict(resp, patch=base64.b64decode(str(patch), validate=True))
            except (binascii.Error, ValueError) as e:
                raise _CallError(f"failed to call webhook: illegal base64 data in response.patch: {e}") from None
        return self._verified(hook, resp, doc, uid, version)

    @staticmethod
    def _verified(hook: _Webhook, resp: dict[str, Any], doc: dict[str, Any], uid: str,
                  version: str) -> dict[str, Any]:
        """webhookrequest.VerifyAdmissionResponse."""
        def invalid(why: str) -> _CallError:
            return _CallError(f"received invalid webhook response: {why}")

        patch, patch_type = resp.get("patch") or b"", resp.get("patchType")
        if version == "v1beta1":
            return dict(resp, patchType="JSONPatch" if patch and hook.mutating else None,
                        patch=patch if hook.mutating else b"")
        if resp.get("uid") != uid:
            raise invalid(f'expected response.uid="{uid}", got "{resp.get("uid") or ""}"')
        if doc.get("apiVersion") != "admission.k8s.io/v1" or doc.get("kind") != "AdmissionReview":
            raise invalid(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                          f"{_gvk_string(doc)}")
        if hook.mutating:
            if patch and patch_type is None:
                raise invalid("webhook returned response.patch but not response.patchType")
            if not patch and patch_type is not None:
                raise invalid("webhook returned response.patchType but not response.patch")
            if patch_type is not None and not patch_type:
                raise invalid(f'webhook returned invalid response.patchType of "{patch_type}"')
        else:
            if patch:
                raise invalid("validating webhook may not return response.patch")
            if patch_type is not None:
                raise invalid("validating webhook may not return response.patchType")
        return resp

    def _take_warnings(self, resp: Mapping[str, Any], ctx: AdmissionContext) -> None:
        for w in resp.get("warnings") or ():
            if isinstance(w, str) and w and w not in ctx.warnings:
                ctx.warnings.append(w)

    def _call_failed(self, hook: _Webhook, err: _CallError) -> ApiError | None:
        text = f'failed calling webhook "{hook.name}": {err}'
        extra = {"webhook": hook.name, "configuration": hook.configuration}
        if hook.ignores_failures:
            log.warning("failing open (failurePolicy Ignore): %s", text, extra=extra)
            return None
        log.warning("failing closed (failurePolicy Fail): %s", text, extra=extra)
        return _internal(text)

    # ------------------------------------------------------------------ the two phases
    async def _mutate(self, attrs: _Attributes) -> dict[str, Any] | None:
        """Run the matching mutating webhooks in order; the (patched) object."""
        for hook in self._webhooks(mutating=True):
            if not self._matches(hook, attrs):
                continue
            try:
                resp = await self._call(hook, attrs)
            except _CallError as err:
                failure = self._call_failed(hook, err)
                if failure is None:
                    continue
                raise failure from None
            self._take_warnings(resp, attrs.ctx)
            if resp.get("allowed") is not True:
                raise WebhookRejection(hook.name, resp.get("status"))
            attrs.obj = self._patched(hook, attrs, resp)
        return attrs.obj

    def _patched(self, hook: _Webhook, attrs: _Attributes, resp: Mapping[str, Any]) -> dict[str, Any] | None:
        raw: bytes = resp.get("patch") or b""
        if not raw:
            return attrs.obj
        try:
            ops = json.loads(raw)
        except ValueError as e:
            ops = None
            why = str(e)
        else:
            why = "a JSON patch must be an array of operations"
        if not isinstance(ops, list):
            failure = self._call_failed(hook, _CallError(f"received undecodable patch in webhook response: {why}"))
            if failure is None:
                return attrs.obj
            raise failure
        if not ops:
            return attrs.obj
        if attrs.obj is None:
            raise _internal(f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                            "supported for this operation")
        if resp.get("patchType") != "JSONPatch":
            failure = self._call_failed(hook, _CallError(f'unsupported patch type "{resp.get("patchType")}"'))
            if failure is None:
                return attrs.obj
            raise failure
        try:
            patched = patching.apply_json_patch(attrs.obj, ops)
        except patching.PatchError as e:
            raise _internal(e.message) from None
        log.debug("admission webhook %s patched %s %s", hook.name, attrs.info.kind, attrs.name,
                  extra={"webhook": hook.name, "operations": len(ops)})
        return self.store.decode_defaults(attrs.info, patched, create=attrs.operation == "CREATE")

    async def _validate(self, attrs: _Attributes) -> None:
        """Run the matching validating webhooks at once; the first failure, in webhook order, is raised."""
        hooks = [h for h in self._webhooks(mutating=False) if self._matches(h, attrs)]
        if not hooks:
            return

        async def one(hook: _Webhook) -> ApiError | None:
            try:
                resp = await self._call(hook, attrs)
            except _CallError as err:
                return self._call_failed(hook, err)
            except ApiError as err:
                return err
            self._take_warnings(resp, attrs.ctx)
            if resp.get("allowed") is not True:
                return WebhookRejection(hook.name, resp.get("status"))
            return None

        for failure in await asyncio.gather(*(one(h) for h in hooks)):
            if failure is not None:
                raise failure

    # ------------------------------------------------------------------ writes
    async def create(self, info: ResourceInfo, body: Any, namespace: str | None, ctx: AdmissionContext, *,
                     options: str = "CreateOptions") -> Entry:
        """POST (and a server-side apply that creates): mutating webhooks, validation, validating
        webhooks, store. `body` becomes the store's."""
        store = self.store
        if not self._applies(info):
            with self._writing(ctx):
                return store._create(info, body, namespace)
        ns, obj = store.admission_create_input(info, body, namespace)
        name = obj["metadata"].get("name")
        name = name if isinstance(name, str) else ""
        attrs = _Attributes(info, "CREATE", "", self._request_namespace(info, ns, name), name, obj, None,
                            ctx.options(options), ctx)
        mutated = await self._mutate(attrs)
        ns, name, prepared = store.prepare_create(info, mutated, namespace)
        attrs.obj = prepared
        await self._validate(attrs)
        with self._writing(ctx):
            return store.commit_create(info, ns, name, prepared, recheck=True)

    async def replace(self, info: ResourceInfo, namespace: str | None, name: str, body: Any,
                      subresource: str | None, ctx: AdmissionContext) -> Entry:
        """PUT, of the object or of a subresource."""
        store = self.store
        if not self._applies(info):
            with self._writing(ctx):
                return store._replace(info, namespace, name, body, subresource)
        meta = body.get("metadata") if isinstance(body, dict) else None
        pinned = isinstance(meta, dict) and bool(meta.get("resourceVersion"))

        def read(i: ResourceInfo) -> tuple[Entry | None, dict[str, Any]]:
            return store.replace_input(i, namespace, name, patching.copy_json(body), subresource)

        return await self._update(info, namespace, name, subresource, ctx, read, pinned=pinned)

    async def patch(self, info: ResourceInfo, namespace: str | None, name: str, patch: Any, patch_type: str,
                    subresource: str | None, ctx: AdmissionContext) -> Entry:
        """PATCH: the patch is applied to the stored object, and the result admitted as an UPDATE (or,
        for a server-side apply that creates, as a CREATE)."""
        store = self.store
        if not self._applies(info):
            with self._writing(ctx):
                return store._patch(info, namespace, name, patch, patch_type, subresource)
        meta = patch.get("metadata") if isinstance(patch, dict) else None
        pinned = isinstance(meta, dict) and bool(meta.get("resourceVersion"))

        def read(i: ResourceInfo) -> tuple[Entry | None, dict[str, Any]]:
            return store.patch_input(i, namespace, name, patch, patch_type, subresource)

        return await self._update(info, namespace, name, subresource, ctx, read, pinned=pinned)

    async def _update(self, info: ResourceInfo, namespace: str | None, name: str, subresource: str | None,
                      ctx: AdmissionContext, read: Callable[[ResourceInfo], tuple[Entry | None, dict[str, Any]]],
                      *, pinned: bool) -> Entry:
        store = self.store
        for attempt in range(MAX_ADMISSION_ATTEMPTS):
            if attempt:
                info = store.resource(info.group, info.plural)
            old_e, new = read(info)
            if old_e is None:  # server-side apply of an object that does not exist
                return await self.create(info, patching.copy_json(new), namespace, ctx)
            ns = old_e.obj["metadata"].get("namespace", "") if info.namespaced else ""
            new = store.decode_defaults(info, new, create=False)
            attrs = _Attributes(info, "UPDATE", subresource or "", self._request_namespace(info, ns, name), name,
                                new, old_e.obj, ctx.options("UpdateOptions"), ctx)
            mutated = await self._mutate(attrs)
            assert mutated is not None
            candidate = store.prepare_update(info, old_e, mutated, subresource)
            attrs.obj = candidate
            await self._validate(attrs)
            if store.current_entry(info, ns, name) is old_e:
                with self._writing(ctx):
                    return store.commit_update(info, old_e, candidate)
            if pinned:
                raise conflict(info, name)
            log.info("%s %s/%s changed during admission; admitting the update again", info.kind, ns, name,
                     extra={"resource": info.plural, "namespace": ns, "object": name, "attempt": attempt + 1})
        raise conflict(info, name)

    async def delete(self, info: ResourceInfo, namespace: str | None, name: str, policy: str | None,
                     grace: int | None, preconditions: dict[str, Any] | None, ctx: AdmissionContext,
                     options: dict[str, Any], *, request_name: str | None = None) -> Entry:
        """DELETE of one object (`request_name=""` for each object of a DELETE on a collection)."""
        store = self.store
        if self._applies(info):
            old = store.current_entry(info, namespace, name)
            if old is None:
                raise not_found(info, name)
            ns = old.obj["metadata"].get("namespace", "") if info.namespaced else ""
            if request_name is not None:
                ns = namespace or ""
            shown = name if request_name is None else request_name
            attrs = _Attributes(info, "DELETE", "", self._request_namespace(info, ns, shown), shown, None, old.obj,
                                options, ctx)
            await self._mutate(attrs)
            await self._validate(attrs)
        with self._writing(ctx):
            return store.delete_entry(info, namespace, name, policy, grace, preconditions)
