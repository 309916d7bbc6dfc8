"""`remote devices HOST`: the host imports torch to list its devices, the client never does (seconds at load):
DeviceInfo and the parsing of an `agent info` answer are torch-free, torch is imported where a device is probed."""

from __future__ import annotations

import json
import os
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


def test_the_host_answers_its_last_probe_until_what_it_depends_on_changes(tmp_path, monkeypatch):
    """`agent info` lists devices from the last probe (no torch to import) while Python, torch, the driver and the
    visible-device variables are the same; a CUDA device's free memory is read from nvidia-smi each time."""
    import core.devices
    from core.devices import DeviceInfo
    from core.remote import agent

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = DeviceInfo("cuda:0", "cuda", "H100", 80 << 30, memory_free=70 << 30, details={"pci": "0000:17:00"})
    probes = []
    monkeypatch.setattr(core.devices, "list_devices", lambda free_memory=False: probes.append(1) or [cpu_info(), gpu])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '00000000:17:00.0, 1024'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    first = agent.devices()
    assert len(probes) == 1 and first[1]["memory_free"] == 70 << 30  # the probe's own figure
    again = agent.devices()
    assert len(probes) == 1 and again[1]["memory_free"] == 1024 << 20  # kept list, free memory read now
    assert again[0] == first[0] and again[1]["name"] == "H100"
    smi.unlink()  # no nvidia-smi: unknown, never the probe's old figure
    assert agent.devices()[1]["memory_free"] is None and len(probes) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # another device set: probed again
    agent.devices()
    assert len(probes) == 2
    agent.devices(refresh=True)
    assert len(probes) == 3


@pytest.mark.slow  # a fresh interpreter: the only way to see what an import loads
def test_a_second_agent_info_imports_no_torch(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    probe = "import sys; from core.remote import agent; agent.info(); print('torch' in sys.modules)"
    answers = [
        subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
        for _ in range(2)
    ]
    assert [a.stdout.strip() for a in answers] == ["True", "False"], answers[1].stderr
