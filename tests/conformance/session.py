"""One run of the whole corpus on a sandbox and a real control plane, compared."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from gangq.controlplane.launcher import ControlPlane
from tests.conformance.client import Endpoint
from tests.conformance.compare import Outcome, compare
from tests.conformance.corpus import CASES
from tests.conformance.model import Case
from tests.conformance.runner import run_both

# The sandbox's bookmark interval: a watch that asks for bookmarks gets one within a second of
# quiet, as a real server sends one shortly before the watch's timeoutSeconds.
BOOKMARK_INTERVAL = 1.0


def real_endpoint(cp: ControlPlane) -> Endpoint:
    return Endpoint("real", cp.url, token=cp.pki.identities["admin"].token, ca_file=str(cp.pki.ca_cert))


def run(cp: ControlPlane, cases: Sequence[Case] = CASES) -> list[Outcome]:
    """The corpus on a fresh sandbox (API only: no nodes, no controllers) and on ``cp``."""
    from gangq.sandbox.runtime import Sandbox

    with Sandbox(cluster=False, bookmark_interval=BOOKMARK_INTERVAL) as sb:
        emulated, reference = run_both(Endpoint("sandbox", sb.url), real_endpoint(cp), cases,
                                       f"cf-{secrets.token_hex(2)}")
    return compare(cases, emulated, reference)
