"""Write and watch throughput of the sandbox API server, over real HTTP.

    python benchmarks/sandbox_throughput.py --json OUT.json [--count 3000] [--concurrency 32] [--watchers 3]

The sandbox runs as a subprocess (`python -m gangq.sandbox.cli up --no-cluster`), so the server and
this load generator each get a core. `--watchers` clients watch the namespace from the starting
resourceVersion; then `--count` ConfigMaps are created and each is merge-patched once, by
`--concurrency` concurrent aiohttp requests. Figures:

- `writes_per_s`: (creates + patches) / seconds from the first request to the last response;
  `creates_per_s`, `patches_per_s` per phase;
- `watch_events_per_s`: events received by all watchers / seconds until the last one arrived;
- `all_events_delivered`: every watcher saw every write exactly once, in resourceVersion order;
- `server_cpu_share`: CPU seconds the server process used / wall seconds of the run (below 1.0 the
  load generator, not the server, was the limit); `server_cpu_us_per_write`: server CPU per write,
  including delivering its event to every watcher.

Baseline, measured in the same run with the same client and concurrency: a bare aiohttp server
(subprocess) whose POST handler parses the JSON body and answers it back (`echo_requests_per_s`);
`ratio_writes_over_echo` is the sandbox's share of what the HTTP stack alone can do. Target:
at least 1,500 writes/s while delivering every event to 3 watchers. The machines are
shared and noisy: compare ratios across runs, not absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from typing import Any

import aiohttp

from gangq.controlplane.processes import free_port, stop_process

TARGET_WRITES_PER_S = 1500.0
NS = "bench"

ECHO_SERVER = """
import json, sys
from aiohttp import web
async def echo(request):
    body = json.loads(await request.read())
    return web.Response(body=json.dumps(body).encode(), content_type="application/json")
async def ok(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_post("/echo", echo)
app.router.add_get("/healthz", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server at {url} did not come up in {timeout}s")


async def _run_requests(
    session: aiohttp.ClientSession, reqs: list[tuple[str, str, bytes, str]], concurrency: int
) -> tuple[float, int]:
    """Send (method, url, body, content type) requests with `concurrency` in flight; (seconds, failures)."""
    it = iter(reqs)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        for method, url, body, ctype in it:
            async with session.request(method, url, data=body, headers={"Content-Type": ctype}) as r:
                await r.read()
                if r.status >= 300:
                    failures += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0, failures


async def _watcher(session: aiohttp.ClientSession, url: str, expected: int, out: dict[str, Any]) -> None:
    seen = 0
    last_rv = 0
    ordered = True
    names: set[tuple[str, str]] = set()
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=120)) as r:
        async for line in r.content:
            if not line.strip():
                continue
            ev = json.loads(line)
            if ev["type"] == "BOOKMARK":
                continue
            meta = ev["object"]["metadata"]
            rv = int(meta["resourceVersion"])
            ordered = ordered and rv > last_rv
            last_rv = rv
            names.add((ev["type"], meta["name"]))
            seen += 1
            if seen >= expected:
                break
    out["events"] = seen
    out["done_at"] = time.perf_counter()
    out["ordered"] = ordered
    out["distinct"] = len(names)


async def bench_sandbox(url: str, count: int, concurrency: int, watchers: int) -> dict[str, Any]:
    conn = aiohttp.TCPConnector(limit=concurrency + watchers + 4)
    async with aiohttp.ClientSession(connector=conn) as session:
        async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": NS}}) as r:
            await r.read()
        async with session.get(f"{url}/api/v1/namespaces/{NS}/configmaps") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        expected = 2 * count
        results: list[dict[str, Any]] = [{} for _ in range(watchers)]
        wurl = f"{url}/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        tasks = [asyncio.create_task(_watcher(session, wurl, expected, results[i])) for i in range(watchers)]
        await asyncio.sleep(0.3)
        base = f"{url}/api/v1/namespaces/{NS}/configmaps"
        creates = [("POST", base, json.dumps({"metadata": {"name": f"cm-{i}", "labels": {"bench": "1"}},
                                              "data": {"i": str(i)}}).encode(), "application/json")
                   for i in range(count)]
        patches = [("PATCH", f"{base}/cm-{i}", json.dumps({"data": {"patched": "yes"}}).encode(),
                    "application/merge-patch+json") for i in range(count)]
        t_start = time.perf_counter()
        t_create, f1 = await _run_requests(session, creates, concurrency)
        t_patch, f2 = await _run_requests(session, patches, concurrency)
        t_writes = time.perf_counter() - t_start
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        except TimeoutError:
            for t in tasks:
                t.cancel()
        last = max((r.get("done_at", time.perf_counter()) for r in results), default=time.perf_counter())
        delivered = sum(r.get("events", 0) for r in results)
        all_ok = all(r.get("events") == expected and r.get("ordered") and r.get("distinct") == expected
                     for r in results)
        async with session.get(f"{url}/debug/requests") as r:
            counters = await r.json()
    return {
        "count": count,
        "concurrency": concurrency,
        "watchers": watchers,
        "writes": 2 * count,
        "failed_requests": f1 + f2,
        "writes_per_s": round(2 * count / t_writes, 1),
        "creates_per_s": round(count / t_create, 1),
        "patches_per_s": round(count / t_patch, 1),
        "watch_events_delivered": delivered,
        "watch_events_expected": expected * watchers,
        "watch_events_per_s": round(delivered / (last - t_start), 1),
        "all_events_delivered": all_ok,
        "server_counted_writes": counters.get("writes"),
    }


async def bench_echo(url: str, count: int, concurrency: int) -> dict[str, Any]:
    conn = aiohttp.TCPConnector(limit=concurrency + 4)
    async with aiohttp.ClientSession(connector=conn) as session:
        reqs = [("POST", f"{url}/echo", json.dumps({"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}).encode(),
                 "application/json") for i in range(2 * count)]
        secs, failures = await _run_requests(session, reqs, concurrency)
    return {"requests": 2 * count, "failed_requests": failures, "echo_requests_per_s": round(2 * count / secs, 1)}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _start(cmd: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(url, proc)
    except Exception:
        proc.kill()
        raise
    return proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", dest="json_out", help="write the results to this file as well as stdout")
    ap.add_argument("--count", type=int, default=3000, help="ConfigMaps to create (each is also patched once)")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    ap.add_argument("--watchers", type=int, default=3, help="concurrent watch streams")
    ap.add_argument("--quick", action="store_true", help="--count 1000")
    args = ap.parse_args(argv)
    count = 1000 if args.quick else args.count

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    echo = _start([sys.executable, "-c", ECHO_SERVER, str(port)], url)
    try:
        baseline = asyncio.run(bench_echo(url, count, args.concurrency))
    finally:
        stop_process(echo)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "gangq.sandbox.cli", "up", "--port", str(port), "--no-cluster",
         "--kubeconfig-out", os.devnull],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        _wait_healthy(url, sandbox)
        cpu0, t0 = _cpu_seconds(sandbox.pid), time.perf_counter()
        result = asyncio.run(bench_sandbox(url, count, args.concurrency, args.watchers))
        cpu1, t1 = _cpu_seconds(sandbox.pid), time.perf_counter()
        if cpu0 is not None and cpu1 is not None:
            # share of one core the server used over the run: below 1.0, the load generator was the limit
            result["server_cpu_share"] = round((cpu1 - cpu0) / (t1 - t0), 2)
            result["server_cpu_us_per_write"] = round((cpu1 - cpu0) / result["writes"] * 1e6, 1)
    finally:
        stop_process(sandbox)

    out = {
        "benchmark": "sandbox_throughput",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "sandbox": result,
        "baseline": baseline,
        "ratios": {"writes_over_echo": round(result["writes_per_s"] / baseline["echo_requests_per_s"], 3)},
        "targets": {
            "writes_per_s": TARGET_WRITES_PER_S,
            "met": result["writes_per_s"] >= TARGET_WRITES_PER_S and result["all_events_delivered"],
        },
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
