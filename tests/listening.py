"""The TCP sockets a process the test started listens on: tests of torchrun agents check that they listen on
the loopback only."""

from __future__ import annotations


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket of the process `pid` and its descendants."""
    import psutil

    found = []
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            found += [c.laddr[:2] for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found
