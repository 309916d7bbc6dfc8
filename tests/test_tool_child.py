"""core.lab.tool_child, the device tools' child process: an answer with its progress before it, the error's own
type back across the pipe, and a parent that goes away stops the work under way (the child does not run on)."""

from __future__ import annotations

import json
import subprocess

import pytest

from core.config import RunConfig
from core.errors import ConfigError
from core.lab.tool_child import COMMAND
from core.process import JsonChild, child_environment

pytestmark = pytest.mark.slow  # each test starts a Python process


def request(tool: str, config: RunConfig, **kwargs) -> str:
    return json.dumps({"method": "run", "args": [tool, config.to_dict(), kwargs], "kwargs": {}}) + "\n"


def test_a_tool_answers_after_its_progress_and_an_error_keeps_its_type():
    child = JsonChild(COMMAND, "tiny")
    try:
        seen: list = []
        config = RunConfig(task="tiny", device="cpu")
        result = child.call("run", "lr_finder", config.to_dict(), {"steps": 12}, progress=seen.append, limit=600)
        assert type(result).__name__ == "LRFinderResult" and result.task == "tiny"
        assert len(seen) >= 12 and type(seen[-1]).__name__ == "LRFinderProgress"
        with pytest.raises(ConfigError) as raised:  # a bad setting: the child's ConfigError, its field kept
            child.call("run", "inspector", config.to_dict() | {"batch_size": 0}, {}, limit=600)
        assert raised.value.field == "batch_size" and "batch_size" in str(raised.value)
    finally:
        child.close()


@pytest.mark.timeout(300)
def test_the_end_of_its_stdin_stops_the_work_under_way():
    config = RunConfig(task="tiny", device="cpu")
    with subprocess.Popen(
        COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_environment()
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(request("lr_finder", config, steps=100_000))
        child.stdin.flush()
        assert "progress" in json.loads(child.stdout.readline())  # it is measuring
        child.stdin.close()  # the window is gone
        answer = {}
        while "result" not in answer:  # progress lines until the stopped tool answers
            answer = json.loads(child.stdout.readline() or '{"result": null}')
        assert child.wait(timeout=240) == 0
    result = answer["result"]["__object__"]
    assert result["steps_run"] < 100_000 and result["stopped_early"], result
