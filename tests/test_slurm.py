"""Inside a SLURM job: which run folder a job resumes by itself. The sbatch script `amp-console slurm` writes."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from core.cli.elastic import auto_resume


@pytest.mark.parametrize("name, resumed", [("exp-2027", False), ("exp-7", True), ("rec-77", False)])
def test_a_job_resumes_only_the_folder_named_for_its_own_id(tmp_path, monkeypatch, name, resumed):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    (tmp_path / name).mkdir()
    (tmp_path / name / "checkpoint.pt").write_bytes(b"a run's")
    args = argparse.Namespace(out_dir=str(tmp_path / name), config=None, resume=None)
    restart = auto_resume(args)
    assert (restart is not None, args.resume) == (
        (True, str(tmp_path / name / "checkpoint.pt")) if resumed else (False, None)
    )


def test_the_script_asks_for_cores_and_meets_on_a_port_of_its_own(tmp_path, capsys):
    """Run by bash with fake srun and scontrol: srun gets the cores, the port comes from the job id (another job
    on the same first node gets another) or AMP_CONSOLE_RDZV_PORT, and the console's path comes with a note."""
    from core.cli.main import main

    assert main(["slurm", "--config", "rec.toml", "--nodes", "2", "--gpus-per-node", "8", "--cpus-per-task", "32"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --cpus-per-task=32" in script.splitlines()
    assert (
        "# every node runs this console: its environment, the config and the runs folder must be on storage" in script
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (("srun", 'echo "$@"'), ("scontrol", "echo node-a; echo node-b")):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    job = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node-[a-b]"}
    for extra, port in (({}, 29742), ({"AMP_CONSOLE_RDZV_PORT": "31000"}, 31000)):
        env = {**job, "SLURM_JOB_NUM_NODES": "2", "AMP_CONSOLE": "amp-console", **extra}
        srun = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        assert srun.startswith("--kill-on-bad-exit=1 --cpus-per-task=32 amp-console train --config rec.toml"), srun
        assert f"--rdzv-endpoint node-a:{port} --rdzv-id 4242" in srun, srun
