"""A fresh, isolated Python for code that must run without this project (the export tests' serve.py calls),
started once and forked per call: `FreshPython(cwd).run(code, cwd, *args)` answers as
`python -I -c FRESH_PRELUDE+code args` would, without paying for Python and torch's imports each time."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

FRESH_PRELUDE = """
import json, os, sys
# This project is installed editable in the venv: drop its import hook and the repository from the path,
# so that only torch (and onnxruntime) can serve.
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path[:] = [p for p in sys.path if not os.path.isfile(os.path.join(p or ".", "core", "runs", "export.py"))]
for name in ("core", "app"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{name} is importable: the test would prove nothing")
"""


# One fresh, isolated Python (-I, no PYTHONPATH, cwd outside the repository, -B: no bytecode written into the
# shared export folders) that runs the prelude and imports torch once, then forks a child per piece of code:
# each child starts from that state as a new `python -I -c PRELUDE+CODE` would, but without paying again for
# Python, torch and what torch.export.load and onnxruntime import on first use (seconds each; third-party
# modules only: the project stays out of reach). A child's stdout and stderr go to files its parent reads.
FORK_SERVER = (
    FRESH_PRELUDE
    + """
import importlib, tempfile, traceback
for name in ("torch", "torch._dynamo", "torch._export.serde.serialize", "networkx", "onnxruntime"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass

for line in sys.stdin:
    request = json.loads(line)
    with tempfile.TemporaryDirectory() as outputs:
        out, err = os.path.join(outputs, "out"), os.path.join(outputs, "err")
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                for fd, path in ((1, out), (2, err)):
                    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), fd)
                os.chdir(request["cwd"])
                sys.argv = ["-c", *request["args"]]
                exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if not isinstance(stop.code, (int, type(None))):
                    print(stop.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _pid, status = os.waitpid(pid, 0)
        with open(out, encoding="utf-8") as o, open(err, encoding="utf-8") as e:
            answer = {"returncode": os.waitstatus_to_exitcode(status), "stdout": o.read(), "stderr": e.read()}
    print(json.dumps(answer), flush=True)
"""
)


class FreshPython:
    """The fork server above, started on first use; `run(code, cwd, *args)` as `python -I -c PRELUDE+code`."""

    def __init__(self, cwd: Path):
        self.cwd, self.process = cwd, None

    def run(self, code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
        if self.process is None:
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", FORK_SERVER],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        request = {"code": FRESH_PRELUDE + code, "cwd": str(cwd), "args": list(args)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _w, _x = select.select([self.process.stdout], [], [], 180)
        line = self.process.stdout.readline() if ready else ""
        if not line:  # the server ended (its prelude refused) or the child hung
            said = self.close()
            raise AssertionError(f"the fresh Python gave no answer: {said[-2000:]}")
        answer = json.loads(line)
        return subprocess.CompletedProcess(args, answer["returncode"], answer["stdout"], answer["stderr"])

    def close(self) -> str:
        """End the server and any child of it still running; what the server wrote on stderr."""
        process, self.process = self.process, None
        if process is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        said = process.stderr.read()
        for pipe in (process.stdin, process.stdout, process.stderr):
            pipe.close()
        return said
