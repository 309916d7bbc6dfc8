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
