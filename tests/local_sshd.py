"""An sshd of one's own on 127.0.0.1, for tests/test_remote_ssh.py and benchmarks/remote_latency.py: a host key
and a user key made in a temp folder, a free port, and a client ssh config (`ssh -F`) naming that key and a
known_hosts that holds the host key, so host key checking stays on. Nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class NoSshd(Exception):
    """This machine has no sshd, ssh or ssh-keygen; str() says what to install."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalSshd:
    process: subprocess.Popen
    folder: Path
    config: Path  # the client's ssh config (-F): Host amp-test (the sshd) and amp-closed (a closed port)
    dest: str = "amp-test"
    closed_dest: str = "amp-closed"

    def remote_command(self, runs: Path) -> str:
        """How the host runs this checkout's amp-console: the prefix a user with a venv there would give."""
        return (
            f"cd {ROOT} && env PYTHONPATH={ROOT} OMP_NUM_THREADS=1 AMP_CONSOLE_RUNS_DIR={runs} "
            f"{sys.executable} -m core.cli"
        )

    def stop(self) -> None:
        """Stop sshd, and end every run still going that was started through it: a remote run is detached
        from ssh by design (it outlives the connection), so a test that failed midway would leave it training
        for ever. Such a run names its folder, under this sshd's folder, on its command line."""
        import psutil

        self.process.terminate()
        self.process.wait(30)
        mine = str(self.folder)
        for process in psutil.process_iter(["cmdline"]):
            try:
                if any(mine in part for part in process.info["cmdline"] or ()):
                    process.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def start_sshd(folder: Path, timeout: float = 30.0) -> LocalSshd:
    daemon = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    keygen = shutil.which("ssh-keygen")
    if daemon is None or keygen is None or shutil.which("ssh") is None:
        raise NoSshd("no sshd, ssh or ssh-keygen on this machine (apt install openssh-server openssh-client)")
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):  # sshd run as root wants its privsep folder
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    for key in ("host_key", "user_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    port, closed = free_port(), free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\n"
        f"PidFile {folder / 'sshd.pid'}\nPermitRootLogin prohibit-password\nAllowTcpForwarding no\n"
        f"X11Forwarding no\nLogLevel ERROR\nAcceptEnv PYTHONPATH\n"  # `SetEnv`: tests/test_remote_install.py
    )
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {(folder / 'host_key.pub').read_text()}")
    common = (
        f"  HostName 127.0.0.1\n  User {getpass.getuser()}\n  IdentityFile {folder / 'user_key'}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n"
        f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
    )
    config = folder / "ssh_config"
    config.write_text(f"Host amp-test\n  Port {port}\n{common}Host amp-closed\n  Port {closed}\n{common}")
    with open(folder / "sshd.log", "wb") as log:
        process = subprocess.Popen([daemon, "-D", "-f", str(folder / "sshd_config"), "-e"], stdout=log, stderr=log)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited: {(folder / 'sshd.log').read_text().strip()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return LocalSshd(process, folder, config)
        if time.monotonic() > deadline:
            process.terminate()
            raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {timeout:g} s")
        time.sleep(0.05)
