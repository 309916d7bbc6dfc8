"""`amp-console` with no display says so in one line instead of Qt aborting with its plugin dump."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="other systems always have a display")
def test_no_display_is_one_line_and_exit_2():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    code = (
        "import sys\nfrom app.launcher import main\nrc = main([])\n"
        "assert 'PySide6' not in sys.modules, 'Qt was loaded'\nsys.exit(rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display to open the window on" in lines[0]
    assert "Traceback" not in result.stderr
