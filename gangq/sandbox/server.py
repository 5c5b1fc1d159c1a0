"""The sandbox's HTTP face: the Kubernetes REST API layout served by aiohttp over a `Store`.

Paths: `/api/v1/...` (core) and `/apis/{group}/{version}/...`, cluster-scoped and
`namespaces/{ns}/...`, with `/status` and `pods/{name}/binding`; watch via `?watch=1` (and the
legacy `/watch/` prefix) as newline-delimited JSON flushed per batch of events; discovery
(`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`); Table output for
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`; `kind: Status` error bodies; fault
injection and request counters under `/debug/`. Writes go through admission webhooks
(admission.py) when webhook configurations are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
import uuid
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from gangq.controlplane.faults import Faults, FaultsError
from gangq.sandbox import schema, tables
from gangq.sandbox.admission import (
    DEFAULT_GROUPS,
    DEFAULT_USERNAME,
    AdmissionContext,
    WebhookAdmission,
    delete_options,
    user_info,
    warning_header,
)
from gangq.sandbox.builtin import ResourceInfo
from gangq.sandbox.errors import ApiError, bad_request
from gangq.sandbox.store import APPLY, Store
from gangq.sandbox.watch import WatchEvent

__all__ = ["API_KEY", "KUBE_VERSION", "ApiServer", "make_app"]

log = logging.getLogger(__name__)

KUBE_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-gangq-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-04-17T00:00:00Z",
    "goVersion": "go1.22.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_JSON = "application/json"
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
DEFAULT_WATCH_TIMEOUT = 1800.0
_LIVENESS_CHECK = 5.0  # seconds between checks that a quiet watch's client is still connected


def _truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("1", "true", "yes")


def _int_param(q: Any, name: str) -> int | None:
    v = q.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {v!r} is not an integer") from None


class _Route:
    __slots__ = ("info", "name", "namespace", "subresource")

    def __init__(self, info: ResourceInfo, namespace: str | None, name: str | None, subresource: str | None) -> None:
        self.info = info
        self.namespace = namespace
        self.name = name
        self.subresource = subresource


class ApiServer:
    """Request handling over one Store (one per aiohttp app)."""

    def __init__(
        self,
        store: Store,
        *,
        faults: Faults | None = None,
        bookmark_interval: float | None = None,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> None:
        self.store = store
        self.admission = WebhookAdmission(store)
        self.faults = faults or Faults()
        self.bookmark_interval = bookmark_interval if bookmark_interval is not None else store.bookmark_interval
        self.watch_timeout = watch_timeout
        self._disc_cache: dict[str, tuple[int, bytes]] = {}
        self._instance = uuid.uuid4().hex[:12]  # in OpenAPI hashes: no client cache outlives this server

    # ------------------------------------------------------------------ discovery
    def _cached(self, key: str, build: Any) -> web.Response:
        ver = self.store.resources_version
        hit = self._disc_cache.get(key)
        if hit is None or hit[0] != ver:
            hit = (ver, _dumps(build()).encode())
            self._disc_cache[key] = hit
        return web.Response(body=hit[1], content_type=_JSON)

    def _groups(self) -> dict[str, list[ResourceInfo]]:
        groups: dict[str, list[ResourceInfo]] = {}
        for info in self.store.resources():
            groups.setdefault(info.group, []).append(info)
        return groups

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        infos = [i for i in self.store.resources() if i.group == group and i.version == version]
        if not infos:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        out: list[dict[str, Any]] = []
        for i in sorted(infos, key=lambda x: x.plural):
            entry: dict[str, Any] = {
                "name": i.plural,
                "singularName": i.singular,
                "namespaced": i.namespaced,
                "kind": i.kind,
                "verbs": list(i.verbs),
                "storageVersionHash": hashlib.sha256(f"{i.api_version}/{i.kind}".encode()).hexdigest()[:12],
            }
            if i.short_names:
                entry["shortNames"] = list(i.short_names)
            if i.categories:
                entry["categories"] = list(i.categories)
            out.append(entry)
            if "status" in i.subresources:
                out.append({"name": f"{i.plural}/status", "singularName": "", "namespaced": i.namespaced,
                            "kind": i.kind, "verbs": ["get", "patch", "update"]})
            if "binding" in i.subresources:
                out.append({"name": f"{i.plural}/binding", "singularName": "", "namespaced": i.namespaced,
                            "kind": "Binding", "verbs": ["create"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}

    def _api_group(self, group: str, infos: list[ResourceInfo]) -> dict[str, Any]:
        versions = sorted({i.version for i in infos}, reverse=True)
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    def _api_groups(self) -> dict[str, Any]:
        groups = self._groups()
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._api_group(g, infos) for g, infos in sorted(groups.items()) if g],
        }

    # ------------------------------------------------------------------ routing
    def _route(self, parts: list[str]) -> tuple[_Route | None, bool]:
        """Parse the path segments after /api or /apis into a route (None for a discovery document)."""
        watch_prefix = False
        if parts and parts[0] == "api":
            group, rest = "", parts[1:]
            if not rest:
                return None, False
            version, rest = rest[0], rest[1:]
        else:
            rest = parts[1:]
            if len(rest) < 2:
                return None, False
            group, version, rest = rest[0], rest[1], rest[2:]
        if not rest:
            return None, False
        if rest[0] == "watch":
            watch_prefix = True
            rest = rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        info = self.store.find_resource(group, version, rest[0])
        if namespace is not None and not info.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return _Route(info, namespace, name, sub), watch_prefix

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        verb = "get"
        resource = path
        code = 500
        ctx: AdmissionContext | None = None  # a write's: its warnings from admission webhooks become headers
        try:
            if not parts or parts[0] not in ("api", "apis"):
                resource = "other"
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            route, watch_prefix = self._route(parts)
            if route is None:
                resource = "discovery"
                resp = self._discovery(parts)
                code = resp.status
                return resp
            info = route.info
            resource = _qualified(info) + (f"/{route.subresource}" if route.subresource else "")
            verb = self._verb(request.method, route, watch_prefix or _truthy(request.query.get("watch")))
            latency, failing = self.faults.decide(verb, resource, route.namespace)
            if latency:
                await asyncio.sleep(latency)
            if failing is not None:
                body = Faults.error_body(failing, verb, resource)
                headers = {}
                if failing.retry_after is not None:
                    headers["Retry-After"] = str(int(max(1, round(failing.retry_after))))
                code = failing.code
                return web.Response(status=code, body=_dumps(body), content_type=_JSON, headers=headers)
            if verb == "watch":
                code = 200
                return await self._watch(request, route)
            if verb in ("create", "update", "patch", "delete", "deletecollection"):
                raw = await request.read()
                opts = None
                if verb in ("delete", "deletecollection") and raw:
                    try:
                        opts = json.loads(raw)
                    except ValueError:
                        opts = None
                ctx = AdmissionContext(dry_run=_dry_run(request, opts if isinstance(opts, dict) else None),
                                       user=user_info(request.headers), field_manager=request.query.get("fieldManager"),
                                       field_validation=request.query.get("fieldValidation"))
            resp = await self._dispatch(request, route, verb, ctx)
            code = resp.status
            return _with_warnings(resp, ctx)
        except ApiError as e:
            code = e.code
            headers = {}
            if e.retry_after is not None:
                headers["Retry-After"] = str(int(e.retry_after))
            resp = web.Response(status=e.code, body=_dumps(e.status()), content_type=_JSON, headers=headers)
            return _with_warnings(resp, ctx)
        except Exception as e:
            log.exception("sandbox API server: %s %s failed", request.method, path)
            code = 500
            err = ApiError(500, "InternalError", f"Internal error occurred: {e}")
            return web.Response(status=500, body=_dumps(err.status()), content_type=_JSON)
        finally:
            self.faults.count(verb, resource, code)

    @staticmethod
    def _verb(method: str, route: _Route, watch: bool) -> str:
        if method == "GET":
            if route.name is None:
                return "watch" if watch else "list"
            return "watch" if watch else "get"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if route.name is not None else "deletecollection"
        raise ApiError(405, "MethodNotAllowed",
                       f"the server does not allow this method on the requested resource ({method})")

    def _discovery(self, parts: list[str]) -> web.Response:
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"],
                                      "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                      "serverAddress": "127.0.0.1"}]})
        if parts == ["api", "v1"]:
            return self._cached("/api/v1", lambda: self._resource_list("", "v1"))
        if parts == ["apis"]:
            return self._cached("/apis", self._api_groups)
        if len(parts) == 2:
            group = parts[1]

            def build() -> dict[str, Any]:
                infos = self._groups().get(group)
                if not infos or not group:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return {"kind": "APIGroup", "apiVersion": "v1", **self._api_group(group, infos)}

            return self._cached("/apis/" + group, build)
        if len(parts) == 3:
            g, v = parts[1], parts[2]
            return self._cached(f"/apis/{g}/{v}", lambda: self._resource_list(g, v))
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ------------------------------------------------------------------ verbs
    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            ctype = request.content_type
            if "yaml" in ctype:
                import yaml

                try:
                    return yaml.safe_load(raw)
                except yaml.YAMLError as e:
                    raise bad_request(f"the body is not valid YAML: {e}") from None
            raise bad_request("the body of the request is not valid JSON") from None

    def _table_wanted(self, request: web.Request) -> str | None:
        accept = request.headers.get("Accept", "")
        for part in accept.split(","):
            if "as=Table" in part:
                return "Table"
            if "as=PartialObjectMetadata" in part:
                return "Partial"
            if part.strip().startswith(_JSON) or part.strip() == "*/*":
                return None
        return None

    def _table(self, request: web.Request, info: ResourceInfo, objs: list[dict[str, Any]],
               rv: str | None, cont: str | None) -> dict[str, Any]:
        include = request.query.get("includeObject", "Metadata")
        if include not in ("None", "Metadata", "Object"):
            raise bad_request(f"includeObject {include!r} must be one of None, Metadata, Object")
        return tables.table_for(objs, info.kind, info.printer_columns, custom=info.custom, include_object=include,
                                resource_version=rv, continue_token=cont)

    def _dry(self, dry: bool) -> contextlib.AbstractContextManager[None]:
        """dryRun=All around store writes that do not go through admission (they never suspend)."""
        return self.store.dry_run_mode() if dry else contextlib.nullcontext()

    async def _dispatch(self, request: web.Request, route: _Route, verb: str,
                        ctx: AdmissionContext | None = None) -> web.Response:
        store = self.store
        admission = self.admission
        info = route.info
        q = request.query
        g, p, ns, name, sub = info.group, info.plural, route.namespace, route.name, route.subresource
        if sub is not None and sub not in info.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if verb == "list":
            lim = _int_param(q, "limit")
            want = self._table_wanted(request)
            raw = store.list_raw(g, p, ns, label_selector=q.get("labelSelector"), field_selector=q.get("fieldSelector"),
                                 limit=lim, continue_token=q.get("continue") or None)
            if want is None:
                return web.Response(body=raw.encode(), content_type=_JSON)
            lst = json.loads(raw)
            if want == "Table":
                body = self._table(request, info, lst["items"], lst["metadata"].get("resourceVersion"),
                                   lst["metadata"].get("continue"))
            else:
                body = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                        "metadata": lst["metadata"],
                        "items": [_partial(o) for o in lst["items"]]}
            return web.Response(body=_dumps(body).encode(), content_type=_JSON)
        if verb == "get":
            assert name is not None
            raw = store.get_raw(g, p, ns, name)
            want = self._table_wanted(request)
            if want is None:
                return web.Response(body=raw.encode(), content_type=_JSON)
            obj = json.loads(raw)
            body = self._table(request, info, [obj], None, None) if want == "Table" else _partial(obj)
            return web.Response(body=_dumps(body).encode(), content_type=_JSON)
        ctx = ctx or AdmissionContext()  # a write's: dryRun, the user and options that admission webhooks see
        dry = ctx.dry_run
        if verb == "create":
            body = await self._body(request)
            if sub == "binding":
                assert name is not None
                if not isinstance(body, dict) or not isinstance(body.get("target"), dict) \
                        or not body["target"].get("name"):
                    raise ApiError(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required value',
                                   details={"name": name, "kind": "Binding", "causes": [
                                       {"reason": "FieldValueRequired", "message": "Required value",
                                        "field": "target.name"}]})
                with self._dry(dry):
                    store.bind(ns or "", name, str(body["target"].get("name") or ""))
                return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                          "status": "Success", "code": 201}, status=201)
            if name is not None:
                raise ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
            if body is None:
                raise bad_request("the body of a create must be an object")
            _strict_check(info, body, q)
            e = await admission.create(info, body, ns, ctx)
            return web.Response(status=201, body=e.raw.encode(), content_type=_JSON)
        if verb in ("update", "patch") and name is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if verb == "update":
            assert name is not None
            body = await self._body(request)
            if body is None:
                raise bad_request("the body of an update must be an object")
            _strict_check(info, body, q)
            e = await admission.replace(info, ns, name, body, sub, ctx)
            return web.Response(body=e.raw.encode(), content_type=_JSON)
        if verb == "patch":
            assert name is not None
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            raw_body = await request.read()
            if ctype == APPLY and not q.get("fieldManager"):
                raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                               "is required for apply patch", details={
                                   "group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{
                                       "reason": "FieldValueRequired", "field": "fieldManager",
                                       "message": "Required value: is required for apply patch"}]})
            patch = store._parse_patch(raw_body, ctype)
            _strict_check(info, patch, q)
            existed = True
            if ctype == APPLY:
                try:
                    store.get_raw(g, p, ns, name)
                except ApiError:
                    existed = False
            e = await admission.patch(info, ns, name, patch, ctype, sub, ctx)
            return web.Response(status=200 if existed else 201, body=e.raw.encode(), content_type=_JSON)
        if verb == "delete":
            assert name is not None
            body = await self._body(request)
            opts = body if isinstance(body, dict) else {}
            policy = opts.get("propagationPolicy") or q.get("propagationPolicy")
            if policy is None:
                orphan = opts.get("orphanDependents")
                if orphan is None and q.get("orphanDependents") is not None:
                    orphan = _truthy(q.get("orphanDependents"))
                if orphan is not None:
                    policy = "Orphan" if orphan else "Background"
            grace = opts.get("gracePeriodSeconds")
            if grace is None:
                grace = _int_param(q, "gracePeriodSeconds")
            grace = None if grace is None else int(grace)
            options = delete_options(policy=policy, grace=grace, preconditions=opts.get("preconditions"), dry_run=dry)
            e = await admission.delete(info, ns, name, policy, grace, opts.get("preconditions"), ctx, options)
            return web.Response(body=e.raw.encode(), content_type=_JSON)
        if verb == "deletecollection":
            lst = store.list(g, p, ns, label_selector=q.get("labelSelector"), field_selector=q.get("fieldSelector"))
            body = await self._body(request)
            opts = body if isinstance(body, dict) else {}
            policy = opts.get("propagationPolicy") or q.get("propagationPolicy")
            grace = opts.get("gracePeriodSeconds")
            options = delete_options(policy=policy, grace=grace, preconditions=None, dry_run=dry)
            for o in lst["items"]:
                m = o["metadata"]
                try:
                    await admission.delete(info, m.get("namespace"), m["name"], policy, grace, None, ctx, options,
                                           request_name="")
                except ApiError as err:
                    if err.code != 404:
                        raise
            return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # ------------------------------------------------------------------ watch
    async def _watch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        q = request.query
        info = route.info
        field_selector = q.get("fieldSelector")
        if route.name is not None:  # GET .../name?watch=1 watches one object
            sel = f"metadata.name={route.name}"
            field_selector = f"{field_selector},{sel}" if field_selector else sel
        timeout = _int_param(q, "timeoutSeconds")
        deadline = time.monotonic() + (float(timeout) if timeout is not None and timeout > 0 else self.watch_timeout)
        table = self._table_wanted(request) == "Table"
        w = self.store.watch(
            info.group,
            info.plural,
            route.namespace,
            resource_version=q.get("resourceVersion"),
            label_selector=q.get("labelSelector"),
            field_selector=field_selector,
            allow_bookmarks=_truthy(q.get("allowWatchBookmarks")),
            bookmark_interval=self.bookmark_interval,
        )
        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        lifetime = self.faults.watch_lifetime
        lifetime_deadline = None if lifetime is None else time.monotonic() + lifetime
        try:
            await resp.prepare(request)
            while True:
                now = time.monotonic()
                end = deadline if lifetime_deadline is None else min(deadline, lifetime_deadline)
                if now >= end:
                    if lifetime_deadline is not None and now >= lifetime_deadline and self.faults.watch_lifetime_error:
                        status = self.store.gone_status(self.store.resource_version)
                        await resp.write(('{"type":"ERROR","object":' + _dumps(status) + "}\n").encode())
                    break
                evs = await w.next_events(min(end - now, _LIVENESS_CHECK))
                if evs is None:
                    break
                if not evs:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    continue
                if table:
                    data = b"".join(self._table_line(request, info, ev) for ev in evs)
                else:
                    data = b"".join([ev.line() for ev in evs])
                await resp.write(data)
                if evs[-1].type == "ERROR":
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            w.close()
        return resp

    def _table_line(self, request: web.Request, info: ResourceInfo, ev: WatchEvent) -> bytes:
        if ev.type in ("ERROR", "BOOKMARK"):
            return ev.line()
        table = self._table(request, info, [json.loads(ev.raw)], None, None)
        return ('{"type":"' + ev.type + '","object":' + _dumps(table) + "}\n").encode()

    # ------------------------------------------------------------------ misc endpoints
    async def version(self, request: web.Request) -> web.Response:
        return web.json_response(KUBE_VERSION)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def openapi(self, request: web.Request) -> web.Response:
        """A minimal OpenAPI v3: the root index and, per group-version, the PATCH operations with their
        `fieldValidation` parameter (what kubectl checks before it validates server-side). No schemas;
        /openapi/v2 is 404 (kubectl only falls back to it when v3 lacks a resource)."""
        path = request.path.rstrip("/")
        try:
            if path == "/openapi/v3":
                return self._cached("/openapi/v3", self._openapi_root)
            if path.startswith("/openapi/v3/"):
                gv = path[len("/openapi/v3/"):]
                return self._cached(path, lambda: self._openapi_gv(gv))
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as err:
            return web.Response(status=err.code, body=_dumps(err.status()), content_type=_JSON)

    def _openapi_root(self) -> dict[str, Any]:
        gvs = sorted({(i.group, i.version) for i in self.store.resources()})
        h = f"{self._instance}-{self.store.resources_version}"
        paths = {}
        for g, v in gvs:
            key = f"apis/{g}/{v}" if g else f"api/{v}"
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={h}"}
        return {"paths": paths}

    def _openapi_gv(self, gv: str) -> dict[str, Any]:
        parts = gv.split("/")
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        infos = [i for i in self.store.resources() if i.group == group and i.version == version]
        if not infos:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force")]
        paths: dict[str, Any] = {}
        for i in infos:
            gvk = {"group": group, "version": version, "kind": i.kind}
            base = f"{prefix}/namespaces/{{namespace}}/{i.plural}" if i.namespaced else f"{prefix}/{i.plural}"
            op = {"operationId": f"patch{i.kind}", "x-kubernetes-action": "patch",
                  "x-kubernetes-group-version-kind": gvk, "parameters": params,
                  "responses": {"200": {"description": "OK"}}}
            paths[base + "/{name}"] = {"patch": op}
            if "status" in i.subresources:
                paths[base + "/{name}/status"] = {"patch": dict(op, operationId=f"patch{i.kind}Status")}
            post = {"operationId": f"create{i.kind}", "x-kubernetes-action": "post",
                    "x-kubernetes-group-version-kind": gvk, "parameters": params,
                    "responses": {"201": {"description": "Created"}}}
            paths[base] = {"post": post}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
                "paths": paths, "components": {"schemas": {}}}

    async def debug_requests(self, request: web.Request) -> web.Response:
        if request.method == "DELETE":
            self.faults.reset_counters()
        return web.json_response(self.faults.requests())

    async def debug_faults(self, request: web.Request) -> web.Response:
        if request.method == "DELETE":
            self.faults.clear()
        elif request.method == "POST":
            try:
                cfg = await request.json()
                if isinstance(cfg, dict) and cfg.get("dropWatches"):
                    self.store.drop_watches()
                if isinstance(cfg, dict) and cfg.get("expireWatches"):
                    self.store.expire_watches()
                if isinstance(cfg, dict) and cfg.get("compact"):
                    self.store.compact()
                cfg = {k: v for k, v in cfg.items() if k not in ("dropWatches", "expireWatches", "compact")}
                self.faults.configure(cfg)
            except (ValueError, FaultsError, AttributeError) as e:
                return web.json_response(bad_request(f"fault configuration: {e}").status(), status=400)
        return web.json_response(self.faults.to_dict())


def _qualified(info: ResourceInfo) -> str:
    return f"{info.plural}.{info.group}" if info.group else info.plural


API_KEY = web.AppKey("api", ApiServer)


def _unknown_fields(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths present in `before` but pruned from `after`."""
    out: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for k, v in before.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if k not in after:
                out.append(path)
            else:
                out.extend(_unknown_fields(v, after[k], path))
    elif isinstance(before, list) and isinstance(after, list):
        for idx, (b, a) in enumerate(zip(before, after, strict=False)):
            out.extend(_unknown_fields(b, a, f"{prefix}[{idx}]"))
    return out


def _strict_check(info: ResourceInfo, body: Any, q: Any) -> None:
    """fieldValidation=Strict on a custom resource: unknown fields are a 400, as in Kubernetes."""
    if q.get("fieldValidation") != "Strict" or not info.custom or info.schema is None or not isinstance(body, dict):
        return
    unknown = _unknown_fields(body, schema.prune(body, info.schema))
    if unknown:
        detail = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise ApiError(400, "BadRequest", f'{info.kind} in version "{info.version}" cannot be handled as a '
                       f"{info.kind}: strict decoding error: {detail}")


def _with_warnings(resp: web.Response, ctx: AdmissionContext | None) -> web.Response:
    """The response with a `Warning` header per warning admission webhooks returned."""
    for w in ctx.warnings if ctx is not None else ():
        resp.headers.add("Warning", warning_header(w))
    return resp


def _dry_run(request: web.Request, opts: dict[str, Any] | None = None) -> bool:
    values = request.query.getall("dryRun", [])
    if opts and opts.get("dryRun"):
        values = [*values, *opts["dryRun"]]
    for v in values:
        if v != "All":
            raise bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
    return bool(values)


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def review_handlers(token: str) -> tuple[Any, Any]:
    """TokenReview and SubjectAccessReview of the sandbox, for servers that delegate their
    authentication and authorization to the API server (gangq's pending-workloads API).

    The sandbox has one user, whose ``token`` its kubeconfig holds: the TokenReview authenticates
    that token (as ``DEFAULT_USERNAME``, in ``system:masters``) and no other; the
    SubjectAccessReview allows what a ``system:masters`` member asks, as the sandbox itself lets
    every request do everything, and refuses every other user."""

    async def read(request: web.Request, kind: str, group: str) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise bad_request(f"the body is not a {kind}") from None
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise bad_request(f"the body is not a {kind}: spec is missing")
        return {"kind": kind, "apiVersion": f"{group}/v1", "metadata": {"creationTimestamp": None},
                "spec": body["spec"]}

    def answer(obj: dict[str, Any]) -> web.Response:
        return web.json_response(obj, status=201)

    def failure(err: ApiError) -> web.Response:
        return web.json_response(err.status(), status=err.code)

    async def token_review(request: web.Request) -> web.Response:
        try:
            review = await read(request, "TokenReview", "authentication.k8s.io")
        except ApiError as err:
            return failure(err)
        given = review["spec"].get("token")
        if isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode()):
            review["status"] = {"authenticated": True, "user": {
                "username": DEFAULT_USERNAME, "uid": DEFAULT_USERNAME,
                "groups": list(DEFAULT_GROUPS)}}
        else:
            review["status"] = {"authenticated": False, "error": "not the sandbox's token"}
        return answer(review)

    async def access_review(request: web.Request) -> web.Response:
        try:
            review = await read(request, "SubjectAccessReview", "authorization.k8s.io")
        except ApiError as err:
            return failure(err)
        groups = review["spec"].get("groups") or []
        allowed = isinstance(groups, list) and "system:masters" in groups
        review["status"] = {"allowed": allowed, "reason": "the sandbox's user may do everything" if allowed
                            else "the sandbox has one user (its kubeconfig's); no other is allowed anything"}
        return answer(review)

    return token_review, access_review


def make_app(
    store: Store,
    *,
    faults: Faults | None = None,
    bookmark_interval: float | None = None,
    watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
    token: str | None = None,
) -> web.Application:
    """The aiohttp application serving `store`; `app[API_KEY]` is the ApiServer (for faults and
    counters). With ``token``: TokenReview and SubjectAccessReview (:func:`review_handlers`)."""
    api = ApiServer(store, faults=faults, bookmark_interval=bookmark_interval, watch_timeout=watch_timeout)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[API_KEY] = api
    app.router.add_get("/version", api.version)
    app.router.add_get("/version/", api.version)
    for p in ("/healthz", "/readyz", "/livez"):
        app.router.add_get(p, api.healthz)
    app.router.add_get("/openapi/v2", api.openapi)
    app.router.add_get("/openapi/v3", api.openapi)
    app.router.add_route("*", "/openapi/v3/{tail:.*}", api.openapi)
    app.router.add_route("*", "/debug/requests", api.debug_requests)
    app.router.add_route("*", "/debug/faults", api.debug_faults)
    if token is not None:
        token_review, access_review = review_handlers(token)
        app.router.add_post(TOKEN_REVIEWS, token_review)
        app.router.add_post(ACCESS_REVIEWS, access_review)
    app.router.add_route("*", "/{tail:.*}", api.handle)
    return app
