"""The installed engine decides exactly as the source tree.

``pip install .`` compiles ``gangq/core`` with mypyc when it can (setup.py), while the test suite
imports the source tree (``python -m pytest`` puts the checkout first on ``sys.path``). This test
runs the same long random worlds through the *installed* core in a subprocess that does not see
the checkout's ``gangq`` package, and requires the same decision log, pending-reason messages
included, as the source engine gives in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import gangq.core
from tests.engine.test_properties import World, _random_world

# Both tests compare the source tree's core (this process) with the installed build: in the run
# against the compiled build both sides are the build, so .ci/run leaves them out there.
pytestmark = pytest.mark.interpreted_only

REPO = Path(__file__).resolve().parents[2]
SEEDS = range(30)

_SCRIPT = """
import json, sys
import gangq.core.engine as engine        # the installed core: the checkout is not on sys.path yet
sys.path.append(sys.argv[1])              # after site-packages: only for the tests package
from tests.engine.test_properties import World, _random_world
import gangq.core
logs = {}
for seed in range(int(sys.argv[2])):
    queues, nodes, fair, events = _random_world(seed)
    world = World(queues, nodes, fair)
    for event in events:
        world.apply(event)
    logs[seed] = world.log
print(json.dumps({"engine": engine.__file__, "compiled": gangq.core.compiled(), "logs": logs}))
"""


def _logs_here() -> dict[str, list[str]]:
    logs = {}
    for seed in SEEDS:
        queues, nodes, fair, events = _random_world(seed)
        world = World(queues, nodes, fair)
        for event in events:
            world.apply(event)
        logs[str(seed)] = world.log
    return logs


def _editable_install() -> bool:
    """Installed in development mode: the installed package is this checkout."""
    dist = metadata.distribution("gangq")
    if Path(str(dist.locate_file(""))).resolve() == REPO:  # legacy ``setup.py develop``
        return True
    text = dist.read_text("direct_url.json")
    return bool(text) and bool(json.loads(text).get("dir_info", {}).get("editable", False))


def test_installed_core_decides_exactly_as_the_source(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-P", "-c", _SCRIPT, str(REPO), str(len(SEEDS))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    installed = json.loads(out.stdout)
    engine_file = Path(installed["engine"]).resolve()
    if not _editable_install():
        # A regular install must be the one tested, not the checkout seen through sys.path.
        assert REPO / "gangq" not in engine_file.parents, engine_file
    assert installed["compiled"] == engine_file.name.endswith(tuple(gangq.core.EXTENSION_SUFFIXES))
    here = _logs_here()
    assert sum(len(log) for log in here.values()) > 1000  # busy worlds, not empty ones
    for seed in here:
        assert installed["logs"][seed] == here[seed], f"seed {seed}: the installed core decides differently"


def test_source_tree_core_is_not_compiled() -> None:
    """The suite itself runs the pure-Python source (mypyc output is never written into the
    checkout), so both variants are covered: this suite on the source, the test above on the
    installed build."""
    assert not gangq.core.compiled()
    assert Path(gangq.core.__file__).resolve().parent == REPO / "gangq" / "core"
