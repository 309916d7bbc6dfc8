"""torchrun with every TCP store it hosts bound to one address (`python -m core.cli.loopback_torchrun ARGS`), and its
failures said in one line.

torch's TCPStore server listens on all interfaces; this wrapper hands it a socket already bound to the store's own
host address (`master_listen_fd`), then runs torchrun's main unchanged. A failed run's root cause is one line on
stderr and in the file FAILURE_FILE_ENV names (read by core.cli.torchrun).
"""

from __future__ import annotations

import datetime
import errno
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING

from core.process import exit_process

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

LOOPBACK = ("127.0.0.1", "localhost")
FAILURE_FILE_ENV = "AMP_CONSOLE_FAILURE_FILE"
DID_NOT_MEET = "the nodes did not meet"  # a rendezvous's failure: the launcher's line as it is
RDZV_HINT_ENV = "AMP_CONSOLE_RDZV_HINT"  # what the launcher says about a rendezvous that never completed


def _bind_address(host_name: str) -> str | None:
    """The local address a store for `host_name` listens on, or None to leave it to torch."""
    if host_name in LOOPBACK:
        return "127.0.0.1"
    try:
        address = socket.gethostbyname(host_name)
    except OSError:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))  # an address of this machine?
    except OSError:
        return None
    return address


def _bound_stores() -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    original = dist.TCPStore
    listening: list[socket.socket] = []  # kept open for the agent's life: the store serves on them

    def tcp_store(host_name, port, *args, **kwargs):
        is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
        if not is_master:
            return _client(original, host_name, port, *args, **kwargs)
        address = _bind_address(host_name) if is_master and kwargs.get("master_listen_fd") is None else None
        if address is not None:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind((address, int(port)))
            except OSError as exc:
                server.close()
                if exc.errno == errno.EADDRINUSE:  # another agent here hosts it: the backend connects instead
                    raise RuntimeError(f"{address}:{port} is in use") from exc
                raise
            server.listen(4096)
            listening.append(server)
            kwargs["master_listen_fd"] = server.fileno()
            port = server.getsockname()[1]
        return original(host_name, port, *args, **kwargs)

    # dynamic_rendezvous creates the agent's store through torch.distributed; the rendezvous backend imported the
    # class itself. setattr: a function put in place of a class (mypy refuses the assignment).
    for module in (dist, c10d_rendezvous_backend):
        setattr(module, "TCPStore", tcp_store)  # noqa: B010


def _client(original, host_name: str, port: int, *args, **kwargs) -> object:
    """A store's client, given up after the store's timeout (the rendezvous's read_timeout): torch's waits for ever
    for the first answer of a listener that never answers (another program on that port)."""
    seconds = kwargs.get("timeout", datetime.timedelta(seconds=60)).total_seconds()
    made: list = []

    def connect() -> None:
        try:
            made.append(original(host_name, port, *args, **kwargs))
        except Exception as exc:
            made.append(exc)

    thread = threading.Thread(target=connect, daemon=True)  # the C++ call waits without the GIL
    thread.start()
    thread.join(seconds)
    if not made:
        raise TimeoutError(
            f"{host_name}:{port} gave no store's answer in {seconds:g} s (another program on that port?)"
        )
    if isinstance(made[0], Exception):
        raise made[0]
    return made[0]


def _attempt_is_the_round() -> None:
    """Every node's workers start with the rendezvous round as TORCHELASTIC_RESTART_COUNT. torchelastic counts per
    agent: the node whose worker died counts a restart, one restarted for the node waiting counts none, and the
    ranks would meet as different attempts (store prefixes, resuming). The round is one for all of them."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    start = LocalElasticAgent._start_workers

    def start_workers(self, group):
        holder = getattr(group.spec.rdzv_handler, "_state_holder", None)  # c10d's dynamic rendezvous
        if holder is not None:  # restart count = max_restarts - remaining (torchelastic's own)
            self._remaining_restarts = min(self._remaining_restarts, group.spec.max_restarts - holder.state.round)
        return start(self, group)

    setattr(LocalElasticAgent, "_start_workers", start_workers)  # noqa: B010


def _message(failure: ProcessFailure) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    message = str(message or "")
    return "" if message.startswith("To enable traceback") else message  # torchelastic's: nothing was said


def root_failure(exc: ChildFailedError) -> tuple[int, ProcessFailure]:
    """The rank whose failure ended the run, and that failure. torchelastic takes the first by time, in whole
    seconds, where a rank that died silently is dated when the agent noticed, after the peer that reported its
    loss (PEER_LOST). So: a rank the agent itself stopped (SIGTERM, nothing said) comes last, a report of a
    peer's loss next, then the rest by time."""
    from core.engine.distributed import PEER_LOST

    def order(item: tuple[int, ProcessFailure]) -> tuple[bool, bool, int]:
        failure = item[1]
        message = _message(failure)
        stopped = failure.exitcode == -signal.SIGTERM and not message
        return stopped, PEER_LOST in message, failure.timestamp

    return min(exc.failures.items(), key=order)


def failure_line(exc: ChildFailedError) -> str:
    """The root cause (root_failure) of this node's workers' failure as one line."""
    from core.text import printable

    rank, failure = root_failure(exc)
    message = printable(_message(failure)).strip().splitlines()
    if failure.exitcode is not None and failure.exitcode < 0:
        how = f"was killed by {failure.signal_name()}"
    else:
        how = f"exited with code {failure.exitcode}"
    cause = message[-1] if message else "it said nothing (killed, or it died before it could write why)"
    return (
        f"rank {rank} (local rank {failure.local_rank}) on node {socket.gethostname()} failed first: {how}; "
        f"{cause.removeprefix('RankFailed: ')}"
    )


def _report(line: str) -> None:
    """To the launcher's failure file (it says the line), else to stderr."""
    try:
        with open(os.environ[FAILURE_FILE_ENV], "w", encoding="utf-8") as f:
            f.write(line + "\n")
    except (KeyError, OSError):
        sys.stderr.write(f"amp-console: {line}\n")
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    own_level = "TORCH_CPP_LOG_LEVEL" in os.environ
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # the agent's (a store client's retries: 120 lines)
    _bound_stores()
    if not own_level:  # read at torch's import: the workers keep torch's default
        del os.environ["TORCH_CPP_LOG_LEVEL"]
    _attempt_is_the_round()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import get_args_parser, run

    parser = get_args_parser()
    parser.allow_abbrev = False  # train's --monitor is not an abbreviation of torchrun's --monitor-interval
    try:
        run(parser.parse_args(sys.argv[1:] if argv is None else argv))
    except ChildFailedError as exc:
        _report(failure_line(exc))
        raise SystemExit(1) from None
    except RendezvousError as exc:
        hint, cause = os.environ.get(RDZV_HINT_ENV, ""), exc.__cause__ or exc
        _report(
            f"{DID_NOT_MEET} ({type(exc).__name__}: {(str(cause).strip() or '?').splitlines()[0]})"
            f"{'; ' + hint if hint else ''}"
        )
        os._exit(1)  # a store's client may still wait in its thread, in C++: no teardown under it


if __name__ == "__main__":
    main()
    exit_process(0)
