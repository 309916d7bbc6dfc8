"""`train --nnodes N --nproc-per-node K --rdzv-endpoint HOST:PORT`: one run over several machines under torchrun's c10d
rendezvous, and `--max-restarts R`. Torch-free: this builds the torchrun command line, core.cli.torchrun runs it. A
multi-node run listens on one interface only: --bind's, else the one that routes to the endpoint.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from dataclasses import dataclass

from core.errors import ConfigError

DEFAULT_PORT = 29500  # torchrun's
DEFAULT_RDZV_TIMEOUT = 600.0  # seconds the nodes wait for each other (torchrun's join_timeout default)
AUTO_RESUME_ENV = "AMP_CONSOLE_AUTO_RESUME"  # set by the launcher: a restarted worker resumes from the run folder
NODE_FLAGS = (
    "--nproc",
    "--nnodes",
    "--nproc-per-node",
    "--node-rank",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--rdzv-timeout",
    "--max-restarts",
    "--bind",
)  # the launcher's own: the workers never get them


def add_node_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="run N processes on this machine with DDP (torchrun on 127.0.0.1)",
    )
    group = parser.add_argument_group("several machines (torchrun's c10d rendezvous; docs/distributed.md)")
    group.add_argument(
        "--nnodes",
        type=int,
        default=None,
        metavar="N",
        help="machines in the run; run the same command on each (with --rdzv-endpoint)",
    )
    group.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="K",
        help="processes on each machine (one per GPU); the same as --nproc on one machine",
    )
    group.add_argument(
        "--node-rank",
        type=int,
        default=None,
        metavar="R",
        help="this machine's number, 0..N-1, for messages (the rendezvous assigns the ranks)",
    )
    group.add_argument(
        "--rdzv-endpoint",
        default=None,
        metavar="HOST:PORT",
        help=f"where the nodes meet: a host every node reaches (one of them), port default {DEFAULT_PORT}",
    )
    group.add_argument(
        "--rdzv-id",
        default=None,
        metavar="JOB",
        help="the run's name at the rendezvous, the same on every node (default: $SLURM_JOB_ID, else amp-console)",
    )
    group.add_argument(
        "--rdzv-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long the nodes wait for each other before the run ends (default {DEFAULT_RDZV_TIMEOUT:g})",
    )
    group.add_argument(
        "--max-restarts",
        type=int,
        default=None,
        metavar="R",
        help="when a process fails, restart every process up to R times, resuming from the run's "
        "last checkpoint (default 0)",
    )
    group.add_argument(
        "--bind",
        default=None,
        metavar="ADDRESS",
        help="the local address (or interface name) a multi-node run listens on (default: the "
        "interface that reaches the endpoint)",
    )


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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    for name, ip in _interface_addresses().items():
        if ip == address:
            return name
    return None


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


def multi_node_command(plan: NodePlan, python: str, train_argv: list[str]) -> list[str]:
    """torchrun over several machines: c10d rendezvous at the endpoint, this node listening on its address."""
    command = [
        python,
        "-m",
        "core.cli.loopback_torchrun",
        f"--nnodes={plan.nnodes}",
        f"--nproc-per-node={plan.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={plan.endpoint}",
        f"--rdzv-id={plan.rdzv_id}",
        f"--rdzv-conf=join_timeout={plan.rdzv_timeout:g}",
        f"--local-addr={plan.local_addr}",
        f"--max-restarts={plan.max_restarts}",
    ]
    if plan.node_rank is not None:
        command.append(f"--node-rank={plan.node_rank}")
    return [*command, "-m", "core.cli", *train_argv]


def network_env(plan: NodePlan) -> dict[str, str]:
    """The interface for gloo's and NCCL's own sockets (unless the user named one)."""
    if not plan.multi_node or not plan.interface:
        return {}
    return {name: plan.interface for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if name not in os.environ}
