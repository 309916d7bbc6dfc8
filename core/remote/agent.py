"""The host side of remote runs: what `amp-console agent ...` does on the machine a client reaches with ssh. Answers are
JSON on stdout (`follow` streams metrics.jsonl lines); errors are one line on stderr, exit code 2.

    info | start (request on stdin) | follow FOLDER --offset N | control FOLDER VERB
    put --sha256 H --size N --name (file on stdin) | runs | fetch FOLDER [--checkpoint]
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import BinaryIO

from core import __version__
from core.devices import FP8_EMULATE_ENV
from core.errors import AmpConsoleError
from core.files import UnreadableFile, atomic_open, log_tail, open_regular_no_link, parse_json, shown_path
from core.text import printable

PROTOCOL = 1
HEARTBEAT_SECONDS = 2.0  # `follow` says `#offset N` this often when the run writes nothing (a paused run)
START_SECONDS = 300.0  # a started run must claim its folder within this (it imports torch first)
UPLOADS = ".uploads"
LOG_FILE = "train.log"
LAUNCH_FILE = "launch.toml"
FILE_FIELDS = ("data", "val_data", "test_data")
RUN_FILES = ("run.json", "metrics.jsonl", "note.txt", "evaluation.json")  # what `fetch` sends besides a checkpoint
REPLY_LIMIT = 64 * 1024  # bytes: the client's {"send": [...]} line


class AgentError(AmpConsoleError):
    pass


def check_version(client: str | None) -> None:
    if client and client != __version__:
        raise AgentError(
            f"this host runs amp-console {__version__}, the caller {client}: install the caller's version "
            f"here (`amp-console remote install HOST` where it runs)"
        )


def info(refresh: bool = False) -> dict:
    from core.engine.run_record import runs_root

    return {
        "version": __version__,
        "protocol": PROTOCOL,
        "host": socket.gethostname(),
        "runs_root": str(runs_root()),
        "devices": devices(refresh),
    }


# ----------------------------------------------------------------------------------------------- devices
DEVICES_FILE = "devices.json"  # in the user's cache folder (platformdirs)
# what else decides the device list: which devices a process sees, and the CPU row's torch threads
DEVICE_ENV: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
DEVICE_ENV += ("ZE_AFFINITY_MASK", "OMP_NUM_THREADS", FP8_EMULATE_ENV)


def devices(refresh: bool = False) -> list[dict]:
    """The host's devices as DeviceInfo dicts. Probing imports torch (seconds on a busy host), so the last probe is
    answered again while its device_key holds, with CUDA free memory read live; `refresh`: probe now."""
    from platformdirs import user_cache_path

    path, key = user_cache_path("amp-console") / DEVICES_FILE, device_key()
    if not refresh:
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = None
        listed = kept.get("devices") if isinstance(kept, dict) and kept.get("key") == key else None
        if isinstance(listed, list) and all(isinstance(d, dict) for d in listed):
            return with_free_memory(listed)
    from core.devices import list_devices

    probed = [d.to_dict() for d in list_devices(free_memory=True)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path) as f:
            f.write(json.dumps({"key": key, "devices": probed}).encode("utf-8"))
    except OSError:
        pass  # a read-only home: every call probes
    return probed


def device_key() -> dict:
    """What the device list depends on, read without importing torch."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def text(path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            return None

    return {
        "amp": __version__,
        "python": sys.executable,
        "packages": {name: version(name) for name in ("torch", "torchao", "bitsandbytes")},
        "boot": text("/proc/sys/kernel/random/boot_id"),
        "driver": text("/proc/driver/nvidia/version"),
        "env": {name: os.environ.get(name) for name in DEVICE_ENV},
    }


def with_free_memory(kept: list[dict]) -> list[dict]:
    """The kept devices with each CUDA device's free memory now (nvidia-smi, by PCI address), else None."""
    free = nvidia_free_memory() if any(d.get("type") == "cuda" for d in kept) else {}
    out = []
    for d in kept:
        if d.get("type") == "cuda":
            d = {**d, "memory_free": free.get(str((d.get("details") or {}).get("pci")))}
        out.append(d)
    return out


def nvidia_free_memory() -> dict[str, int]:
    """{"domain:bus:device" (hex, as DeviceInfo.details["pci"]): free bytes} from nvidia-smi; {} without it."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=pci.bus_id,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        address, _, mib = line.partition(",")
        try:
            domain, bus, device = address.strip().split(":")
            key = f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device.split('.')[0], 16):02x}"
            out[key] = int(mib.strip()) * 2**20
        except ValueError:
            continue
    return out


def find_run_folder(text: str, runs_dir: str | None = None) -> Path:
    """A run folder from a folder path, or a run's id, name or unique id prefix under the runs root; else AgentError."""
    from core.engine.run_index import find_runs
    from core.engine.run_record import runs_root

    path = Path(os.path.expanduser(text))
    if path.is_dir():
        return path
    root = runs_root(runs_dir)
    if not path.is_absolute() and (root / path).is_dir():
        return root / path
    runs = find_runs(root)
    matches = [r for r in runs if text in (r.get("id"), r.get("name"))] or [
        r for r in runs if str(r.get("id", "")).startswith(text)
    ]
    if len(matches) == 1 and matches[0].get("folder"):
        return Path(matches[0]["folder"])
    if len(matches) > 1:
        raise AgentError(f"'{printable(text)}' names {len(matches)} runs under {shown_path(root)}: give more of its id")
    raise AgentError(f"no run folder or run '{printable(text)}' (under {shown_path(root)})")


# ----------------------------------------------------------------------------------------------- start
def start(request: dict) -> dict:
    """Start `amp-console train` detached so it survives the ssh connection; return once the run holds its folder."""
    from core.config import RunConfig, train_command
    from core.engine.prepare import with_folder
    from core.engine.run_folder import holds_a_run, is_in_use
    from core.errors import ConfigError
    from core.remote.task_file import place_task_file

    values = request.get("config")
    if not isinstance(values, dict):
        raise AgentError('the start request has no "config" object')
    config = RunConfig.from_dict(values, source="the start request")
    problems = config.errors()
    if config.task_file:  # the run itself reports what is wrong with a user task
        problems.pop("task", None)
    if problems:
        name, message = next(iter(problems.items()))
        raise ConfigError(name, message)
    for name in FILE_FIELDS:  # the run's own working folder is not the caller's: paths are made absolute here
        if getattr(config, name):
            config = config.replace(**{name: os.path.abspath(os.path.expanduser(getattr(config, name)))})
    resume = request.get("resume")
    resume = os.path.abspath(os.path.expanduser(resume)) if resume else None
    if str(config.out_dir).strip():
        folder = Path(os.path.abspath(os.path.expanduser(config.out_dir)))
        if is_in_use(folder):
            raise AgentError(f"{shown_path(folder)}: a live run is writing there")
        resuming_here = resume is not None and Path(resume).parent == folder
        if holds_a_run(folder) and not resuming_here:
            raise AgentError(
                f"{shown_path(folder)} holds a run already: choose another folder, or none for a new "
                f"one under the runs root"
            )
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = _new_folder(Path(with_folder(config, request.get("runs_dir")).out_dir))
    config = config.replace(out_dir=str(folder))
    if request.get("task_file") is not None:
        try:
            config = config.replace(task_file=place_task_file(folder, request["task_file"]))
        except ValueError as exc:
            raise AgentError(f"the task file was not copied: {exc}") from None
    launch = folder / LAUNCH_FILE
    config.save_toml(launch)
    task = ["--task", config.task_file] if config.task_file else []
    resumed = ["--resume", resume] if resume else []
    argv = train_command(
        launch, "--out", str(folder), *task, *resumed, events=False, nproc=int(request.get("nproc") or 1)
    )
    log_path = folder / LOG_FILE
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + float(request.get("start_seconds") or START_SECONDS)
    while not is_in_use(folder):
        if process.poll() is not None:
            raise AgentError(f"the run did not start: {log_tail(log_path) or f'exit code {process.returncode}'}")
        if time.monotonic() > deadline:
            raise AgentError(
                f"the run has not claimed {shown_path(folder)} after {START_SECONDS:g} s; see {shown_path(log_path)}"
            )
        time.sleep(0.05)
    process.returncode = 0  # it outlives this process: no "still running" warning
    return {"folder": str(folder), "pid": process.pid, "log": str(log_path), "task_file": config.task_file}


def _new_folder(base: Path) -> Path:
    """`base`, or `base-2`, `base-3`... whichever this call creates first (never one that exists)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, 10_000):
        candidate = base if number == 1 else base.with_name(f"{base.name}-{number}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise AgentError(f"no free run folder beside {shown_path(base)}")


# ----------------------------------------------------------------------------------------------- follow
def follow(folder: Path, offset: int, out, heartbeat: float = HEARTBEAT_SECONDS) -> None:
    """Stream metrics.jsonl's lines from `offset` to `out` as written, `#offset N` heartbeats, then `#end STATUS`."""
    from core.engine.follow import MetricsFollower

    if not folder.is_dir():
        raise AgentError(f"{shown_path(folder)}: no such run folder")
    follower = MetricsFollower(folder, offset)
    with _to_caller(), closing(follower):
        out.write(b"#offset %d\n" % offset)  # the stream is up
        out.flush()
        for line in follower.lines(idle_seconds=heartbeat):
            if line is None:
                out.write(b"#offset %d\n" % follower.offset)
                out.flush()
                continue
            out.write(line.raw + b"\n")
            if line.offset == follower.offset:  # the last line read for now: send what was read
                out.flush()
        note = log_tail(folder / LOG_FILE) if follower.status == "gone" else ""
        out.write(b"#offset %d\n#end %s\t%s\n" % (follower.offset, follower.status.encode(), note.encode()))
        out.flush()


# ----------------------------------------------------------------------------------------------- control
def control(folder: Path, verb: str, timeout: float) -> dict:
    from core.engine.events import event_to_dict
    from core.engine.folder_control import ControlError, send_control

    try:
        result = send_control(folder, verb, timeout=timeout)
    except ControlError as exc:
        raise AgentError(str(exc)) from None
    return {
        "request": result.request.name,
        "seq": result.request.seq,
        "verb": verb,
        "acknowledged": event_to_dict(result.acknowledged) if result.acknowledged else None,
        "outcome": event_to_dict(result.outcome) if result.outcome else None,
        "message": result.message,
    }


# ----------------------------------------------------------------------------------------------- put
def upload_path(sha256: str, name: str, runs_dir: str | None = None) -> Path:
    from core.engine.run_record import runs_root

    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise AgentError(f"{printable(sha256)!r} is not a sha256 in hex")
    base = os.path.basename(name.replace("\\", "/"))
    if not base or base.startswith("."):
        raise AgentError(f"{printable(name)!r} is not a file name to keep an upload under")
    return runs_root(runs_dir) / UPLOADS / sha256 / base


def put(sha256: str, size: int, name: str, stream, check_only: bool, runs_dir: str | None = None) -> dict:
    """Keep the file on `stream` in the uploads by its (checked) sha256, unless kept already (`check_only`: say)."""
    path = upload_path(sha256, name, runs_dir)
    if path.is_file() and path.stat().st_size == size:
        return {"path": str(path), "stored": False}
    if check_only:
        return {"path": None, "stored": False}
    digest, total = hashlib.sha256(), 0
    with atomic_open(path) as f:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
            total += len(chunk)
            f.write(chunk)
        if total != size or digest.hexdigest() != sha256:
            raise AgentError(
                f"the upload of {printable(name)} arrived damaged ({total} of {size} bytes, or another "
                f"sha256): send it again"
            )
    return {"path": str(path), "stored": True}


# ----------------------------------------------------------------------------------------------- runs, fetch
def runs(out, runs_dir: str | None = None) -> None:
    """One `{"run": record}` line per run under the runs root (find_runs), then `{"root", "runs"}`."""
    from core.engine.run_index import find_runs
    from core.engine.run_record import runs_root

    root = runs_root(runs_dir)
    records = find_runs(root) if root.is_dir() else []
    with _to_caller():
        for record in records:
            out.write(json.dumps({"run": record}, default=str).encode("utf-8") + b"\n")
        out.write(json.dumps({"root": str(root), "runs": len(records)}).encode("utf-8") + b"\n")
        out.flush()


def sha256_of(f, size: int) -> str:
    """The sha256 of the next `size` bytes of the open binary file `f` (fewer if it ends first)."""
    digest, left = hashlib.sha256(), size
    while left > 0 and (chunk := f.read(min(1 << 20, left))):
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def fetch(folder: Path, with_checkpoint: bool, reply, out, runs_dir: str | None = None, which: str = "advised") -> None:
    """Send a run's RUN_FILES (and `with_checkpoint`, run_checkpoint's `which`, its notes in the manifest): the
    manifest, then the files asked on `reply`, each sent from the open file (no link followed) it was hashed from."""
    from core.engine.run_record import run_checkpoint, runs_root
    from core.errors import CheckpointError

    if not folder.is_dir():
        raise AgentError(f"{shown_path(folder)}: no such run folder")
    names = list(RUN_FILES)
    notes: list[str] = []
    if with_checkpoint:
        try:
            checkpoint, notes = run_checkpoint(folder, which)
        except CheckpointError as exc:
            raise AgentError(str(exc)) from None
        if checkpoint.name not in names:
            names.append(checkpoint.name)
    opened: list[tuple[dict, BinaryIO]] = []
    with _to_caller(), ExitStack() as files_open:
        for name in names:
            try:
                f = files_open.enter_context(open_regular_no_link(folder / name))
            except FileNotFoundError:
                continue
            except UnreadableFile as exc:
                raise AgentError(f"{shown_path(folder)}: {exc}: not sent") from None
            size = os.fstat(f.fileno()).st_size
            opened.append(({"name": name, "size": size, "sha256": sha256_of(f, size)}, f))
        try:
            name = folder.resolve().relative_to(runs_root(runs_dir).resolve()).as_posix()
        except ValueError:  # a folder outside the runs root: its own name
            name = folder.name
        files = [entry for entry, _f in opened]
        manifest = {"folder": str(folder), "name": name, "files": files}
        if notes:  # why the checkpoint sent is the last one
            manifest["notes"] = notes
        out.write(json.dumps(manifest).encode("utf-8") + b"\n")
        out.flush()
        raw = reply.readline(REPLY_LIMIT)
        try:
            answer = parse_json(raw, "the fetch reply") if raw.strip() else {}
        except UnreadableFile as exc:
            raise AgentError(str(exc)) from None
        asked = answer.get("send") if isinstance(answer, dict) else None
        wanted = {n for n in asked if isinstance(n, str)} if isinstance(asked, list) else set()
        for entry, f in opened:
            if entry["name"] not in wanted:
                continue
            f.seek(0)
            left = entry["size"]  # a file that shrank since is sent short: the caller sees it and says so
            while left > 0 and (chunk := f.read(min(1 << 20, left))):
                out.write(chunk)
                left -= len(chunk)
        out.flush()


@contextmanager
def _to_caller():
    """Writes to the caller, ended quietly by a BrokenPipeError (the caller stopped or its connection dropped)."""
    try:
        yield
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass


def print_json(value: dict) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()
