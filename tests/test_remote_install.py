"""The remote box from the CLI as from the window, over the session's sshd on 127.0.0.1 (tests/local_sshd.py):
`remote install` builds this checkout's wheel, copies it over ssh and installs it into a venv there whose agent
answers; `remote start` takes train's flags over a run's own config.toml (its local out_dir left out, said once);
`control` over ssh loads no torch on either side."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from core import __version__
from core.cli.main import main
from tests.test_remote_ssh import sshd  # noqa: F401 (the session's sshd, a fixture)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
OWN = ("amp_console", "__editable__", "pip", "setuptools", "wheel", "_distutils_hack", "_virtualenv")


def host_packages(tmp_path: Path) -> Path:
    """This venv's packages (torch...) but amp-console's own and pip's, linked in one folder: the host's venv sees
    them through PYTHONPATH (ssh SetEnv), so pip has nothing to download and the test stays offline."""
    links = tmp_path / "host_packages"
    links.mkdir()
    packages = Path(next(p for p in site.getsitepackages() if p.startswith(sys.prefix)))
    for entry in packages.iterdir():
        if not entry.name.startswith(OWN) and entry.suffix != ".pth":
            (links / entry.name).symlink_to(entry)
    return links


@pytest.mark.timeout(900)
def test_remote_install_puts_this_version_in_a_venv_whose_agent_answers(sshd, tmp_path, capsys):
    venv = tmp_path / "venv"
    ssh = ["--ssh-config", str(sshd.config), "--ssh-option", f"SetEnv=PYTHONPATH={host_packages(tmp_path)}"]
    python = getattr(sys, "_base_executable", sys.executable)
    code = main(
        ["remote", "install", "amp-test", "--venv", str(venv), "--python", python, "--system-site-packages", *ssh]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "building the wheel of amp-console" in err and "pip install torch==" in err
    assert out.strip() == (
        f"amp-console {__version__} installed in amp-test:{venv}; try `amp-console remote devices amp-test "
        f"--remote-command {venv}/bin/amp-console`"
    )
    assert list(venv.glob("lib/python3*/site-packages/core/remote/install.py"))  # the wheel's copy, not the checkout
    assert not (ROOT / "build").exists()  # the wheel was built from a copy
    code = main(["remote", "devices", "amp-test", "--json", "--remote-command", f"{venv}/bin/amp-console", *ssh])
    out, err = capsys.readouterr()
    assert code == 0, err
    info = json.loads(out)
    assert info["version"] == __version__ and info["devices"][0]["type"] == "cpu"


def test_remote_start_takes_train_flags_over_a_runs_own_config(sshd, tmp_path, capsys):
    config = tmp_path / "config.toml"  # as a run's folder holds it: out_dir is this machine's
    config.write_text(
        f'task = "tiny"\ndevice = "cpu"\nprecision = "fp32"\nmax_steps = 100000\nout_dir = "{tmp_path / "here"}"\n'
    )
    flags = ["--ssh-config", str(sshd.config), "--remote-command", sshd.prefix]
    code = main(
        ["remote", "start", "amp-test", "--config", str(config), "--max-steps", "6", "--log-interval", "3", "--watch"]
        + ["--lr", "0.02", *flags]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"{config}: its out_dir is a folder here, ignored: the run gets one under the host's runs root" in err
    folder = Path(out.splitlines()[0].removeprefix("amp-test:"))
    assert folder.parent == sshd.runs and not (tmp_path / "here").exists()
    settings = json.loads((folder / "run.json").read_text())["config"]
    assert settings["max_steps"] == 6 and settings["lr"] == 0.02 and settings["log_interval"] == 3


def test_control_over_ssh_loads_no_torch_on_either_side(sshd, tmp_path):
    """A pause is an ssh round trip and two light start-ups: neither this side nor the host's agent imports torch."""
    (tmp_path / "run").mkdir()
    probe = (
        "import sys\nfrom core.cli.main import main\n"
        f"main(['control', 'amp-test:{tmp_path / 'run'}', 'pause', '--timeout', '1', '--ssh-config', "
        f"{str(sshd.config)!r}, '--remote-command', {sshd.prefix!r}])\n"
        "here = 'torch' in sys.modules\n"
        f"main(['agent', 'control', {str(tmp_path / 'run')!r}, 'pause', '--timeout', '1'])\n"
        "print('torch' in sys.modules, here)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "False"], done.stderr
    assert done.stderr.count("no live run holds") == 2  # both sides answered, as a pause of no run does


def test_another_version_on_the_host_names_the_install_command():
    from core.remote.agent import AgentError, check_version

    with pytest.raises(
        AgentError, match=r"the caller 0\.0\.1: install the caller's version here \(`amp-console remote"
    ):
        check_version("0.0.1")
