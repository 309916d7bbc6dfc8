"""A host's `agent info` answer is untrusted data: an unknown device field, a value of another type, a nested
value or control characters give one line naming the field (or are shown escaped), never a traceback."""

from __future__ import annotations

import json

import pytest
from cli_in_process import cli

from core.remote import ssh
from core.remote.agent import info
from core.remote.client import parse_info
from core.remote.ssh import RemoteError


def answer(**device) -> dict:
    """This machine's own `agent info` answer, its first device changed by `device` (None: the field dropped)."""
    data = info()
    first = data["devices"][0]
    for name, value in device.items():
        first.pop(name) if value is None else first.__setitem__(name, value)
    return data


@pytest.mark.parametrize(
    "device, words",
    [
        ({"npu_cores": 4}, "device 0's 'npu_cores' is a field this version does not know"),
        ({"memory_total": "lots"}, "device 0's 'memory_total' is \"lots\""),
        ({"memory_total": -1}, "'memory_total' is -1"),
        ({"bf16": "yes"}, "'bf16' is \"yes\""),
        ({"precisions": ["fp32", {"x": 1}]}, "'precisions' holds values that are not text"),
        ({"details": {"nested": [1, 2]}}, "'details' is not flat"),
        ({"name": None}, "device 0 has no 'name'"),
    ],
)
def test_an_unexpected_device_field_is_one_line_naming_it(capsys, monkeypatch, device, words):
    crafted = json.dumps(answer(**device))
    monkeypatch.setattr(ssh, "run", lambda *args, **kwargs: f"noise\n{crafted}\n")
    code, out, err = cli(capsys, "remote", "devices", "gpu-box")
    assert code != 0 and out == "" and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "gpu-box: its `agent info` answer is not understood" in err, err
    assert words in err, err


def test_other_answers_are_refused_and_text_is_shown_escaped():
    for crafted in ([], {"devices": "cpu"}, {**answer(), "version": 2}, {**answer(), "devices": [1]}):
        with pytest.raises(RemoteError, match="not understood"):
            parse_info("gpu-box", crafted)
    shown = parse_info("gpu-box", {**answer(name="\x1b]0;owned\x07CPU"), "host": "box\x1b[2J"})
    assert shown.devices[0].name == "\\x1b]0;owned\\x07CPU" and shown.hostname == "box\\x1b[2J"
    assert shown.devices[0].precisions == tuple(info()["devices"][0]["precisions"])
