"""The built-in kinds the sandbox serves.

`ResourceInfo` describes one served resource (built-in or from a CRD). The Store keeps a table of
them keyed by (group, plural); discovery, URL routing and printing all read it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BUILTIN_RESOURCES", "ResourceInfo"]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


class ResourceInfo:
    """One served resource: names, scope, subresources, and (for custom resources) schema and columns."""

    __slots__ = (
        "api_version",
        "categories",
        "custom",
        "generation",
        "group",
        "kind",
        "list_kind",
        "namespaced",
        "plural",
        "printer_columns",
        "schema",
        "selectable_fields",
        "short_names",
        "singular",
        "subresources",
        "verbs",
        "version",
    )

    def __init__(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        *,
        singular: str | None = None,
        namespaced: bool = True,
        short_names: tuple[str, ...] = (),
        categories: tuple[str, ...] = (),
        subresources: frozenset[str] = frozenset(),
        schema: dict[str, Any] | None = None,
        printer_columns: list[dict[str, Any]] | None = None,
        custom: bool = False,
        generation: bool = False,
        verbs: tuple[str, ...] = ALL_VERBS,
        selectable_fields: tuple[str, ...] = (),
    ) -> None:
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.singular = singular or kind.lower()
        self.list_kind = kind + "List"
        self.namespaced = namespaced
        self.short_names = tuple(short_names)
        self.categories = tuple(categories)
        self.subresources = frozenset(subresources)
        self.schema = schema
        self.printer_columns = list(printer_columns or [])
        self.custom = custom
        self.generation = generation or custom
        self.verbs = tuple(verbs)
        self.selectable_fields = tuple(selectable_fields)  # a CRD's selectableFields, as field-selector names
        self.api_version = f"{group}/{version}" if group else version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def __repr__(self) -> str:
        return f"ResourceInfo({self.api_version} {self.plural})"


def _builtins() -> list[ResourceInfo]:
    st = frozenset({"status"})
    return [
        ResourceInfo("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",), subresources=st),
        ResourceInfo("", "v1", "nodes", "Node", namespaced=False, short_names=("no",), subresources=st),
        ResourceInfo(
            "",
            "v1",
            "pods",
            "Pod",
            short_names=("po",),
            categories=("all",),
            subresources=frozenset({"status", "binding"}),
        ),
        ResourceInfo("", "v1", "services", "Service", short_names=("svc",), categories=("all",), subresources=st),
        ResourceInfo("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
        ResourceInfo("", "v1", "secrets", "Secret"),
        ResourceInfo("", "v1", "events", "Event", short_names=("ev",)),
        ResourceInfo("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
        ResourceInfo("coordination.k8s.io", "v1", "leases", "Lease"),
        ResourceInfo(
            "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, short_names=("pc",)
        ),
        ResourceInfo("batch", "v1", "jobs", "Job", categories=("all",), subresources=st, generation=True),
        ResourceInfo(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            short_names=("crd", "crds"),
            subresources=st,
            generation=True,
        ),
        ResourceInfo(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            namespaced=False,
            categories=("api-extensions",),
            generation=True,
        ),
        ResourceInfo(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            namespaced=False,
            categories=("api-extensions",),
            generation=True,
        ),
    ]


BUILTIN_RESOURCES: Callable[[], list[ResourceInfo]] = _builtins
