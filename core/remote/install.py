"""`amp-console remote install HOST`: this checkout's amp-console, built as a wheel here, copied over the user's ssh and
installed into a venv on the host (`~/.amp-console/venv`, where Host's default command looks first)."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from core import __version__
from core.remote.ssh import VENV, Host, RemoteError, failure
from core.text import first_line, printable

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "core", "app", "resources")  # what the wheel is built from


def torch_pin() -> str:
    """`torch==X.Y.Z`, this machine's torch version without its local label (+cpu, +cu126: the host's index decides)."""
    try:
        return "torch==" + version("torch").split("+")[0]
    except PackageNotFoundError:
        return "torch"


def build_wheel(out: Path) -> Path:
    """This checkout's wheel (pip wheel --no-deps, from a copy: the checkout gets no build/ or egg-info)."""
    if not (ROOT / "pyproject.toml").is_file():
        raise RemoteError(f"{ROOT} is not an amp-console checkout (no pyproject.toml): no wheel to build for the host")
    src = out / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    offline = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []  # the local setuptools
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline, "-w", str(out / "dist"), str(src)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wheels = sorted((out / "dist").glob("amp_console-*.whl"))
    if done.returncode or not wheels:
        raise RemoteError(f"the wheel of {ROOT} was not built: {first_line(done.stderr.strip()) or 'no wheel'}")
    return wheels[0]


def install(
    host: Host,
    python: str = "python3",
    venv: str = "~/" + VENV,
    torch_spec: str | None = None,
    system_site_packages: bool = False,
    on_progress: Callable[[str], None] | None = None,
    timeout: float = 3600.0,
) -> str:
    """Install this amp-console (with `torch_spec`, default this machine's torch version) into `venv` on the host, made
    with `python -m venv` (the host's shell command); returns the installed version's line. RemoteError on failure."""
    say = on_progress or (lambda _text: None)
    where = f'"$HOME"/{shlex.quote(venv[2:])}' if venv.startswith("~/") else shlex.quote(venv)
    spec = torch_spec or torch_pin()
    with tempfile.TemporaryDirectory() as tmp:
        say(f"building the wheel of amp-console {__version__} from {ROOT}")
        wheel = build_wheel(Path(tmp))
        say(f"installing it into {host.dest}:{venv} ({python} -m venv; pip install {spec}: minutes for a new torch)")
        script = "\n".join(
            [
                "set -e",
                f"venv={where}",
                "t=$(mktemp -d); trap 'rm -rf \"$t\"' EXIT",
                f'cat > "$t"/{wheel.name}',
                f'{python} -m venv {"--system-site-packages " if system_site_packages else ""}"$venv"',
                '"$venv"/bin/python -m pip uninstall -y -q amp-console >/dev/null 2>&1 || true',
                f'"$venv"/bin/python -m pip install -q --disable-pip-version-check "$t"/{wheel.name} {shlex.quote(spec)}',
                '"$venv"/bin/python -c "import core; print(core.__version__)"',
            ]
        )
        argv = host.argv([])
        argv[-1] = "sh -c " + shlex.quote(script)  # the same ssh, options and host; no agent there yet
        try:
            done = subprocess.run(argv, input=wheel.read_bytes(), capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{host.dest}: the install took over {timeout:g} s; check the host's network") from None
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode == 255:
        raise failure(host, 255, stderr)
    if done.returncode:
        lines = [line for line in stderr.splitlines() if line.strip()]
        raise RemoteError(
            f"{host.dest}: the install failed: {printable(lines[-1].strip()) if lines else done.returncode}"
        )
    answer = done.stdout.decode("utf-8", "replace").split()
    return printable(answer[-1]) if answer else "?"
