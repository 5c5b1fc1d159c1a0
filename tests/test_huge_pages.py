"""pymalloc arenas on transparent huge pages (gangq/huge_pages.py, gangq/_hugearena.c).

The allocator is a C extension of the *installed* package (``pip install .`` builds it, as it
compiles the core), and it changes the process it is installed in, so its behaviour is checked in
a subprocess that imports the installed gangq (``-P``: the checkout is not on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gangq import huge_pages

_SCRIPT = r"""
import json, sys

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

def vm_flags(address):
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and ":" not in head:
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None

from gangq import huge_pages
out = {"thp_mode": huge_pages.thp_mode()}
before = [(i, str(i)) for i in range(300_000)]       # arenas of the default allocator
state = huge_pages.use_huge_pages()
out["active"], out["reason"] = state.active, state.reason
out["again_same"] = huge_pages.use_huge_pages() is state
rss0 = rss_kb()
objects = [(i, str(i)) for i in range(1_000_000)]    # ~100 MB of small objects, after install
rss1 = rss_kb()
regions = huge_pages.regions()
sample = objects[::997]
out["in_regions"] = sum(any(a <= id(o[1]) < b for a, b in regions) for o in sample) / len(sample)
del sample                                           # (it would keep every arena in use)
out["flags"] = vm_flags(id(objects[500_000][1]))
out["grown_kb"] = rss1 - rss0
out["huge_kb"] = huge_pages.huge_page_kb()
del objects
out["freed_kb"] = rss1 - rss_kb()
del before                                           # back to the default allocator
again = [(i, str(i)) for i in range(1_000_000)]      # reuses the freed arenas
out["stats"] = huge_pages.stats()
sample = again[::997]
out["again_in_regions"] = sum(any(a <= id(o[1]) < b for a, b in regions) for o in sample) / len(sample)
out["regions_after"] = len(huge_pages.regions())
out["regions_before"] = len(regions)
print(json.dumps(out))
"""


def _run(env: dict[str, str] | None = None) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _SCRIPT],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
        cwd="/",
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _compiler() -> bool:
    cc = sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


def test_arenas_come_from_huge_page_regions_and_go_back_when_freed() -> None:
    out = _run()
    if out["thp_mode"] not in ("always", "madvise"):
        # Nothing to gain: the allocator is not installed, and says why.
        assert out["active"] is False and "not enabled" in str(out["reason"])
        return
    # With a C compiler, ``pip install .`` (and ``pip install -e .``) builds the allocator.
    assert out["active"] is True or not _compiler(), out["reason"]
    if not out["active"]:
        assert "not built" in str(out["reason"])
        return
    assert out["again_same"] is True
    # New small objects live in huge-page regions (a few fill free space in older arenas).
    assert float(str(out["in_regions"])) > 0.9
    assert isinstance(out["flags"], list) and "hg" in out["flags"]  # advised MADV_HUGEPAGE
    assert int(str(out["grown_kb"])) > 50_000
    assert 0 <= int(str(out["huge_kb"])) <= int(str(out["grown_kb"])) + 4096  # (as the kernel can)
    # Freed arenas give their memory back to the kernel (MADV_DONTNEED), as munmap would.
    assert int(str(out["freed_kb"])) > int(str(out["grown_kb"])) // 2
    stats = out["stats"]
    assert isinstance(stats, dict)
    assert stats["installed"] is True and stats["arenas_freed"] > 50 and stats["fallbacks"] == 0
    # ... and keep their address ranges for the next arenas: no new regions for as many objects.
    assert float(str(out["again_in_regions"])) > 0.9
    assert out["regions_after"] == out["regions_before"]


def test_switched_off_by_environment() -> None:
    out = _run({huge_pages.ENV: "0"})
    assert out["active"] is False
    assert out["reason"] == f"switched off ({huge_pages.ENV}=0)"
    assert out["in_regions"] == 0.0


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
    ],
)
def test_thp_mode_is_the_bracketed_one(tmp_path: Path, text: str, mode: str) -> None:
    path = tmp_path / "enabled"
    path.write_text(text)
    assert huge_pages.thp_mode(path) == mode


def test_not_installed_where_transparent_huge_pages_are_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huge_pages, "_state", None)
    monkeypatch.delenv(huge_pages.ENV, raising=False)
    path = tmp_path / "enabled"
    path.write_text("always madvise [never]\n")
    state = huge_pages.use_huge_pages(path)
    assert state == huge_pages.HugePages(False, f"transparent huge pages are not enabled (mode: never, {path})")
    monkeypatch.setattr(huge_pages, "_state", None)
    missing = tmp_path / "missing"
    assert huge_pages.use_huge_pages(missing).reason == (
        f"transparent huge pages are not enabled (mode: unknown, {missing})"
    )


def test_controller_log_says_where_arenas_live(monkeypatch: pytest.MonkeyPatch) -> None:
    from gangq.operator.controller import _arenas

    monkeypatch.setattr(huge_pages, "_state", None)
    assert _arenas() == "arenas on regular pages"
    monkeypatch.setattr(huge_pages, "_state", huge_pages.HugePages(True))
    assert _arenas() == "arenas on huge pages"
    monkeypatch.setattr(huge_pages, "_state", huge_pages.HugePages(False, f"switched off ({huge_pages.ENV}=0)"))
    assert _arenas() == f"arenas on regular pages: switched off ({huge_pages.ENV}=0)"
