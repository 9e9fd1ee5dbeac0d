"""CPU benchmark: the analyse stage with murk.pipeline.execute's paced saves against a save at every cell (issue 22 item 4).

papermill saves the executed notebook at every cell's start and end, re-encoding every figure
already in it; ``python -m murk.pipeline.execute`` saves it when the run starts and ends and in between at
most every :data:`murk.pipeline.SAVE_EVERY_S` seconds. This script measures what that does to the
analyse stage (the notebook with the most cells and figures) as Snakemake runs it:

* a root with every stage before analyse (select, depth, the read-outs of the demo's two tiny offline
  checkpoints, the monitor: a pipeline check) of ``--n-items`` items of the shared COCO sample is
  prepared once, offline, with Snakemake;
* arms ``paced`` (murk's default) and ``every_cell`` (the same command with ``SAVE_EVERY_S = 0``: a
  save at every cell's start and end, as papermill alone) each run the analyse stage on it,
  interleaved for ``--rounds`` rounds in alternating order (``protocol.interleave``);
* per arm and round: the stage's CPU time (user + system of ``murk.pipeline.execute`` and its kernel, from
  ``resource.getrusage(RUSAGE_CHILDREN)``) and its wall time; ``cpu_ratio`` and ``wall_ratio``
  (every_cell over paced) are the medians of the per-round ratios with their ranges;
* ``same_outputs``: whether the two arms' executed notebooks have the same cells and the same number of
  outputs per cell (their contents differ only where the analysis records its own timing).

Last line: ``cpu_s_paced= cpu_s_every_cell= cpu_ratio= cpu_ratio_range= wall_ratio= wall_ratio_range=
notebook_mb= same_outputs= load_max= cpus=`` (and a warning when the load exceeded the CPUs).

Run: ``python benchmarks/notebook_saves.py`` (about 3 minutes on 2 cores with the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from protocol import LoadLog, fmt_ratio, interleave, ratio_summary  # noqa: E402

from murk.core import _paths as paths  # noqa: E402

ROOT = paths.project_root()
SAMPLE = ROOT.parent / "shared" / "coco-val2017-sample"
MODELS = ("murk-tiny/smolvlm", "murk-tiny/qwen3vl")   # the offline demo's (data/workflow.yaml offline_models)
#: arm -> the murk.pipeline.SAVE_EVERY_S it runs with (None: murk's default)
ARMS = {"paced": None, "every_cell": 0.0}


def _env(frozen: Path) -> dict[str, str]:
    """Offline, on the shared sample, the run's frozen record in ``frozen`` (not in the project's data/)."""
    return {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "MPLBACKEND": "Agg", "MURK_COCO_DIR": str(SAMPLE), "MURK_FROZEN_DIR": str(frozen),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def prepare(out: Path, n_items: int) -> None:
    """Every stage before analyse into ``out``, as ``make demo`` runs them (Snakemake, offline)."""
    targets = [str(out / "readout" / f"{paths.model_slug(m)}.done") for m in MODELS]
    targets.append(str(out / "readout" / f"{paths.model_slug('murk/visibility-monitor')}.done"))
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *targets, "--config",
                        f"output_dir={out}", f"n_items={n_items}", "run_name=notebook-saves-benchmark"],
                       cwd=ROOT, env=_env(out.parent / "frozen"), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"notebook_saves: preparing the root failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")


def analyse(out: Path, n_items: int, save_every_s: float | None, executed: Path) -> dict[str, float]:
    """The analyse stage through ``murk.pipeline.execute`` (as the Snakefile's rule runs it): its CPU and wall time."""
    models = json.dumps([{"id": m, "n_items": n_items} for m in MODELS])
    argv = ["notebooks/04_analyse.py", str(executed), "--cwd", str(ROOT), "-p", "output_dir", str(out),
            "-y", f"models: {models}"]
    setup = "" if save_every_s is None else f"e.SAVE_EVERY_S = {save_every_s!r}; "
    code = f"import sys; import murk.pipeline.execute as e; {setup}sys.exit(e.main({argv!r}))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(out.parent / "frozen"),
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"notebook_saves: the analyse stage failed:\n{r.stderr[-3000:]}")
    return {"cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall": wall}


def shape(notebook: Path) -> list[tuple[str, int]]:
    """(cell type, number of outputs) per cell of an executed notebook."""
    return [(c["cell_type"], len(c.get("outputs", []))) for c in json.loads(notebook.read_text())["cells"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the two arms")
    ap.add_argument("--n-items", type=int, default=4, help="items of the prepared root")
    args = ap.parse_args()
    if not SAMPLE.is_dir():
        sys.exit(f"notebook_saves: {SAMPLE} not found (the shared COCO sample)")
    log = LoadLog("notebook_saves")
    with tempfile.TemporaryDirectory(prefix="murk-notebook-saves-") as tmp:
        out = Path(tmp) / "out"
        print(f"notebook_saves: preparing {args.n_items} items (select, depth, read-outs, monitor)", flush=True)
        prepare(out, args.n_items)
        got: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}

        def arm(name: str):
            def run() -> float:
                m = analyse(out, args.n_items, ARMS[name], Path(tmp) / f"04_analyse-{name}.ipynb")
                got[name].append(m)
                print(f"notebook_saves: {name}: cpu {m['cpu']:.1f} s, wall {m['wall']:.1f} s", flush=True)
                return m["wall"]
            return run

        interleave({a: arm(a) for a in ARMS}, args.rounds, log)
        same = shape(Path(tmp) / "04_analyse-paced.ipynb") == shape(Path(tmp) / "04_analyse-every_cell.ipynb")
        mb = (Path(tmp) / "04_analyse-paced.ipynb").stat().st_size / 1e6
    log.end()

    def series(a: str, key: str) -> list[float]:
        return [m[key] for m in got[a]]

    cpu = {a: statistics.median(series(a, "cpu")) for a in ARMS}
    ratios = " ".join(fmt_ratio(f"{k}_ratio", ratio_summary(series("every_cell", k), series("paced", k)))
                      for k in ("cpu", "wall"))
    print(f"cpu_s_paced={cpu['paced']:.1f} cpu_s_every_cell={cpu['every_cell']:.1f} {ratios} "
          f"notebook_mb={mb:.1f} same_outputs={same} {log.tail()}")


if __name__ == "__main__":
    main()
