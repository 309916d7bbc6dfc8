"""The installed task package of tests/fixtures/user_tasks/pkg, installed as pip would lay it out (the package
and a dist-info naming its entry points, read from its pyproject.toml) into a folder to put on sys.path: no
network, no build. Its modules write <module>.ran beside themselves when they are imported (proof that they
ran)."""

from __future__ import annotations

import shutil
from pathlib import Path

import tomllib

PACKAGE = Path(__file__).resolve().parent / "fixtures" / "user_tasks" / "pkg"
MARKER = "\nfrom pathlib import Path as _P\n_P(__file__).with_suffix('.ran').touch()\n"


def install_task_package(target: Path) -> Path:
    """Install the fixture package into `target` (a folder to prepend to sys.path); the package's folder there."""
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    installed = target / "amp_example_tasks"
    shutil.copytree(PACKAGE / "amp_example_tasks", installed)
    for module in installed.glob("*.py"):
        module.write_text(module.read_text() + MARKER)
    info = target / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
        for group, points in project["entry-points"].items()
    ]
    (info / "entry_points.txt").write_text("\n".join(lines))
    (info / "RECORD").write_text("")
    return installed
