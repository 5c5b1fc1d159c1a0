"""Transparent huge pages for the controller's heap.

The engine's state is millions of small Python objects: 100,000 pending gangs are ~350 MB. CPython
takes memory for them (pymalloc) in arenas of 1 MiB, each mapped with 4 KiB pages, and a scheduling
cycle touches objects all over that heap: the queues of the ClusterQueues a finish retries, the
nodes a gang's pods go to. With 4 KiB pages most of those touches also miss the TLB. At 100,000
pending an admission cost 10–15 % more than with 2 MiB pages, while at 1,000 pending (a heap of
20 MB) it cost the same (interleaved runs of ``benchmarks/engine_scaling.py``'s cases), and the
large case slowed down more than the small one whenever the shared machine got busy.

:func:`use_huge_pages` installs an arena allocator (``gangq/_hugearena.c``, built by
``pip install .`` with a C compiler, see setup.py) that hands pymalloc its arenas from 2 MiB-aligned
regions advised with ``MADV_HUGEPAGE``. The kernel backs them with huge pages when transparent huge
pages are enabled (``always`` or ``madvise`` in ``/sys/kernel/mm/transparent_hugepage/enabled``;
most distributions default to one of them). Freed arenas give their memory back to the kernel, as
CPython's own allocator does, a huge page at a time. ``gangq run`` and the engine benchmark's
runner call it at start, as they call :func:`gangq.gc_tuning.tune_gc`; ``GANGQ_HUGE_PAGES=0``
switches it off. CPython 3.15 adds huge pages of its own (``--with-pymalloc-hugepages``), but
from the kernel's reserved pool (``MAP_HUGETLB``), which a Kubernetes node rarely sets aside for
a controller.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "GANGQ_HUGE_PAGES"
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class HugePages:
    """Whether pymalloc's arenas now come from huge-page regions, and if not, why not."""

    active: bool
    reason: str = ""


_state: HugePages | None = None


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``: the one in
    brackets), or None where the file is missing or unreadable (not Linux, no THP support)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def _extension() -> Any:
    return importlib.import_module("gangq._hugearena")  # a C extension (setup.py)


def use_huge_pages(thp_path: Path = THP_ENABLED) -> HugePages:
    """Allocate pymalloc's arenas from huge-page regions from now on, where that can help; says
    whether it did, and why not. Arenas that exist already stay where they are, so call it first
    thing. Idempotent: a second call returns the first one's answer."""
    global _state
    if _state is not None:
        return _state
    mode = thp_mode(thp_path)
    if os.environ.get(ENV, "") in ("0", "false", "no", "off"):
        _state = HugePages(False, f"switched off ({ENV}={os.environ[ENV]})")
    elif mode not in ("always", "madvise"):
        where = "unknown" if mode is None else mode
        _state = HugePages(False, f"transparent huge pages are not enabled (mode: {where}, {thp_path})")
    else:
        try:
            ext = _extension()
        except ImportError as exc:
            _state = HugePages(False, f"the arena allocator is not built ({exc}): see setup.py")
        else:
            ext.install()
            _state = HugePages(True)
    if _state.active:
        log.debug("pymalloc arenas on transparent huge pages (mode %s)", mode)
    else:
        log.info("pymalloc arenas on regular pages: %s", _state.reason)
    return _state


def state() -> HugePages | None:
    """What :func:`use_huge_pages` answered in this process (None: not called)."""
    return _state


def _built() -> Any | None:
    """The allocator's extension module, or None where it is not built."""
    try:
        return _extension()
    except ImportError:
        return None


def stats() -> dict[str, Any]:
    """The arena allocator's counters (``installed``, ``regions``, ``arenas_allocated`` …), or
    ``{"installed": False}`` where it is not built."""
    ext = _built()
    result: dict[str, Any] = ext.stats() if ext is not None else {"installed": False}
    return result


def regions() -> list[tuple[int, int]]:
    """The address ranges (start, end) reserved for arenas so far (empty where not built)."""
    ext = _built()
    return [] if ext is None else [(int(a), int(b)) for a, b in ext.regions()]


def huge_page_kb(smaps: Path = Path("/proc/self/smaps")) -> int:
    """How much of the arena regions the kernel backs with huge pages now, in KiB (AnonHugePages
    of their mappings): where transparent huge pages are on but memory is too fragmented to
    find 2 MiB pieces, the advice gets fewer of them."""
    spans = regions()
    if not spans:
        return 0
    total = 0
    inside = False
    try:
        lines = smaps.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = any(a < end and start < b for a, b in spans)
        elif inside and head == "AnonHugePages:":
            total += int(rest.split()[0])
    return total
