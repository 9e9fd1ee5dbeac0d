"""murk.pipeline.status_problem: when the SLURM executor may never see a job end (issue 22)."""

from murk.pipeline import _slurm as slurm


def test_squeue_with_a_long_enough_min_job_age_is_fine():
    assert slurm.status_problem("squeue", 300) is None      # Slurm's default MinJobAge
    assert slurm.status_problem("squeue", 180) is None
    assert slurm.status_problem("squeue", None) is None     # unknown: nothing to say


def test_squeue_with_a_short_min_job_age_is_named():
    msg = slurm.status_problem("squeue", 100)
    assert "MinJobAge is 100 s" in msg and "scontrol show config" in msg and ">= 180" in msg


def test_sacct_is_named_with_the_fix():
    msg = slurm.status_problem("sacct", 300)
    assert "CANCELLED by <uid>" in msg and "--slurm-status-command squeue" in msg


def test_min_job_age_of_a_cluster_or_none(monkeypatch):
    class R:
        returncode, stdout = 0, "MaxJobCount = 10000\nMinJobAge               = 300 sec\n"
    monkeypatch.setattr(slurm.subprocess, "run", lambda *a, **k: R())
    assert slurm.min_job_age() == 300
    R.stdout = "MinJobAge = 1h\n"
    assert slurm.min_job_age() == 3600

    def missing(*a, **k):
        raise FileNotFoundError("scontrol")
    monkeypatch.setattr(slurm.subprocess, "run", missing)
    assert slurm.min_job_age() is None
