"""Install the CRDs of ``crds/``, queue objects (``policies/quickstart.yaml``) and, for the quick
start, the admission webhook's configurations into a cluster."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import logging
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gangq.api.meta import Meta
from gangq.operator import certs
from gangq.operator.config import OperatorConfig
from gangq.operator.kube import ApiError, KubeClient, resource_path
from gangq.resources import crd_dir, data_dir, policy_file

log = logging.getLogger(__name__)

CRD_DIR = crd_dir()
QUICKSTART = policy_file("quickstart.yaml")
WEBHOOK_CONFIGURATIONS = data_dir("deploy") / "components" / "webhook" / "configurations.yaml"

_PLURALS = {
    "ResourceFlavor": ("gangq.io", "v1alpha1", "resourceflavors", False),
    "ClusterQueue": ("gangq.io", "v1alpha1", "clusterqueues", False),
    "Cohort": ("gangq.io", "v1alpha1", "cohorts", False),
    "Topology": ("gangq.io", "v1alpha1", "topologies", False),
    "AdmissionCheck": ("gangq.io", "v1alpha1", "admissionchecks", False),
    "LocalQueue": ("gangq.io", "v1alpha1", "localqueues", True),
    "WorkloadPriorityClass": ("gangq.io", "v1alpha1", "workloadpriorityclasses", False),
    "Namespace": ("", "v1", "namespaces", False),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets", True),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False),
}


def crd_documents(paths: Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in ``paths`` (default: all YAML files of ``crds/``)."""
    files = sorted(CRD_DIR.glob("*.yaml")) if paths is None else list(paths)
    docs: list[dict[str, Any]] = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


async def _wait_served(client: KubeClient, crd: dict[str, Any], timeout: float = 10.0) -> None:
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    path = resource_path(spec["group"], version, spec["names"]["plural"])
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await client.request("GET", path, params={"limit": "1"})
            return
        except ApiError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def install_crds(client: KubeClient, paths: Iterable[Path] | None = None) -> list[str]:
    """Create or update the CRDs; wait until each is served. Returns their names."""
    names = []
    base = resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    docs = crd_documents(paths)
    for crd in docs:
        name = crd["metadata"]["name"]
        try:
            await client.create(base, crd)
        except ApiError as err:
            if err.status != 409:
                raise
            current = await client.get(f"{base}/{name}")
            body = dict(crd)
            body["metadata"] = {**crd["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            await client.replace(f"{base}/{name}", body)
        names.append(name)
    for crd in docs:
        await _wait_served(client, crd)
    log.info("installed %d CRDs: %s", len(names), ", ".join(names))
    return names


async def apply_objects(client: KubeClient, docs: Iterable[dict[str, Any]]) -> None:
    """Create the objects (queue configuration, namespaces, JobSets); existing ones are replaced."""
    for doc in docs:
        kind = doc.get("kind", "")
        if kind not in _PLURALS:
            raise ValueError(f"cannot apply kind {kind!r}")
        group, version, plural, namespaced = _PLURALS[kind]
        meta = Meta(doc)
        ns = meta.namespace_or_default if namespaced else None
        base = resource_path(group, version, plural, ns)
        try:
            await client.create(base, doc)
        except ApiError as err:
            if err.status != 409:
                raise
            current = await client.get(f"{base}/{meta.name}")
            body = dict(doc)
            body["metadata"] = {**meta.raw, "resourceVersion": current["metadata"]["resourceVersion"]}
            await client.replace(f"{base}/{meta.name}", body)


def load_yaml(path: Path | str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict)]


def webhook_configurations(url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The install's webhook configurations (``deploy/components/webhook``), every entry calling
    ``url`` (e.g. ``https://127.0.0.1:9443``) instead of the in-cluster Service, with ``ca_bundle``:
    the same entries, scopes and failure policies as a cluster install, for an API server that
    reaches gangq on loopback (the quick start)."""
    docs = load_yaml(WEBHOOK_CONFIGURATIONS)
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca_bundle).decode()}
        out.append(doc)
    return out


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def quickstart_webhook(client: KubeClient, config: OperatorConfig, cert_dir: Path) -> OperatorConfig:
    """Turn the admission webhook on for a cluster whose API server runs on this machine (the quick
    start, emulated or real), as every cluster install has it: a serving certificate for
    127.0.0.1 in ``cert_dir``, the webhook on loopback (``config``'s port, else a free one), and
    the install's configurations registered to call it. Returns ``config`` with the webhook set.

    A new user's first labelled workload is then created suspended and never runs outside its
    queue's quota, as on a cluster installed from ``deploy/``."""
    bind = "127.0.0.1"
    port = config.webhook.port or _free_port(bind)
    bundle = certs.write_new_dir(cert_dir, [bind], datetime.datetime.now(datetime.UTC))
    await apply_objects(client, webhook_configurations(f"https://{bind}:{port}", bundle.ca_bundle))
    webhook = config.webhook.model_copy(update={"port": port, "bind": bind, "cert_dir": str(cert_dir)})
    log.info("admission webhook on https://%s:%d, registered with the API server", bind, port)
    return config.model_copy(update={"webhook": webhook})


async def remove_webhook_configurations(client: KubeClient) -> None:
    """Delete the install's webhook configurations if present: a quick start run without the
    webhook must not leave an earlier run's registration calling a webhook that is gone (with
    failurePolicy Fail, every labelled create would fail)."""
    for doc in load_yaml(WEBHOOK_CONFIGURATIONS):
        group, version, plural, _ = _PLURALS[doc["kind"]]
        try:
            await client.request("DELETE", f"{resource_path(group, version, plural)}/{doc['metadata']['name']}")
        except ApiError as err:
            if err.status != 404:
                raise
