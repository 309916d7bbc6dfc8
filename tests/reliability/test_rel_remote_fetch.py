"""A host's answers read as crafted input, over a real sshd on 127.0.0.1: a host (here a script standing in for
amp-console's agent) that names a run `../..` or by an absolute path, offers a file by a path, sends a file
other than the one it hashed or cuts it short, or lists records that are no runs, is refused in one line per
answer (or per record: the other runs still list), and nothing is written outside the run's copy under
`<runs root>/.hosts/`. A checkpoint that is a link on the host is not sent; a copy folder that is a link here
is not written through."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from core.engine.run_record import read_run
from core.remote.fetch import fetch_run, list_host_runs
from core.remote.ssh import RemoteError
from tests.test_remote_ssh import sshd  # noqa: F401 (the session's sshd, a fixture)

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def fake_host(sshd, tmp_path: Path, answer: bytes):
    """A Host whose amp-console prints `answer` whatever it is asked."""
    (tmp_path / "answer.bin").write_bytes(answer)
    script = tmp_path / "fake-amp-console"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'answer.bin'}\n")
    script.chmod(0o755)
    return sshd.host(command=str(script))


def manifest(name="run", files=()) -> bytes:
    return (json.dumps({"folder": "/runs/" + str(name), "name": name, "files": list(files)}) + "\n").encode()


def entry(name: str, payload: bytes) -> dict:
    return {"name": name, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


def refused(host, local: Path, pattern: str) -> str:
    with pytest.raises(RemoteError) as caught:
        fetch_run(host, "run", local)
    text = str(caught.value)
    assert "\n" not in text and pattern in text, text
    return text


@pytest.mark.parametrize(
    "name, why",
    [
        ("../../escape", "holds '..'"),
        ("/etc", "is an absolute path"),
        ("a/../../b", "holds '..'"),
        (".hosts", "is not a folder under"),
        ("a/b/c", "is not a folder under"),
    ],
)
def test_a_run_name_that_leaves_the_copies_is_refused(sshd, tmp_path, name, why):
    local = tmp_path / "local"
    host = fake_host(sshd, tmp_path, manifest(name, [entry("run.json", b"{}")]) + b"{}")
    assert refused(host, local, why).startswith("amp-test: refused the host's answer: the run name ")
    assert not (local / ".hosts").exists() and not (tmp_path / "escape").exists()


@pytest.mark.parametrize(
    "name, why",
    [
        ("/etc/passwd", "is an absolute path"),
        ("../run.json", "is a path"),
        ("sub/best.pt", "is a path"),
        (".bashrc", "not one of a run's files"),
        ("train.log", "not one of a run's files"),
    ],
)
def test_a_file_name_that_is_no_file_of_the_run_is_refused(sshd, tmp_path, name, why):
    local = tmp_path / "local"
    host = fake_host(sshd, tmp_path, manifest("run", [entry(name, b"x")]) + b"x")
    refused(host, local, why)
    assert not (local / ".hosts").exists()


@pytest.mark.parametrize("payload, why", [(b"abce", "arrived damaged"), (b"ab", "was cut off at 2 B of 4 B")])
def test_a_file_other_than_the_one_hashed_or_cut_short_is_not_kept(sshd, tmp_path, payload, why):
    local = tmp_path / "local"
    host = fake_host(sshd, tmp_path, manifest("run", [entry("best.pt", b"abcd")]) + payload)
    refused(host, local, why)
    copy = local / ".hosts" / "amp-test" / "run"
    assert os.listdir(copy) == []  # neither the file nor its temp file


def test_records_that_are_no_runs_are_refused_one_by_one(sshd, tmp_path, trained_runs):
    good = read_run(trained_runs["tiny"].folder) | {"name": "good", "folder": "/runs/good"}
    records = [
        good,
        {"name": "../x", "folder": "/runs/x"},
        {"name": "/abs", "folder": "/abs"},
        {"name": "rel", "folder": "relative/path"},
        "text",
        {"name": "typed", "folder": "/r", "steps": "many"},
    ]
    deep = b'{"run": ' + b"[" * 200 + b"]" * 200 + b"}\n"
    lines = b"a login banner\n" + b"".join(json.dumps({"run": r}).encode() + b"\n" for r in records) + deep
    host = fake_host(sshd, tmp_path, lines + b'{"root": "/runs", "runs": 7}\n')
    runs = list_host_runs(host, tmp_path / "local").runs
    assert [r["status"] for r in runs] == ["completed"] + ["unreadable"] * 6
    assert runs[0]["name"] == "amp-test:good" and runs[0]["steps"] == good["steps"]
    reasons = [r["unreadable"] for r in runs[1:]]
    assert all(reason.startswith("refused: ") and "\n" not in reason for reason in reasons)
    assert "holds '..'" in reasons[0] and "is an absolute path" in reasons[1]
    assert "is not an absolute path on the host" in reasons[2] and "is str, not an object" in reasons[3]
    assert "steps is text, not a whole number" in reasons[4] and "nested more than" in reasons[5]
    local = tmp_path / "local"
    assert all(Path(r["folder"]).parent == local / ".hosts" / "amp-test" for r in runs)
    assert not local.exists()  # listing writes nothing


def test_a_checkpoint_that_is_a_link_on_the_host_is_not_sent(sshd, tmp_path, trained_runs):
    secret = tmp_path / "secret.pt"
    secret.write_bytes(b"not the run's")
    folder = sshd.runs / "linked-run"
    shutil.copytree(trained_runs["tiny"].folder, folder)
    try:
        (folder / "best.pt").unlink()
        (folder / "best.pt").symlink_to(secret)
        with pytest.raises(RemoteError) as caught:
            fetch_run(sshd.host(), "linked-run", tmp_path / "local")
    finally:
        shutil.rmtree(folder)
    text = str(caught.value)
    assert "\n" not in text and text.startswith("amp-test: ") and "best.pt is a symbolic link" in text
    assert not list((tmp_path / "local").rglob("best.pt"))


def test_a_copy_folder_that_is_a_link_here_is_not_written_through(sshd, tmp_path, trained_runs):
    folder = sshd.runs / "tiny-run"
    if not folder.exists():
        shutil.copytree(trained_runs["tiny"].folder, folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hosts = tmp_path / "local" / ".hosts" / "amp-test"
    hosts.mkdir(parents=True)
    (hosts / "tiny-run").symlink_to(elsewhere)
    with pytest.raises(RemoteError, match=r"tiny-run is a symbolic link: copies of a host's runs are kept in real "):
        fetch_run(sshd.host(), "tiny-run", tmp_path / "local")
    assert os.listdir(elsewhere) == []
