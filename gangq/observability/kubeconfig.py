"""The ``kubernetes`` package's kubeconfig loaders, typed.

The package leaves them unannotated; ``gangq queue`` (:mod:`gangq.observability.cli`) and the
controller (:mod:`gangq.operator.kube`) call them through here, so the types are stated once. It
lives in the lowest layer both may import. ``kubernetes.config`` is imported when a loader is
called, not with this module: the CLI starts without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast


def load_kube_config(**kwargs: Any) -> None:
    """``kubernetes.config.load_kube_config``: raises ``kubernetes.config.ConfigException``."""
    from kubernetes import config

    cast(Callable[..., None], config.load_kube_config)(**kwargs)


def load_incluster_config(**kwargs: Any) -> None:
    """``kubernetes.config.load_incluster_config``: raises ``kubernetes.config.ConfigException``."""
    from kubernetes import config

    cast(Callable[..., None], config.load_incluster_config)(**kwargs)


def list_kube_config_contexts(**kwargs: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """``kubernetes.config.list_kube_config_contexts``: (every context, the current one)."""
    from kubernetes import config

    contexts = cast(Callable[..., tuple[list[dict[str, Any]], dict[str, Any] | None]], config.list_kube_config_contexts)
    return contexts(**kwargs)
