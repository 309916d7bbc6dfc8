"""torchrun with every TCP store it hosts bound to 127.0.0.1 (`python -m core.cli.loopback_torchrun ARGS`).

torch's TCPStore server listens on all network interfaces whatever host it is given, so a single-machine run
under plain torchrun would accept connections from the network on its rendezvous ports. TCPStore does accept a
socket that is already listening (`master_listen_fd`): this wrapper gives it one bound to 127.0.0.1 whenever the
agent hosts a store for a loopback address, then runs torchrun's own main unchanged. Used by core.cli.torchrun
for one-machine runs; multi-machine runs use torchrun directly.
"""

from __future__ import annotations

import socket
import sys

LOOPBACK = ("127.0.0.1", "localhost")


def _loopback_stores() -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    original = dist.TCPStore
    listening: list[socket.socket] = []  # kept open for the agent's life: the store serves on them

    def tcp_store(host_name, port, *args, **kwargs):
        is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
        if is_master and host_name in LOOPBACK and kwargs.get("master_listen_fd") is None:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", int(port)))
            server.listen(4096)
            listening.append(server)
            kwargs["master_listen_fd"] = server.fileno()
            port = server.getsockname()[1]
        return original(host_name, port, *args, **kwargs)

    dist.TCPStore = tcp_store  # dynamic_rendezvous creates the agent's store through torch.distributed
    c10d_rendezvous_backend.TCPStore = tcp_store  # the rendezvous backend imported the class itself


def main(argv: list[str] | None = None) -> None:
    _loopback_stores()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
