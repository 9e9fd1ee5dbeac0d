"""The SLURM profiles (issue 22): CPU-only by default, every rule sized for a small node, GPUs by choice,
account and partition added on the command line without losing the profile's per-rule resources."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from murk.core import _paths as paths
from murk.pipeline import _slurm as slurm

import stages  # tests/stages.py: the shared COCO sample

ROOT = paths.project_root()
CPU, GPU = (yaml.safe_load((ROOT / "profiles" / p / "config.yaml").read_text()) for p in ("slurm", "slurm-gpu"))
#: the rules that run as cluster jobs (every rule of the Snakefile but the target rule `all`)
RULES = sorted(set(re.findall(r"^rule (\w+):", (ROOT / "Snakefile").read_text(), re.M)) - {"all"})
#: a small node: 2 CPUs, 8 GB (MB as SLURM counts them)
SMALL_CPUS, SMALL_MEM_MB = 2, 8000
#: the rules whose runtime and memory the Snakefile computes from measurements (murk.pipeline.readout_resources)
MEASURED = {"readout", "readout_shard"}


def test_every_rule_has_its_memory_cpus_and_time_in_both_profiles():
    assert RULES and "readout_shard" in RULES
    for profile in (CPU, GPU):
        rows = profile["set-resources"]
        assert sorted(rows) == RULES
        for rule in RULES:
            # a read-out's runtime and memory here would replace the Snakefile's, computed from measurements
            assert ({"cpus_per_task"} if rule in MEASURED else {"mem_mb", "runtime", "cpus_per_task"}) \
                <= set(rows[rule]), rule
            assert rule not in MEASURED or not {"mem_mb", "runtime"} & set(rows[rule]), rule
    # no default-resources block: the command line's --default-resources (account, partition) replaces nothing
    assert "default-resources" not in CPU and "default-resources" not in GPU


def test_cpu_profile_fits_a_small_node_and_asks_no_gpu():
    for rule, row in CPU["set-resources"].items():
        assert row["cpus_per_task"] <= SMALL_CPUS and row.get("mem_mb", 0) <= SMALL_MEM_MB, rule
        assert not row.get("gpu") and "gres" not in row, rule
    # the Snakefile's gpu=1 of the read-outs (one per GPU locally) is overridden here
    assert CPU["set-resources"]["readout_shard"]["gpu"] == 0 == CPU["set-resources"]["readout"]["gpu"]
    assert CPU["slurm-status-command"] == "squeue"


def test_gpu_profile_is_the_cpu_profile_plus_gpu_rows():
    gpu_rules = {"depth", "readout", "readout_shard"}
    assert {k: v for k, v in GPU.items() if k != "set-resources"} == {k: v for k, v in CPU.items()
                                                                      if k != "set-resources"}
    for rule in RULES:
        if rule in gpu_rules:
            assert GPU["set-resources"][rule]["gpu"] == 1, rule
        else:
            assert GPU["set-resources"][rule] == CPU["set-resources"][rule], rule


@pytest.mark.parametrize("profile,gpu", [("profiles/slurm", 0), ("profiles/slurm-gpu", 1)])
def test_account_and_partition_on_the_command_line_keep_the_profile(profile, gpu, tmp_path):
    """docs/cluster.md's command with --default-resources: each job gets the account and partition and keeps its
    rule's memory, CPUs, time and GPUs (Snakemake's dry run prints each job's resources); the read-out jobs'
    runtime and memory are the measured cost of their model's earlier jobs times the margin (here one model's
    record), or the unmeasured request."""
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "MURK_COCO_DIR": str(stages.SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    measured = {"device": "cpu", "images": 2, "units": 48, "run_s": 600.0, "s_per_image": 300.0, "load_s": 60.0,
                "peak_host_bytes": 3 << 30, "model": "murk-tiny/smolvlm"}
    shard_costs = tmp_path / "out" / "readout" / paths.model_slug("murk-tiny/smolvlm")
    shard_costs.mkdir(parents=True)
    (shard_costs / f"s2-0000{slurm.COST_SUFFIX}").write_text(json.dumps(measured))
    # records that are no measurement (issue 49 item 3): ignored, each said in one line, and the defaults (qwen3vl)
    # or the model's sound record (smolvlm) apply; infinity crashed the plan with a traceback, 1e12 s per image asked
    # for 5e10 minutes
    absurd = {shard_costs / f"s2-0001{slurm.COST_SUFFIX}": '{"device": "cpu", "images": 2, "s_per_image": 1.0, '
                                                           '"load_s": 60.0, "peak_host_bytes": 1e30}'}
    qwen_costs = tmp_path / "out" / "readout" / paths.model_slug("murk-tiny/qwen3vl")
    qwen_costs.mkdir()
    absurd.update({qwen_costs / f"s2-0000{slurm.COST_SUFFIX}": json.dumps({**measured, "s_per_image": 1e12}),
                   qwen_costs / f"s2-0001{slurm.COST_SUFFIX}": '{"device": "cpu", "images": 2, "s_per_image": '
                                                               'Infinity, "load_s": NaN, "peak_host_bytes": 1}',
                   qwen_costs / f"s2-0002{slurm.COST_SUFFIX}": '{"device": "cpu", "ima'})
    for f, text in absurd.items():
        f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", profile, "-n", "--forceall",
                        "--config", "n_items=6", "shard_size=2", f"output_dir={tmp_path / 'out'}",
                        "--default-resources", "slurm_account=ACCT", "slurm_partition=PART"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr
    for f in absurd:   # one line each, however many jobs read it
        (line,) = [x for x in r.stderr.splitlines() if x.startswith(f"murk: {f}: ")]
        assert "so it is not a measurement: it is ignored and" in line, line
    rows = (CPU if gpu == 0 else GPU)["set-resources"]
    want = slurm.readout_resources(2, [measured])
    assert (want["runtime"], want["mem_mb"]) == (17, 3994)  # 1.5 x (60 s + 2 x 300 s); 1.3 x 3 GiB
    blocks = [b for b in (r.stdout + r.stderr).split("\nrule ")[1:] if not b.startswith("all:")]
    assert sum(b.startswith("readout_shard:") for b in blocks) == 2 * 3  # two offline models x three shards
    for b in blocks:
        rule = b.split(":", 1)[0]
        res = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", b).group(1).split(", "))
        assert res["slurm_account"] == "ACCT" and res["slurm_partition"] == "PART", rule
        for key in ("mem_mb", "runtime", "cpus_per_task"):
            if key != "cpus_per_task" and rule in MEASURED:
                smol = f"slug={paths.model_slug('murk-tiny/smolvlm')}," in b
                qwen = slurm.model_readout_resources(tmp_path / "out" / "readout", paths.model_slug("murk-tiny/qwen3vl"),
                                                     "murk-tiny/qwen3vl", 2)
                assert qwen["runtime"] == slurm.UNMEASURED_RUNTIME_MIN and "not measured" in qwen["basis"]
                assert int(res[key]) == (want if smol else qwen)[key], (rule, key, res)
                assert key != "mem_mb" or int(res[key]) <= SMALL_MEM_MB, res  # the CPU profile's small node too
                continue
            assert res[key] == str(rows[rule][key]), (rule, key, res)
        assert res.get("gpu", "0") == str(rows[rule].get("gpu", 0)), rule


def test_served_profile_is_the_cpu_profile_with_the_readouts_as_light_clients():
    """profiles/slurm-served (docs/served.md): the read-outs are one-CPU, GPU-less clients of the model's server
    (their memory set: the measured memory of an in-process read-out would be the model's); every other row and
    setting is profiles/slurm's."""
    served = yaml.safe_load((ROOT / "profiles" / "slurm-served" / "config.yaml").read_text())
    assert {k: v for k, v in served.items() if k != "set-resources"} == {k: v for k, v in CPU.items()
                                                                         if k != "set-resources"}
    assert sorted(served["set-resources"]) == RULES
    for rule in RULES:
        row = served["set-resources"][rule]
        if rule in MEASURED:
            assert row["gpu"] == 0 and row["cpus_per_task"] == 1 and row["mem_mb"] <= SMALL_MEM_MB, rule
            assert "runtime" not in row, rule  # the server's speed: measured by the model's earlier jobs
        else:
            assert row == CPU["set-resources"][rule], rule


def test_served_profile_models_name_their_servers_and_the_server_job_uses_the_launcher():
    """The example settings give each model a server URL and a served name; the server job starts vLLM only
    through murk's launcher (which sets the flags that keep the prompts murk's), with argument lists."""
    folder = ROOT / "profiles" / "slurm-served"
    models = yaml.safe_load((folder / "models-served.yaml").read_text())["models"]
    assert models and all(set(m) >= {"id", "server", "served_model"} for m in models)
    assert all(re.fullmatch(r"http://[\w.-]+:\d+/v1", m["server"]) for m in models)
    job = (folder / "vllm-server.sbatch").read_text()
    launches = [ln for ln in job.splitlines() if not ln.startswith("#") and "python" in ln]
    assert launches == [ln for ln in launches if "-m murk.readout.serve" in ln] and launches
    assert "vllm.entrypoints" not in job and "eval " not in job and "bash -c" not in job
    r = subprocess.run(["bash", "-n", str(folder / "vllm-server.sbatch")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
