"""`remote devices HOST`: the host imports torch to list its devices, the client never does (seconds at load):
DeviceInfo and the parsing of an `agent info` answer are torch-free, torch is imported where a device is probed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.devices import cpu_info

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys
import core.remote.ssh as ssh
answer = sys.argv[1]
ssh.run = lambda host, args, payload=None, timeout=120.0: "motd\n" + answer
from core.cli.main import main
status = main(["remote", "devices", "gpu-box", "--json"])
print(json.dumps({"status": status, "torch": "torch" in sys.modules}))
"""


@pytest.mark.slow  # a fresh interpreter: the only way to see what an import loads
def test_remote_devices_parses_the_hosts_answer_without_torch():
    device = cpu_info().to_dict() | {"name": "Host CPU"}
    answer = {"version": "9.9", "host": "box", "runs_root": "/r", "devices": [device]}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(answer)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    *shown, last = out.stdout.strip().splitlines()
    assert json.loads(last) == {"status": 0, "torch": False}
    parsed = json.loads("\n".join(shown))
    assert parsed["devices"] == [device] and parsed["version"] == "9.9"
