"""murk.pipeline at a SLURM driver's start (issue 37): GPUs the cluster has not, a killed driver's live jobs, the
executor's account guess, and the profiles' log clean-up, on parsed squeue/sinfo output and fake executors."""

import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from murk.core import _paths as paths
from murk.pipeline import _slurm as slurm

ROOT = paths.project_root()
SQUEUE = ("101|old-run|PENDING|rule_readout_shard_wildcards_slug=murk-tiny--smolvlm,size=1,shard=0001\n"
          "102|old-run|RUNNING|rule_readout_shard_wildcards_slug=murk-tiny--smolvlm,size=1,shard=0000\n"
          "103|old-run|COMPLETED|rule_select\n"
          "104|other-root-run|PENDING|rule_readout_shard_wildcards_slug=murk-tiny--smolvlm,size=1,shard=0001\n"
          "\n"
          "not a job line\n")


def test_parse_squeue_reads_id_name_state_and_comment():
    jobs = slurm.parse_squeue(SQUEUE + "105|r|PENDING|rule_paper|odd|comment\n")
    assert [j.job_id for j in jobs] == ["101", "102", "103", "104", "105"]
    assert jobs[0] == slurm.SlurmJob("101", "old-run", "PENDING",
                                     "rule_readout_shard_wildcards_slug=murk-tiny--smolvlm,size=1,shard=0001")
    assert jobs[0].what == "readout_shard slug=murk-tiny--smolvlm,size=1,shard=0001"
    assert jobs[2].what == "select" and jobs[4].comment == "rule_paper|odd|comment"


def test_decide_cancels_pending_waits_for_running_and_leaves_the_rest():
    ds = slurm.decide(slurm.parse_squeue(SQUEUE), ["old-run"], "/data/outputs")
    assert [(d.job.job_id, d.action) for d in ds] == [("101", "cancel"), ("102", "wait")]
    assert all("\n" not in d.line and "/data/outputs" in d.line for d in ds)
    assert "cancelled SLURM job 101 (readout_shard" in ds[0].line and "submits it again" in ds[0].line
    assert "waiting for SLURM job 102" in ds[1].line and "scancel 102" in ds[1].line
    assert slurm.decide(slurm.parse_squeue(SQUEUE), [], "/r") == []   # no earlier run of this root: nothing


def test_gpu_problem_names_the_cpu_profile_only_when_the_cluster_has_no_gpu():
    msg = slurm.gpu_problem(["readout_shard", "depth", "depth"], "(null)\n")
    assert msg is not None and "\n" not in msg
    assert "--profile profiles/slurm" in msg and "depth, readout_shard" in msg and "sinfo -o %G" in msg
    assert "partition gpu-a" in slurm.gpu_problem(["depth"], "(null)", "gpu-a")
    assert slurm.gpu_problem(["depth"], "(null)\ngpu:a100:4(S:0-1)\n") is None
    assert slurm.gpu_problem(["depth"], "gpu:2,shard:8") is None
    assert slurm.gpu_problem(["depth"], None) is None          # sinfo did not answer: nothing said
    assert slurm.gpu_problem(["depth"], "") is None            # no node listed (an unknown partition)
    assert slurm.gpu_problem([], "(null)") is None              # no job asks a GPU (profiles/slurm)
    assert not slurm.has_gpus("gpunot:1\nmps:100")


class Cluster:
    """A fake squeue/scancel/sinfo: jobs by id; a running job ends after ``runs_for`` squeue calls."""

    def __init__(self, jobs, gres="(null)", runs_for=2):
        self.jobs = {j.job_id: j for j in jobs}
        self.gres, self.runs_for, self.calls = gres, runs_for, []

    def __call__(self, cmd):
        self.calls.append(list(cmd))
        if cmd[0] == "sinfo":
            return self.gres
        if cmd[0] == "scancel":
            self.jobs[cmd[1]] = self.jobs[cmd[1]]._replace(state="CANCELLED")
            return ""
        assert cmd[:3] == ["squeue", "-h", "--name"] and cmd[-2:] == ["-o", slurm.SQUEUE_FORMAT]
        names = set(cmd[3].split(","))
        if sum(c[0] == "squeue" for c in self.calls) > self.runs_for:
            self.jobs = {k: (j._replace(state="COMPLETED") if j.state == "RUNNING" else j)
                         for k, j in self.jobs.items()}
        return "".join(f"{j.job_id}|{j.name}|{j.state}|{j.comment}\n" for j in self.jobs.values() if j.name in names)


def _workflow(run_uuid, gpu=0):
    job = SimpleNamespace(resources={"gpu": gpu}, rule=SimpleNamespace(name="readout_shard"))
    executor = SimpleNamespace(run_uuid=run_uuid, _fallback_account_arg=None)
    return SimpleNamespace(dag=SimpleNamespace(needrun_jobs=lambda: iter([job])),
                           scheduler=SimpleNamespace(_executor=executor))


def test_a_rerun_cancels_the_killed_drivers_pending_jobs_and_waits_for_its_running_ones(tmp_path):
    out, smk = tmp_path / "outputs", tmp_path / ".snakemake"
    lines = []
    # the first driver records its run id (job name) for its output root
    first = Cluster([])
    slurm.driver_start(_workflow("old-run"), out, smk, run=first, say=lines.append, poll_s=0)
    assert slurm.read_runs(slurm.runs_file(out, smk)) == ["old-run"] and lines == []
    # it was killed; its jobs 101 (pending) and 102 (running) live on, 104 is another root's driver's
    cluster = Cluster(slurm.parse_squeue(SQUEUE))
    wf = _workflow("new-run")
    slurm.driver_start(wf, out, smk, run=cluster, say=lines.append, poll_s=0)
    assert ["scancel", "101"] in cluster.calls and not any(c[0] == "scancel" and c[1] != "101" for c in cluster.calls)
    assert cluster.jobs["104"].state == "PENDING"                  # another root's job: left alone
    assert len(lines) == 3 and lines[0].startswith("cancelled SLURM job 101")
    assert lines[1].startswith("waiting for SLURM job 102") and lines[2].startswith("SLURM job 102 (")
    assert sum(c[0] == "squeue" for c in cluster.calls) > cluster.runs_for     # it waited until 102 ended
    assert slurm.read_runs(slurm.runs_file(out, smk)) == ["new-run"]
    # another output root has its own record: this root's run ids are not its
    assert slurm.read_runs(slurm.runs_file(tmp_path / "other", smk)) == []
    # the executor submits without -A instead of its broken sacct guess
    assert wf.scheduler._executor._fallback_account_arg == ""


def test_gpu_jobs_on_a_cluster_without_gpus_are_refused_before_anything_changes(tmp_path):
    cluster = Cluster(slurm.parse_squeue(SQUEUE))
    wf = _workflow("new-run", gpu=1)
    with pytest.raises(ValueError, match="--profile profiles/slurm"):
        slurm.driver_start(wf, tmp_path / "o", tmp_path / ".snakemake", run=cluster, say=print, poll_s=0)
    assert [c[0] for c in cluster.calls] == ["sinfo"]
    assert not (tmp_path / ".snakemake").exists() and wf.scheduler._executor._fallback_account_arg is None
    # the same jobs on a cluster with GPUs go on
    slurm.driver_start(wf, tmp_path / "o", tmp_path / ".snakemake", run=Cluster([], gres="gpu:1\n"), say=print)


def test_the_executor_submits_without_account_and_runs_no_sacct_once_murk_set_it(monkeypatch):
    """The seam with executor 2.8: get_account_arg guesses (its broken sacct) only while _fallback_account_arg
    is None; murk's "" makes it submit without -A and run nothing."""
    from snakemake_executor_plugin_slurm import Executor
    import snakemake_executor_plugin_slurm as plugin

    ran = []
    monkeypatch.setattr(plugin, "get_account", lambda logger: ran.append("sacct") or None)
    job = SimpleNamespace(resources={})
    fake = SimpleNamespace(_fallback_account_arg="", logger=SimpleNamespace(warning=lambda m: ran.append(m)))
    assert list(Executor.get_account_arg(fake, job)) == [""] and ran == []
    fake._fallback_account_arg = None                    # what it is without murk: the guess runs
    assert list(Executor.get_account_arg(fake, job)) == [""] and "sacct" in ran
    assert "run_uuid" in inspect.getsource(Executor.run_job)   # the job name murk records


@pytest.mark.parametrize("profile", ["slurm", "slurm-gpu"])
def test_the_profiles_keep_another_drivers_empty_log_folders(profile, tmp_path):
    """At its end the executor deletes empty folders under .snakemake/slurm_logs (a pending job's log folder)
    unless slurm-delete-logfiles-older-than is <= 0, as both profiles set it."""
    from snakemake_executor_plugin_slurm import Executor

    age = yaml.safe_load((ROOT / "profiles" / profile / "config.yaml").read_text())[
        "slurm-delete-logfiles-older-than"]
    pending = tmp_path / "rule_readout_shard" / "slug=m,size=1,shard=0001"
    pending.mkdir(parents=True)

    def fake(days):
        settings = SimpleNamespace(delete_logfiles_older_than=days, keep_successful_logs=False)
        return SimpleNamespace(workflow=SimpleNamespace(executor_settings=settings), slurm_logdir=tmp_path,
                               logger=SimpleNamespace(info=print, error=print))
    Executor.clean_old_logs(fake(age))
    assert pending.is_dir()
    Executor.clean_old_logs(fake(10))                     # the plugin's default deletes it
    assert not pending.exists()


def test_when_squeue_does_not_answer_the_old_run_ids_are_kept_and_said(tmp_path):
    out, smk = tmp_path / "outputs", tmp_path / ".snakemake"
    slurm.write_runs(slurm.runs_file(out, smk), ["old-run"])
    lines = []
    slurm.driver_start(_workflow("new-run"), out, smk, run=lambda cmd: None, say=lines.append, poll_s=0)
    assert slurm.read_runs(slurm.runs_file(out, smk)) == ["old-run", "new-run"]
    assert len(lines) == 1 and "squeue did not answer" in lines[0] and "squeue --name old-run" in lines[0]
