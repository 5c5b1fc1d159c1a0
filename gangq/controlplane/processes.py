"""Local servers for both control planes and their tests: a free port to start one on, and stopping
its process."""

from __future__ import annotations

import random
import socket
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["ephemeral_range", "free_port", "stop_process"]

_LISTEN_PORTS_FROM = 10000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (Linux; IANA's elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, chosen below the kernel's ephemeral range.

    A port handed out by ``bind(0)`` comes from the ephemeral range, which every outgoing
    connection on the machine draws its source port from: between choosing the port and the
    server (kube-apiserver, etcd) binding it, a client connection can take it and the server fails
    with "address already in use". Ports below that range are only ever taken by listeners.
    """
    low, _high = ephemeral_range()
    rng = random.SystemRandom()
    if low - _LISTEN_PORTS_FROM >= 1000:
        for _ in range(50):
            port = rng.randrange(_LISTEN_PORTS_FROM, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, and SIGKILL after ``grace`` seconds if it has not ended; waits for it to end."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
