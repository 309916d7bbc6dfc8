"""Commands on another machine through the user's own `ssh` (their keys, ~/.ssh/config and known_hosts).

Every call is `ssh -o BatchMode=yes ... -- DEST 'PREFIX agent ARGS'`: BatchMode fails at once instead of prompting, and
nothing here stores a password or key. PREFIX (Host.command) is the host's shell command for amp-console; every argument
after it is shlex-quoted. The host side is core.remote.agent, answering in JSON lines.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from core import __version__
from core.errors import AmpConsoleError
from core.text import first_line, printable

REMOTE_COMMAND_ENV = "AMP_CONSOLE_REMOTE_COMMAND"  # the default PREFIX for every host
CONNECT_SECONDS = 10
VENV = ".amp-console/venv"  # under the host's home: where `remote install` puts amp-console, looked in first


class RemoteError(AmpConsoleError):
    """Something on or on the way to a host went wrong; str() is one line naming the host and what to do."""


@dataclass(frozen=True)
class Host:
    """A machine reached with ssh: `dest` as `ssh` takes it, `command` runs amp-console there."""

    dest: str
    command: str = field(default_factory=lambda: os.environ.get(REMOTE_COMMAND_ENV, "").strip() or "amp-console")
    ssh_options: tuple[str, ...] = ()
    connect_timeout: int = CONNECT_SECONDS

    def __post_init__(self) -> None:
        if not self.dest or self.dest.startswith("-") or any(c.isspace() for c in self.dest):
            raise RemoteError(
                f"{self.dest!r} is not a host ssh can reach: give [user@]host or a Host of your ssh config"
            )

    def argv(self, args: list[str], keepalive: bool = False) -> list[str]:
        """The ssh command line that runs `PREFIX agent --client-version VERSION ARGS...` on the host."""
        ssh = shutil.which("ssh")
        if ssh is None:
            raise RemoteError(
                "no `ssh` on this machine: install the OpenSSH client (e.g. apt install "
                "openssh-client) to reach other hosts"
            )
        options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}", "-T"]
        if keepalive:  # a long stream notices a dead network
            options += ["-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
        args = ["--client-version", __version__, *args]
        command = f'PATH="$HOME/{VENV}/bin:$PATH" amp-console' if self.command == "amp-console" else self.command
        remote = " ".join([command, "agent", *(shlex.quote(str(arg)) for arg in args)])
        return [ssh, *options, *self.ssh_options, "--", self.dest, remote]


def parse_target(text: str) -> tuple[str, str] | None:
    """("host", "path") for `host:path` (`user@host:path` too); None for a local path."""
    head, sep, path = text.partition(":")
    if not sep or not head or "/" in head or "\\" in head or (len(head) == 1 and head.isalpha()):
        return None
    return head, path


def failure(host: Host, code: int, stderr: str) -> RemoteError:
    """The one line for an ssh call that failed with exit `code` and `stderr`."""
    lines = [printable(line.strip()) for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    dest = host.dest
    if code == 255:  # ssh's own failure: no connection, no key, a changed host key...
        return RemoteError(
            f"{dest} is unreachable over ssh ({last or 'no reason given'}); check that "
            f"`ssh {dest}` works from this terminal without a password prompt"
        )
    if code == 127:
        return RemoteError(
            f"{dest} has no amp-console (`{host.command}`: command not found): install it there "
            f"with `amp-console remote install {dest}`, or give the command that runs it (--remote-command)"
        )
    if code == 126:
        return RemoteError(
            f"{dest}: `{host.command}` cannot be run there ({last}); fix its permissions, or give "
            f"the command that runs amp-console (--remote-command)"
        )
    if "invalid choice:" in stderr or "unrecognized arguments:" in stderr:  # an agent older than this caller
        return RemoteError(
            f"{dest} runs another version of amp-console (its `agent` command differs): install "
            f"amp-console {__version__} there, as on this machine"
        )
    text = last.removeprefix("amp-console: ").removeprefix("error: ")
    return RemoteError(f"{dest}: {first_line(text) if text else f'the command failed (exit code {code})'}")


def start(host: Host, args: list[str], stdin: int = subprocess.PIPE, keepalive: bool = False) -> subprocess.Popen:
    """`PREFIX agent ARGS` started on the host, its stdout and stderr piped; RemoteError when ssh can't be run."""
    try:
        return subprocess.Popen(host.argv(args, keepalive), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise RemoteError(f"cannot run ssh: {exc.strerror or exc}") from None


def kill(process: subprocess.Popen | None) -> None:
    """Kill `process` unless it has ended."""
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()


def run(host: Host, args: list[str], payload: bytes | None = None, timeout: float = 120.0) -> str:
    """Run `PREFIX agent ARGS` on the host and return its stdout (text); RemoteError (one line) on failure."""
    try:
        done = subprocess.run(
            host.argv(args),
            input=payload if payload is not None else b"",
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RemoteError(
            f"{host.dest}: no answer within {timeout:g} s (`{' '.join(args[:1])}`); check the host's load and network"
        ) from None
    except OSError as exc:
        raise RemoteError(f"cannot run ssh: {exc.strerror or exc}") from None
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        raise failure(host, done.returncode, stderr)
    return done.stdout.decode("utf-8", "replace")
