"""serve.py, the standalone module every export carries (core/runs/serve.py, copied byte for byte): it imports
nothing of this project; its command line answers a CSV file, JSON lines on stdin and HTTP requests for each
task, a bad line or request costs only itself (one line of JSON or stderr, never a traceback), and the HTTP
server refuses hostile requests (a body over the limit, malformed or nested JSON, NaN, wrong types, cut-short
bodies, unknown paths and methods) with the right status and goes on answering."""

from __future__ import annotations

import ast
import contextlib
import csv
import http.client
import io
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trained_runs import LESSONS, TASK_OPTIONS

from core.runs import serve

K = 3  # the recommender's lessons per history
DEADLINE = 180.0  # seconds a child process may take to load torch and the export on a busy machine

SERVE_PY = Path(serve.__file__).read_bytes()


@pytest.fixture(scope="module")
def exports(trained_exports):
    """task -> the program export of its shared run (read-only: tests/trained_runs.py's trained_exports)."""
    return lambda task: trained_exports(task, "program").folder


# ---- the module ---------------------------------------------------------------------------------------------------


def test_every_export_carries_the_module_byte_for_byte(exports):
    folder = exports("tiny")
    module_file = Path(serve.__file__)
    assert module_file == Path(__file__).resolve().parents[1] / "core" / "runs" / "serve.py"
    assert (folder / "serve.py").read_bytes() == module_file.read_bytes() == SERVE_PY


def test_the_module_imports_only_the_standard_library_and_torch():
    tree = ast.parse(Path(serve.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import: serve.py lies alone in an export folder"
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"torch", "numpy", "onnxruntime"}


def test_the_module_is_package_data_of_core_lab():
    from importlib.resources import files

    assert files("core.runs").joinpath("serve.py").is_file()
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'include = \[[^\]]*"core\*"', text)  # core.lab's .py files ship in the wheel


def same(got, want):
    """Answers alike: the same keys and values, floats to 1e-5 (a batch may round differently)."""
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
            assert got[key] == pytest.approx(value, abs=1e-5), key
        else:
            assert got[key] == value, key


# ---- rows and requests, in this process -------------------------------------------------------------------------


def point(value=0.5, **changes):
    row = {f"x{i}": value for i in range(1, 11)}
    row.update(changes)
    return row


@pytest.fixture(scope="module")
def tiny_rows(exports):
    return serve.Rows(serve.load(exports("tiny")))


@pytest.mark.parametrize(
    "row, error",
    [
        (point(x3="abc"), "x3 'abc' is not a number"),
        (point(x3=""), "x3 is empty"),
        (point(x3=True), "x3 is true/false, not a number"),
        (point(x3=[1]), "x3 is a list, not a number"),
        (point(x3=None), "x3 is null, not a number"),
        (point(x3=1e39), "not a finite float32 number"),
        (point(x3=10**400), "not a finite float32 number"),
        (point(x3="inf"), "is not a number"),
        ({k: v for k, v in point().items() if k != "x7"}, "no x7 column"),
        ("a string", "a row is an object of column: value, not a string"),
        ({"x" * 10_000: 1}, "no x1 column"),
    ],
)
def test_a_bad_row_is_named_and_the_others_answered(tiny_rows, row, error):
    good = point(0.25)
    upper = {name.upper(): value for name, value in point(0.75).items()}  # names compare as predict's do
    answers = tiny_rows.answer([good, row, upper])
    assert isinstance(answers[1], serve.RowError) and error in str(answers[1])
    for answer in (answers[0], answers[2]):
        assert set(answer) == {"p0", "p1", "predicted"} and answer["p0"] + answer["p1"] == pytest.approx(1)
    same(answers[0], tiny_rows.answer([good])[0])


@pytest.mark.parametrize(
    "text, error",
    [
        ('{"x1": NaN}', "NaN is not a JSON number"),
        ('{"x1": -Infinity}', "-Infinity is not a JSON number"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"x1": ', "not JSON"),
        ("", "not JSON"),
        ("1" * 5000, "not JSON"),  # more digits than int() takes
    ],
)
def test_json_that_is_not_strict_or_too_deep_is_refused(text, error):
    with pytest.raises(serve.RowError, match=error) as caught:
        serve.parse_json(text)
    assert "\n" not in str(caught.value)


def test_json_lines_answer_each_line_in_order(tiny_rows):
    lines = [
        json.dumps(point(0.1)),
        '{"x1": ',
        "",
        json.dumps([point(0.2), point(0.3)]),
        "[]",
        json.dumps([point(0.2), point(x2="?")]),
        "\xff",
        json.dumps("text"),
        json.dumps(point(0.4)),
    ]
    data = "\n".join(lines).encode("utf-8").replace("\xff".encode(), b"\xff") + b"\n" + b"{" * 2000 + b"\n"
    out = io.StringIO()
    serve.serve_json_lines(tiny_rows, io.BytesIO(data), out, limit=1000, one_at_a_time=False)
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(got) == len(lines)  # the blank line is skipped; the line over the limit is answered
    same(got[0], tiny_rows.answer([point(0.1)])[0])
    assert got[1] == {"line": 2, "error": got[1]["error"]} and got[1]["error"].startswith("not JSON")
    assert len(got[2]) == 2 and got[3] == []
    for answer, wanted in zip(got[2], tiny_rows.answer([point(0.2), point(0.3)])):
        same(answer, wanted)
    assert got[4] == {"line": 6, "error": "row 1: x2 '?' is not a number"}
    assert got[5] == {"line": 7, "error": "not UTF-8 text"}
    assert got[6]["line"] == 8 and "not a string" in got[6]["error"]
    same(got[7], tiny_rows.answer([point(0.4)])[0])
    assert got[8] == {"line": 10, "error": "more than 1,000 bytes (--max-request-bytes)"}


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.org", False),
    ],
)
def test_only_loopback_addresses_go_without_a_warning(host, loopback):
    assert serve.is_loopback(host) is loopback


# ---- the command line, in a child process ---------------------------------------------------------------------


def fresh_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def run_serve(folder: Path, *args, stdin: bytes = b"", cwd: Path) -> subprocess.CompletedProcess:
    """`python -I FOLDER/serve.py ARGS` (no PYTHONPATH, outside the repository)."""
    return subprocess.run(
        [sys.executable, "-I", str(folder / "serve.py"), *map(str, args)],
        input=stdin,
        check=False,
        cwd=cwd,
        env=fresh_env(),
        capture_output=True,
        timeout=DEADLINE,
    )


def serve_here(folder: Path, *args, stdin: bytes = b"", capsys, monkeypatch) -> subprocess.CompletedProcess:
    """serve.py's command line in this process (`main`, the same module byte for byte), as run_serve reports a
    child's: the script in a child process of its own is test_help_and_usage_errors_are_one_line's and the HTTP
    tests'."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    code = serve.main([*map(str, args), "--export", str(folder)])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out.encode(), out.err.encode())


def good_rows(task):
    """Three rows of the task's input columns, as JSON objects."""
    if task == "tiny":
        return [point(v) for v in (-1.0, 0.25, 2.5)]
    if task == "sentiment":
        return [
            {"text": t} for t in ("Clear and useful, not boring at all.", "I didn't like it: confusing", "Great lesson")
        ]
    if task == "recommender":
        return [
            {"user_id": "u1", "history": f"{LESSONS[3]} {LESSONS[4]}"},
            {"user_id": "u2", "history": str(LESSONS[7])},
            {"user_id": "u3", "history": f"{LESSONS[0]},{LESSONS[5]},{LESSONS[1]}"},
        ]
    width = TASK_OPTIONS["ranking"]["features"]
    return [
        {"query_id": "q1", "doc_id": f"d{j}", **{f"f{i}": (i * j) % 5 - 1.5 for i in range(1, width + 1)}}
        for j in range(3)
    ]


BAD = {
    "tiny": ("x3", "abc", "x3 'abc' is not a number"),
    "sentiment": ("text", " ", "text is empty"),
    "recommender": ("history", "", "history is empty"),
    "ranking": ("f2", "1e999", "not a finite float32"),
}


def expected(served, task, row):
    """What the library's own predict() answers for one row (the command line must agree)."""
    if task == "tiny":
        p = served.predict([[row[f"x{i}"] for i in range(1, 11)]])[0]
        return {"p0": p[0], "p1": p[1], "predicted": int(p[1] > p[0])}
    if task == "sentiment":
        p = served.predict([row["text"]])[0]
        return {"p_positive": p, "predicted": "positive" if p >= 0.5 else "negative"}
    if task == "recommender":
        top = served.predict([row["history"]], k=K)[0]
        return {"user_id": row["user_id"], "items": [i for i, _s in top], "scores": [s for _i, s in top]}
    width = TASK_OPTIONS["ranking"]["features"]
    score = served.predict([[row[f"f{i}"] for i in range(1, width + 1)]])[0]
    return {"query_id": row["query_id"], "doc_id": row["doc_id"], "score": score}


@pytest.mark.parametrize("task", list(TASK_OPTIONS))
def test_csv_and_json_lines_are_answered_with_a_bad_line_among_good_ones(exports, tmp_path, task, capsys, monkeypatch):
    folder = exports(task)
    served = serve.load(folder)
    rows = good_rows(task)
    column, value, why = BAD[task]
    bad = {**rows[1], column: value}
    want = [expected(served, task, row) for row in rows]

    # CSV: a header, good rows around a bad one and a blank line; predictions on stdout, the bad line on stderr
    header = list(rows[0])
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerows([header, [rows[0][c] for c in header], [bad[c] for c in header], []])
        writer.writerows([[row[c] for c in header] for row in rows[1:]])
    done = serve_here(folder, path, "--k", K, capsys=capsys, monkeypatch=monkeypatch)
    err = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in err, err
    reported = err.splitlines()
    assert len(reported) == 1 and reported[0].startswith("line 3: ") and why in reported[0], err
    table = list(csv.DictReader(io.StringIO(done.stdout.decode())))
    lines = [2, 5, 6]  # the header is line 1, the bad row line 3, the blank line 4
    if task == "recommender":
        for line, answer in zip(lines, want):
            mine = [r for r in table if r["line"] == str(line)]
            assert [r["rank"] for r in mine] == [str(n) for n in range(1, K + 1)]
            assert {r["user_id"] for r in mine} == {answer["user_id"]}
            assert [r["item_id"] for r in mine] == [str(i) for i in answer["items"]]
            assert [float(r["score"]) for r in mine] == pytest.approx(answer["scores"], abs=1e-5)
        assert len(table) == K * len(lines)
    else:
        assert [int(r.pop("line")) for r in table] == lines
        for got, answer in zip(table, want):
            same({k: type(answer[k])(v) for k, v in got.items()}, answer)

    # JSON lines on stdin: one answer line per line, the bad one answered with its error
    stdin = "\n".join([json.dumps(rows[0]), json.dumps(bad), "", json.dumps(rows[1:]), "{oops", "[]"]) + "\n"
    done = serve_here(folder, "-", "--k", K, stdin=stdin.encode(), capsys=capsys, monkeypatch=monkeypatch)
    assert done.returncode == 0 and done.stderr.decode() == "", done.stderr.decode()
    got = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(got) == 5
    same(got[0], want[0])
    assert got[1] == {"line": 2, "error": got[1]["error"]} and why in got[1]["error"]
    assert len(got[2]) == 2
    for answer, answer_wanted in zip(got[2], want[1:]):
        same(answer, answer_wanted)
    assert got[3]["line"] == 5 and got[3]["error"].startswith("not JSON")
    assert got[4] == []


@pytest.mark.slow
def test_help_and_usage_errors_are_one_line(tmp_path):
    (tmp_path / "serve.py").write_bytes(SERVE_PY)  # a folder with no export: help needs none
    done = run_serve(tmp_path, "--help", cwd=tmp_path)
    out = done.stdout.decode()
    assert done.returncode == 0 and "--http HOST:PORT" in out and "python serve.py rows.csv" in out
    assert "--max-request-bytes" in out and "python serve.py --http 127.0.0.1:8000" in out
    for args, message in [
        ((), "give INPUT"),
        (("rows.txt",), "give a .csv or .jsonl file"),
        (("missing.csv",), "missing.csv: no such file"),
        (("-",), "no manifest.json: name the export folder with --export FOLDER"),
        (("--http", "nowhere"), "no manifest.json"),
    ]:
        done = run_serve(tmp_path, *args, cwd=tmp_path)
        err = done.stderr.decode()
        assert done.returncode == 2 and message in err and "Traceback" not in err, err
        assert len([line for line in err.splitlines() if "serve.py: " in line]) == 1


# ---- HTTP ----------------------------------------------------------------------------------------------------------


class Server:
    """serve.py --http on a port the OS picks on 127.0.0.1, its stderr read as it comes."""

    def __init__(self, folder: Path, cwd: Path, *args):
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(folder / "serve.py"), "--http", "127.0.0.1:0", *map(str, args)],
            cwd=cwd,
            env=fresh_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.port = self._port()
        except BaseException:
            self.stop()
            raise

    def _read(self):
        for line in self.process.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def _port(self) -> int:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            assert line is not None, f"the server ended: {''.join(self.log)}"
            self.log.append(line)
            found = re.search(r"serving the \w+ model on http://127\.0\.0\.1:(\d+) ", line)
            if found:
                return int(found.group(1))
        raise AssertionError(f"the server did not start within {DEADLINE:.0f} s: {''.join(self.log)}")

    def request(self, method, path, body=None, headers=None):
        """(status, headers, JSON body) of one request on a connection of its own."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), json.loads(response.read())
        finally:
            conn.close()

    def raw(self, data: bytes, close_write=True):
        """(status, JSON body) for bytes written to the socket as they are."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            s.sendall(data)
            if close_write:
                s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(1 << 16):
                chunks.append(chunk)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(body)

    def healthy(self):
        status, _headers, body = self.request("GET", "/health")
        return status == 200 and body["status"] == "ok" and self.process.poll() is None

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=60)
        while (line := self.lines.get(timeout=60)) is not None:
            self.log.append(line)
        self.process.stderr.close()
        return "".join(self.log)


HOSTILE = {
    "tiny": {
        "good": point(0.5),
        "string": point(x4="four"),
        "missing": {"x1": 1.0},
        "nan": '{"x1": NaN}',
        "infinity": json.dumps(point()).replace("0.5}", "Infinity}"),
        "errors": ("x4 'four' is not a number", "no x2 column"),
    },
    "sentiment": {
        "good": {"text": "Great lesson"},
        "string": {"text": 5},
        "missing": {"body": "Great"},
        "nan": '{"text": NaN}',
        "infinity": '[{"text": "ok"}, {"text": Infinity}]',
        "errors": ("text is a number, not a string", "no text column"),
    },
}


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", list(HOSTILE))
def test_the_http_server_refuses_hostile_requests_and_goes_on_answering(trained_exports, tmp_path, task):
    folder = trained_exports(task, "program").folder
    case = HOSTILE[task]
    served = serve.load(folder)
    server = Server(folder, tmp_path, "--timeout", 5)
    stalled: dict = {}

    def stall():
        try:
            stalled["answer"] = server.raw(b"POST /predict HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", close_write=False)
        except BaseException as exc:
            stalled["error"] = exc

    try:
        assert server.healthy()
        # a client that stops sending mid-body: answered once the timeout (5 s) passes, not held forever, and
        # meanwhile the requests below are answered (a connection has a thread of its own)
        client = threading.Thread(target=stall, daemon=True)
        client.start()
        status, _h, body = server.request("POST", "/predict", json.dumps(case["good"]))
        assert status == 200
        same(body, expected(served, task, case["good"]))
        status, _h, body = server.request("POST", "/predict", json.dumps([case["good"], case["good"]]))
        assert status == 200 and len(body) == 2
        same(body[1], body[0])

        def refused(status, body, want_status, *words):
            assert status == want_status and set(body) == {"error"}, body
            assert "\n" not in body["error"] and all(w in body["error"] for w in words), body
            assert server.healthy()  # the server lives on, and answers the next request

        string_error, missing_error = case["errors"]
        refused(*server.request("POST", "/predict", b"x" * (2 << 20))[::2], 413, "more than 1,048,576")
        refused(*server.raw(b"POST /predict HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\n"), 413)
        refused(*server.request("POST", "/predict", b'{"text": ')[::2], 400, "not JSON")
        refused(*server.request("POST", "/predict", json.dumps(case["string"]))[::2], 400, string_error)
        refused(*server.request("POST", "/predict", json.dumps(case["missing"]))[::2], 400, missing_error)
        refused(
            *server.request("POST", "/predict", json.dumps([case["good"], case["string"]]))[::2],
            400,
            "row 1: ",
            string_error,
        )
        refused(*server.request("POST", "/predict", "[" * 100_000 + "]" * 100_000)[::2], 400, "nested too deeply")
        refused(*server.request("POST", "/predict", case["nan"])[::2], 400, "NaN is not a JSON number")
        refused(*server.request("POST", "/predict", case["infinity"])[::2], 400, "Infinity is not a JSON number")
        refused(*server.request("POST", "/predict", b"\xff\xfe")[::2], 400, "not UTF-8")
        refused(*server.request("POST", "/predict", json.dumps("a string"))[::2], 400, "not a string")
        assert server.request("POST", "/predict", "[]")[::2] == (200, [])  # an empty batch: no answers
        refused(*server.request("GET", "/nowhere")[::2], 404, "POST /predict or GET /health")
        refused(*server.request("POST", "/health", "{}")[::2], 405, "/health takes GET")
        status, headers, body = server.request("GET", "/predict")
        assert headers["Allow"] == "POST"
        refused(status, body, 405, "/predict takes POST")
        refused(*server.request("DELETE", "/predict")[::2], 405)
        refused(
            *server.raw(b"POST /predict HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b'{"x1": 1'),
            400,
            "ended after 8 of its 100 bytes",
        )
        refused(*server.raw(b"POST /predict HTTP/1.1\r\nContent-Length: ten\r\n\r\n"), 400, "Content-Length")
        refused(*server.raw(b"POST /predict HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"), 400)
        refused(*server.raw(b"POST /predict HTTP/1.1\r\n\r\n"), 411, "Content-Length")
        refused(
            *server.raw(b"POST /predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
            411,
            "chunked",
        )
        refused(*server.raw(b"\x16\x03\x01 not http at all\r\n\r\n"), 400)
        client.join(timeout=120)
        assert not client.is_alive(), "the stalled client got no answer"
        if "error" in stalled:
            raise stalled["error"]
        refused(*stalled["answer"], 408, "did not arrive within 5 s")
        status, _h, body = server.request("POST", "/predict", json.dumps(case["good"]))
        assert status == 200 and server.process.poll() is None
    finally:
        log = server.stop()
    assert "Traceback" not in log, log


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends on `sock` until it closes it (a reset after the answer ends it too)."""
    chunks = []
    try:
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.timeout(600)
def test_slow_clients_cannot_hold_the_server_and_head_health_is_bare(trained_exports, tmp_path):
    """More slow clients than --max-connections, each sending a header byte every 0.2 s (never silent for
    --timeout): those beyond the cap, and a normal request, are answered 503 at once; the others are dropped once
    --timeout has passed, and the server answers again."""
    server = Server(trained_exports("tiny", "program").folder, tmp_path, "--timeout", 10, "--max-connections", 3)
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=120) for _ in range(5)]
    trickling = threading.Event()

    def trickle():
        while not trickling.wait(0.2):
            for s in slow[:3]:
                with contextlib.suppress(OSError):
                    s.send(b"a")

    try:
        for s in slow[:3]:
            s.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        threading.Thread(target=trickle, daemon=True).start()
        for s in slow[3:]:  # beyond the cap: answered and closed, no thread of their own
            assert answer_of(s).startswith(b"HTTP/1.0 503 "), "a connection beyond the cap was not refused"
        status, headers, body = server.request("GET", "/health")
        assert status == 503 and "--max-connections" in body["error"] and headers["Retry-After"] == "1", body
        for s in slow[:3]:  # dropped while they still trickle in (a silent-connection timeout never fires)
            assert not answer_of(s).startswith(b"HTTP/1.0 200"), "a slow client was answered"
        assert server.healthy()
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
            s.sendall(b"HEAD /health HTTP/1.0\r\n\r\n")
            head, _, body = answer_of(s).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200 ") and body == b"", (head, body)
    finally:
        trickling.set()
        for s in slow:
            s.close()
        log = server.stop()
    assert "Traceback" not in log and "busy: 503" in log, log
