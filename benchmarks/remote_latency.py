"""How soon a remote watcher sees a step, and how soon a run acknowledges a control request, over ssh on localhost.

A tiny run trains in a child process (the run a host would start), which notes when each StepMetrics event is
emitted (time.monotonic, one clock for every process of the machine). A RemoteFollower follows its
metrics.jsonl through an sshd of our own on 127.0.0.1 (tests/local_sshd.py) and notes when each step arrives:
step-to-watch latency is the difference (p50, p95, max), the run's 0.25 s batching of metrics.jsonl writes
included. Control latency is from a request written into the run folder to its ControlAcknowledged in
metrics.jsonl (pause and resume, `--controls` times each), and the end-to-end `control_remote` stop (an ssh
connection, the host's amp-console starting, the acknowledgement and the final checkpoint).

    python benchmarks/remote_latency.py [--seconds 8] [--log-interval 10] [--controls 5] [--json]

`--devices N` instead: the wall time of `amp-console remote devices HOST` (a fresh client process each time,
as a user types it) against a plain `ssh HOST true`, N of each, interleaved: the host's first answer probes its
devices (it imports torch), later ones answer its kept probe (core.remote.agent.devices).

Needs sshd, ssh and ssh-keygen (openssh-server, openssh-client). Localhost only: the two clocks must be one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(folder: str, stamps: str, log_interval: int) -> None:
    """The run: a Trainer whose sink notes each step's emit time; the times are written when it ends."""
    from core.config import RunConfig
    from core.engine.events import StepMetrics
    from core.engine.trainer import Trainer

    noted: list[tuple[int, float]] = []

    def sink(event) -> None:
        if type(event) is StepMetrics:
            noted.append((event.step, time.monotonic()))

    config = RunConfig.for_task(
        "tiny",
        device="cpu",
        precision="fp32",
        max_steps=100_000_000,
        log_interval=log_interval,
        out_dir=folder,
        threads=1,
    )
    Trainer(config, sink=sink).run()
    Path(stamps).write_text(json.dumps(noted))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ack_latency(folder: Path, verb: str) -> tuple[float, float]:
    """(request to acknowledgement, request to its RunPaused/RunResumed) in seconds, read on this machine."""
    from core.engine.folder_control import write_request
    from core.engine.follow import MetricsFollower

    with MetricsFollower(folder, offset=(folder / "metrics.jsonl").stat().st_size, poll_seconds=0.001) as follower:
        started = time.monotonic()
        request = write_request(folder, verb)
        acked = None
        outcome = "RunPaused" if verb == "pause" else "RunResumed"
        while True:
            for line in follower.read():
                record = line.record
                if record.get("event") == "ControlAcknowledged" and record.get("request") == request.name:
                    acked = time.monotonic() - started
                elif acked is not None and record.get("event") == outcome:
                    return acked, time.monotonic() - started
            time.sleep(0.001)


def time_remote_devices(rounds: int) -> int:
    from tests.local_sshd import start_sshd

    tmp = Path(tempfile.mkdtemp(prefix="amp-remote-devices-"))
    sshd = start_sshd(tmp)
    command = sshd.remote_command(tmp / "runs").replace("env ", f"env XDG_CACHE_HOME={tmp / 'cache'} ", 1)
    ssh = ["ssh", "-F", str(sshd.config), sshd.dest, "true"]
    # a fresh client process each time, as `amp-console remote devices HOST` (whose ssh options are -o only)
    client = (
        "import sys; from core.remote.client import host_devices; from core.remote.ssh import Host; "
        f"host_devices(Host({sshd.dest!r}, {command!r}, ('-F', {str(sshd.config)!r})), refresh='-r' in sys.argv)"
    )
    devices = [sys.executable, "-c", client]

    def wall(argv: list[str]) -> float:
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
        return time.perf_counter() - began

    try:
        first = wall(devices + ["-r"])
        times: dict[str, list[float]] = {"ssh true": [], "remote devices (kept probe)": []}
        for _ in range(rounds):
            times["ssh true"].append(wall(ssh))
            times["remote devices (kept probe)"].append(wall(devices))
    finally:
        sshd.stop()
    print(f"remote devices, probing (--refresh): {first:.2f} s")
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s, range {min(values):.2f}-{max(values):.2f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the watch measures steps")
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--controls", type=int, default=5, help="pause/resume pairs timed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--devices", type=int, default=0, metavar="N", help="time `remote devices` instead")
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "STAMPS", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    if args.devices:
        return time_remote_devices(args.devices)

    from core.engine.events import StepMetrics  # noqa: F401  (the engine's modules, before the clocks start)
    from core.engine.run_folder import is_in_use
    from core.remote.client import RemoteFollower, control_remote
    from core.remote.ssh import Host
    from tests.local_sshd import start_sshd

    tmp = Path(tempfile.mkdtemp(prefix="amp-remote-latency-"))
    sshd = start_sshd(tmp)
    folder, stamps = tmp / "run", tmp / "stamps.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    run = subprocess.Popen(
        [sys.executable, __file__, "--child", str(folder), str(stamps), str(args.log_interval)], env=env
    )
    try:
        deadline = time.monotonic() + 300
        while not (is_in_use(folder) and (folder / "metrics.jsonl").exists()):
            if run.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the run did not start")
            time.sleep(0.05)
        host = Host(sshd.dest, command=sshd.remote_command(tmp / "runs"), ssh_options=("-F", str(sshd.config)))
        follower = RemoteFollower(host, str(folder))
        arrived: dict[int, float] = {}

        def watch() -> None:
            for item in follower:
                record = getattr(item, "record", None)
                if record and record.get("event") == "StepMetrics":
                    arrived.setdefault(record["step"], time.monotonic())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        while not arrived:
            time.sleep(0.05)
        time.sleep(args.seconds)
        acks, effects = [], []
        for _ in range(args.controls):
            for verb in ("pause", "resume"):
                time.sleep(random.uniform(0, 0.25))  # requests at any phase of the watcher's polls
                ack, effect = ack_latency(folder, verb)
                acks.append(ack)
                effects.append(effect)
        stop_started = time.monotonic()
        stopped = control_remote(host, str(folder), "stop", timeout=120)
        stop_seconds = time.monotonic() - stop_started
        run.wait(120)
        watcher.join(60)
        follower.close()
    finally:
        if run.poll() is None:
            run.kill()
        sshd.stop()
    noted = dict(json.loads(stamps.read_text()))
    latencies = [arrived[step] - noted[step] for step in arrived if step in noted]
    load = os.getloadavg()[0]
    result = {
        "steps": len(latencies),
        "log_interval": args.log_interval,
        "watch_p50": percentile(latencies, 0.5),
        "watch_p95": percentile(latencies, 0.95),
        "watch_max": max(latencies),
        "ack_p50": statistics.median(acks),
        "ack_max": max(acks),
        "effect_p50": statistics.median(effects),
        "effect_max": max(effects),
        "control_remote_stop": stop_seconds,
        "stop_message": stopped.message,
        "load": load,
        "cpus": os.cpu_count(),
    }
    print(
        f"step to watch over ssh (localhost, {len(latencies)} steps at log interval {args.log_interval}): "
        f"p50 {result['watch_p50'] * 1000:.0f} ms, p95 {result['watch_p95'] * 1000:.0f} ms, "
        f"max {result['watch_max'] * 1000:.0f} ms"
    )
    print(
        f"request to acknowledgement ({len(acks)} pause/resume): median {result['ack_p50'] * 1000:.0f} ms, "
        f"max {result['ack_max'] * 1000:.0f} ms; to RunPaused/RunResumed: median "
        f"{result['effect_p50'] * 1000:.0f} ms, max {result['effect_max'] * 1000:.0f} ms"
    )
    print(f"control_remote stop over ssh, end to end: {stop_seconds:.2f} s ({stopped.message})")
    print(f"load average {load:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
