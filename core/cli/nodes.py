"""`train --nnodes N --nproc-per-node K --rdzv-endpoint HOST:PORT`: one run over several machines under torchrun's c10d
rendezvous, and `--max-restarts R`. Torch-free: this builds the torchrun command line, core.cli.torchrun runs it. A
multi-node run listens on one interface only: --bind's, else the one that routes to the endpoint.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from core.errors import ConfigError
from core.runs.serve_http import is_loopback

DEFAULT_PORT = 29500  # torchrun's
DEFAULT_RDZV_TIMEOUT = 600.0  # seconds the nodes wait for each other (torchrun's join_timeout default)
AUTO_RESUME_ENV = "AMP_CONSOLE_AUTO_RESUME"  # set by the launcher: a restarted worker resumes from the run folder


# Each flag of a run over several machines: (flag, type, metavar, help).
MULTI_NODE_FLAGS = (
    ("--nnodes", int, "N", "machines in the run; run the same command on each (with --rdzv-endpoint)"),
    ("--nproc-per-node", int, "K", "processes on each machine (one per GPU); the same as --nproc on one machine"),
    ("--node-rank", int, "R", "this machine's number, 0..N-1, for messages (the rendezvous assigns the ranks)"),
    (
        "--rdzv-endpoint",
        str,
        "HOST:PORT",
        f"where the nodes meet: a host every node reaches (one of them), port default {DEFAULT_PORT}",
    ),
    (
        "--rdzv-id",
        str,
        "JOB",
        "the run's name at the rendezvous, the same on every node (default: $SLURM_JOB_ID, else amp-console)",
    ),
    (
        "--rdzv-timeout",
        float,
        "SECONDS",
        f"how long the nodes wait for each other before the run ends (default {DEFAULT_RDZV_TIMEOUT:g})",
    ),
    (
        "--max-restarts",
        int,
        "R",
        "when a process fails, restart every process up to R times, resuming from the run's last checkpoint "
        "(default 0)",
    ),
    (
        "--bind",
        str,
        "ADDRESS",
        "the local address (or interface name) a multi-node run listens on (default: the interface that "
        "reaches the endpoint)",
    ),
)
# the launcher's own (--end-with-parent: its parent, not the ranks'): the workers never get them
NODE_FLAGS = ("--nproc", "--end-with-parent", *(flag for flag, *_ in MULTI_NODE_FLAGS))


def add_node_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nproc", type=int, metavar="N", help="run N processes on this machine with DDP (torchrun on 127.0.0.1)"
    )
    group = parser.add_argument_group("several machines (torchrun's c10d rendezvous; docs/distributed.md)")
    for flag, kind, metavar, help_text in MULTI_NODE_FLAGS:
        group.add_argument(flag, type=kind, metavar=metavar, help=help_text)


@dataclass(frozen=True)
class NodePlan:
    """Where this machine stands in a run and how torchrun is to run it."""

    nnodes: int
    nproc_per_node: int
    node_rank: int | None
    endpoint: str  # HOST:PORT
    rdzv_id: str
    rdzv_timeout: float
    max_restarts: int
    local_addr: str  # the address this node listens on
    interface: str | None  # its interface name, when known

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def describe(self) -> str:
        where = f"node {self.node_rank} of {self.nnodes}" if self.node_rank is not None else f"{self.nnodes} nodes"
        on = f"{self.interface} ({self.local_addr})" if self.interface else self.local_addr
        return (
            f"{where}, {self.nproc_per_node} processes each: rendezvous {self.rdzv_id!r} at {self.endpoint} "
            f"(timeout {self.rdzv_timeout:g} s); this node listens on {on} only"
        )


def wants_launcher(args: argparse.Namespace) -> bool:
    """Whether `train` launches torchrun (any of its flags given) rather than training in this process."""
    return any(
        getattr(args, name, None) is not None
        for name in ("nproc", "nnodes", "nproc_per_node", "rdzv_endpoint", "max_restarts")
    )


def node_plan(args: argparse.Namespace) -> NodePlan:
    """The run's shape from the flags, checked (ConfigError naming the flag)."""
    nproc, per_node = args.nproc, args.nproc_per_node
    if nproc is not None and per_node is not None and nproc != per_node:
        raise ConfigError("nproc", f"--nproc {nproc} and --nproc-per-node {per_node} disagree: give one")
    per_node = per_node if per_node is not None else (nproc if nproc is not None else 1)
    nnodes = args.nnodes if args.nnodes is not None else 1
    if nnodes < 1:
        raise ConfigError("nnodes", f"{nnodes} is not a node count: use 1 or more")
    if per_node < 1:
        raise ConfigError("nproc_per_node", f"{per_node} is not a process count: use 1 or more")
    restarts = args.max_restarts if args.max_restarts is not None else 0
    if restarts < 0:
        raise ConfigError("max_restarts", f"{restarts} is not a restart count: use 0 or more")
    timeout = args.rdzv_timeout if args.rdzv_timeout is not None else DEFAULT_RDZV_TIMEOUT
    if not 0 < timeout <= 86_400:
        raise ConfigError("rdzv_timeout", f"{timeout:g} is out of range: give 1 to 86400 seconds")
    node_rank = args.node_rank
    if node_rank is None and os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_NODEID", "").isdigit():
        node_rank = int(os.environ["SLURM_NODEID"])  # srun's task on the n-th node of the job
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise ConfigError("node_rank", f"{node_rank} is not a node of {nnodes}: use 0 to {nnodes - 1}")
    rdzv_id = args.rdzv_id or os.environ.get("SLURM_JOB_ID") or "amp-console"
    if nnodes == 1 and not args.rdzv_endpoint:
        return NodePlan(1, per_node, node_rank, "", rdzv_id, timeout, restarts, "127.0.0.1", None)
    if not args.rdzv_endpoint:
        raise ConfigError(
            "rdzv_endpoint",
            f"{nnodes} nodes need a meeting point: give --rdzv-endpoint HOST:PORT "
            f"(one of the nodes), the same on every node",
        )
    host, port = split_endpoint(args.rdzv_endpoint)
    local = local_address(host, port, args.bind)
    return NodePlan(
        nnodes, per_node, node_rank, f"{host}:{port}", rdzv_id, timeout, restarts, local, interface_of(local)
    )


def split_endpoint(text: str) -> tuple[str, int]:
    """'node0:29500' -> ('node0', 29500); '[fe80::1]:29500' for IPv6; no port: torchrun's 29500."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or str(DEFAULT_PORT)
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:  # a bare host name or IPv6 address
        host, port = text, str(DEFAULT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("rdzv_endpoint", f"{text!r} is not HOST:PORT (e.g. node0.example:{DEFAULT_PORT})")
    return host, int(port)


def local_address(host: str, port: int, bind: str | None) -> str:
    """The address of this machine a multi-node run listens on: --bind's, else the one that routes to `host`."""
    if bind:
        named = _interface_addresses().get(bind)
        return named or bind  # an interface name, else an address as given
    if is_loopback(host):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))  # UDP: picks the route, sends nothing
            return probe.getsockname()[0]
    except OSError as exc:
        raise ConfigError(
            "rdzv_endpoint",
            f"{host}: no route to the rendezvous host from this machine "
            f"({exc.strerror or exc}); check the name, or give --bind ADDRESS",
        ) from None


def _interface_addresses() -> dict[str, str]:
    """Interface name -> its first IPv4 address."""
    import psutil

    found: dict[str, str] = {}
    for name, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if address.family == socket.AF_INET:
                found.setdefault(name, address.address)
    return found


def interface_of(address: str) -> str | None:
    """The name of the interface holding `address` (for GLOO_SOCKET_IFNAME), if this machine has it."""
    return next((name for name, ip in _interface_addresses().items() if ip == address), None)


def strip_node_flags(argv: list[str]) -> list[str]:
    """The train arguments without the launcher's flags (the workers must not launch again)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in NODE_FLAGS:
            skip = True
        elif not arg.startswith(tuple(flag + "=" for flag in NODE_FLAGS)):
            out.append(arg)
    return out


def network_env(plan: NodePlan) -> dict[str, str]:
    """The interface for gloo's and NCCL's own sockets (unless the user named one)."""
    if not plan.multi_node or not plan.interface:
        return {}
    return {name: plan.interface for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if name not in os.environ}
