"""Shared fixtures: the sandbox (Kubernetes API emulator + simulated cluster) for end-to-end tests.

- `sandbox`: a fresh in-process sandbox per test (4 GPU nodes, kubelet runs pods for 1 s by default).
- `sandbox_session`: one sandbox shared by the whole session (tests must use their own namespaces).
- `sandbox_factory`: build sandboxes with options, e.g. `sandbox_factory(nodes="2x{cpu:4}", cluster=False)`.
Each yields a `gangq.sandbox.runtime.Sandbox`: `.kubeconfig` (a path), `.url`, `.env()`, and in thread
mode `.store` / `.faults` / `.cluster` (touch them through `.call(fn, ...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gangq.sandbox.runtime import Sandbox


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., Sandbox]]:
    from gangq.sandbox.runtime import Sandbox

    started: list[Sandbox] = []

    def make(**kwargs: Any) -> Sandbox:
        sb = Sandbox(**kwargs).start()
        started.append(sb)
        return sb

    yield make
    for sb in reversed(started):
        sb.stop()


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory()


@pytest.fixture(scope="session")
def sandbox_session() -> Iterator[Sandbox]:
    from gangq.sandbox.runtime import Sandbox

    with Sandbox() as sb:
        yield sb
