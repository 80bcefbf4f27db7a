"""A process's own socket table (``/proc/<pid>/fd`` and ``/proc/<pid>/net/tcp{,6}``): what it listens on.

The same facts ``ss -ltnp`` shows, read without a tool: every socket inode among the process's open files,
matched against the kernel's TCP tables in the LISTEN state (0A).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def _inodes(pid: int) -> set[int]:
    found: set[int] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def _address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # IPv6 in /proc: four 32-bit words, each in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    v6 = ipaddress.IPv6Address(words)
    return str(v6.ipv4_mapped) if v6.ipv4_mapped else str(v6)


def listening(pid: int) -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket ``pid`` listens on (IPv4-mapped IPv6 shown as IPv4)."""
    inodes = _inodes(pid)
    out: list[tuple[str, int]] = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state != "0A" or inode not in inodes:
                continue
            host, port = local.split(":")
            out.append((_address(host), int(port, 16)))
    return sorted(set(out))


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def exposed(pid: int) -> list[tuple[str, int]]:
    """The listening sockets of ``pid`` that are not on loopback (wildcards included)."""
    return [(a, p) for a, p in listening(pid) if not is_loopback(a)]


def children(pid: int) -> list[int]:
    """The direct child processes of ``pid`` (an engine's JVM, a worker's executors)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def java_children(pid: int) -> list[int]:
    """The Java processes among ``pid``'s children."""
    out = []
    for child in children(pid):
        try:
            exe = os.readlink(f"/proc/{child}/exe")
        except OSError:
            continue
        if os.path.basename(exe) == "java":
            out.append(child)
    return out


def usage(pid: int | str = "self") -> dict[str, float]:
    """``pid``'s OS threads, open sockets and resident memory (MiB): what an engine's users cost it."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return {"threads": int(status["Threads"]), "sockets": sockets, "rss_mib": int(status["VmRSS"].split()[0]) / 1024}
