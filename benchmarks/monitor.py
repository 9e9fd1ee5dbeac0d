"""Benchmark: accuracy of the visibility monitor on the COCO sample (issues 9 and 13).

Renders the fog and underwater sweeps (spec Sec. III, ``physics.SWEEP_M``) of the
images of ``../shared/coco-val2017-sample`` at the presented size (longer side
448 px) with a known depth (``ground``: :func:`murk.monitor.ground_plane_depth`;
``billboard``: the annotated boxes stood on it, :func:`murk.monitor.billboard_depth`)
and estimates V_hat.

The estimate is given the depth used to render: an **oracle** depth, which a
deployed monitor would not have. ``--sensitivity`` measures what a wrong depth does:
the renderings of the ground-plane depth are estimated with the depth scaled by
kappa = 0.5 and 2 (a global scale error: V_hat should scale by kappa exactly), and
with a constant depth of 13.8 m (murk's offline ``constant`` backend, the spec's
median scene depth: an error in the depth's shape).

Printed per arm, depth model and variant: the share of images with V_hat within a
factor 2 of V per level and over 3.9-62.5 m (issue 9's criterion: >= 0.8), the
median ratio V_hat / V per level, the share of estimates censored as opaque (an
upper bound, on which the gate abstains) per level, and on the clean images the
median V_hat and the **false-abstain rate**: the share of clean images with
V_hat below the gate's 22.1 m (``clean_below_gate=``), or not vouched for
(:func:`murk.monitor.gate_decisions` with the censoring). The last lines are the
summary the paper quotes (``summary ...``; the last ends in ``load_max= cpus=``, with load lines
at the start and end: ``benchmarks/protocol.py``).

Run ``python benchmarks/monitor.py [--n-images 158] [--variants] [--quantiles]
[--sensitivity] [--arms fog underwater] [--depths ground billboard] [--json out.json]``
(all 158 images, default estimator: about a minute per arm and depth model on one
unloaded core; ``--variants`` adds omega = 0.95,
``method="median"`` and ``"lsq"``, He et al.'s transmission window and the spec's
known veiling light; ``--quantiles`` the quantiles 0.5, 0.4, 0.3 and 0.25).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules

import numpy as np  # noqa: E402
from protocol import LoadLog  # noqa: E402

from murk import scene
from murk.core import _paths as paths
from murk.monitor import _estimator
from murk.monitor import _gate
from murk.monitor import _monitor as monitor
from murk.monitor import _validation_depth
from murk.scene import _depth as murk_depth
from murk.scene import _physics as physics
from murk.scene import _render as render

CORE = (physics.SWEEP_M >= 3.9) & (physics.SWEEP_M <= 62.5)


def load_scenes(n_images: int):
    """[(image id, presented image, {depth model: depth})] of the first n of every k-th image."""
    root = paths.project_root().parent / "shared" / "coco-val2017-sample"
    ann = json.loads((root / "annotations" / "instances_val2017.json").read_text())
    boxes: dict[int, list] = {}
    for a in ann["annotations"]:
        boxes.setdefault(a["image_id"], []).append(a["bbox"])
    records = sorted(ann["images"], key=lambda r: r["file_name"])
    records = records[:: max(1, len(records) // n_images)][:n_images]
    for rec in records:
        full = scene.load_image(root / "val2017" / rec["file_name"])
        size = scene.presented_size(full.shape[1], full.shape[0])
        image = scene.resize_image(full, size)
        ground = _validation_depth.ground_plane_depth(image.shape[0], image.shape[1])
        scaled = [render.scale_bbox(b, (full.shape[1], full.shape[0]), size) for b in boxes.get(rec["id"], [])]
        yield rec["id"], image, {"ground": ground, "billboard": _validation_depth.billboard_depth(ground, scaled)}


def _estimate(images, depth, arm, kw):
    """(V_hat, censored code) arrays for a list of images estimated with one depth."""
    d = [_estimator.estimate_visibility_details(im, depth, arm, **kw) for im in images]
    return np.array([x["visibility_m"] for x in d]), np.array([x["censored_code"] for x in d])


def run_case(scenes, arm: str, dm: str, name: str, kw: dict, estimate_depth=None) -> dict:
    """Render with depth model ``dm``; estimate with ``estimate_depth(depth)`` (default: the same depth)."""
    estimate_depth = estimate_depth or (lambda z: z)
    render_sweep = physics.fog_sweep if arm == "fog" else physics.underwater_sweep
    t0 = time.process_time()
    v_hat, code, clean, clean_code, blank = [], [], [], [], []
    for _, im, d in scenes:
        z = d[dm]
        ze = estimate_depth(z)
        v, c = _estimate(list(render_sweep(im, z, physics.SWEEP_M)), ze, arm, kw)
        v_hat.append(v)
        code.append(c)
        v, c = _estimate([im], ze, arm, kw)
        clean.append(v[0])
        clean_code.append(c[0])
    for _, im, d in scenes[:10]:
        blank.append(_estimate([np.full_like(im, 128)], estimate_depth(d[dm]), arm, kw)[0][0])
    secs = time.process_time() - t0
    v_hat, code, clean, clean_code = map(np.asarray, (v_hat, code, clean, clean_code))
    ratio = v_hat / physics.SWEEP_M
    within = (ratio >= 0.5) & (ratio <= 2.0)
    thr = _gate.DEFAULT_THRESHOLD_M
    return {"arm": arm, "depth": dm, "variant": name, "n_images": len(scenes),
            "share_within_2_per_level": within.mean(axis=0).round(3).tolist(),
            "share_within_2_core": round(float(within[:, CORE].mean()), 4),
            "median_ratio_per_level": np.nanmedian(ratio, axis=0).round(3).tolist(),
            "share_opaque_per_level": (code < 0).mean(axis=0).round(3).tolist(),
            "gate_abstain_per_level": _gate.gate_decisions(v_hat, thr, code).mean(axis=0).round(3).tolist(),
            "clean_median_m": float(np.nanmedian(clean)), "clean_min_m": float(np.nanmin(clean)),
            "clean_below_gate": float(np.mean(clean < thr)),
            "clean_gate_abstain": float(np.mean(_gate.gate_decisions(clean, thr, clean_code))),
            "n_clean_below_gate": int(np.sum(clean < thr)),
            "blank_median_m": float(np.nanmedian(blank)), "cpu_s": round(secs, 1),
            "_v_hat": v_hat, "_code": code}


def show(row: dict) -> None:
    print(f"{row['arm']:10s} {row['depth']:9s} {row['variant']:20s} core={row['share_within_2_core']:.3f} "
          f"per-level={row['share_within_2_per_level']} median-ratio={row['median_ratio_per_level']} "
          f"opaque={row['share_opaque_per_level']} gate-abstain={row['gate_abstain_per_level']} "
          f"clean-median={row['clean_median_m']:.0f} m clean-min={row['clean_min_m']:.1f} m "
          f"clean_below_gate={row['n_clean_below_gate']}/{row['n_images']}={row['clean_below_gate']:.3f} "
          f"clean_gate_abstain={row['clean_gate_abstain']:.3f} "
          f"blank={row['blank_median_m']:.1f} m cpu={row['cpu_s']:.0f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-images", type=int, default=158)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--quantiles", action="store_true")
    ap.add_argument("--sensitivity", action="store_true", help="kappa = 0.5, 2 and a constant 13.8 m depth")
    ap.add_argument("--arms", nargs="+", default=["fog", "underwater"], choices=["fog", "underwater"])
    ap.add_argument("--depths", nargs="+", default=["ground", "billboard"], choices=["ground", "billboard"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    log = LoadLog("monitor")
    variants = {"default": {}}
    if args.variants:
        variants |= {"omega=0.95": {"omega": 0.95}, "median": {"method": "median"}, "lsq": {"method": "lsq"},
                     "window=transmission": {"window_space": "transmission"}, "known_veiling_light": None}
    if args.quantiles:
        variants |= {f"quantile={q}": {"quantile": q} for q in (0.5, 0.4, 0.3, 0.25)}
    scenes = list(load_scenes(args.n_images))
    results = {}
    for arm in args.arms:
        for dm in args.depths:
            for name, kw in variants.items():
                if kw is None:
                    kw = {"veiling_light": physics.FOG_AIRLIGHT if arm == "fog" else physics.underwater_veiling_light()}
                row = run_case(scenes, arm, dm, name, kw)
                results[f"{arm}/{dm}/{name}"] = row
                show(row)
    if args.sensitivity:
        wrong = {"kappa=0.5": lambda z: 0.5 * z, "kappa=2": lambda z: 2.0 * z,
                 f"constant={murk_depth.CONSTANT_DEPTH_M}m":
                     lambda z: np.full(z.shape, murk_depth.CONSTANT_DEPTH_M, dtype=np.float32)}
        for arm in args.arms:
            if f"{arm}/ground/default" not in results:
                results[f"{arm}/ground/default"] = run_case(scenes, arm, "ground", "default", {})
            oracle = results[f"{arm}/ground/default"]["_v_hat"]
            for name, f in wrong.items():
                row = run_case(scenes, arm, "ground", name, {}, estimate_depth=f)
                # against the oracle-depth estimate: a global factor should give exactly kappa
                rel = row["_v_hat"] / oracle
                row["median_ratio_to_oracle_per_level"] = np.nanmedian(rel, axis=0).round(4).tolist()
                row["max_abs_log2_ratio_to_oracle"] = float(np.nanmax(np.abs(np.log2(rel))))
                # the gate at 22.1 m: how often the wrong depth changes its decision against the oracle depth
                thr = _gate.DEFAULT_THRESHOLD_M
                o = results[f"{arm}/ground/default"]
                changed = (_gate.gate_decisions(row["_v_hat"], thr, row["_code"])
                           != _gate.gate_decisions(oracle, thr, o["_code"]))
                row["gate_changed_per_level"] = changed.mean(axis=0).round(3).tolist()
                row["gate_changed_share"] = round(float(changed.mean()), 4)
                results[f"{arm}/ground/{name}"] = row
                show(row)
                print(f"{'':41s} ratio-to-oracle={row['median_ratio_to_oracle_per_level']} "
                      f"max|log2 ratio|={row['max_abs_log2_ratio_to_oracle']:.4f} "
                      f"gate-changed={row['gate_changed_per_level']} gate_changed_share={row['gate_changed_share']:.3f}",
                      flush=True)
    print("levels (m):", physics.SWEEP_M.tolist())
    log.end()
    for k, arm in enumerate(args.arms):
        line = f"summary {arm}: oracle depth"
        for dm in args.depths:
            o = results[f"{arm}/{dm}/default"]
            line += (f" ({dm}) core={o['share_within_2_core']:.3f} "
                     f"clean_below_gate={o['n_clean_below_gate']}/{o['n_images']}")
        if args.sensitivity:
            for name in ("kappa=0.5", "kappa=2", f"constant={murk_depth.CONSTANT_DEPTH_M}m"):  # noqa: B007
                r = results[f"{arm}/ground/{name}"]
                line += (f"; {name}: median-ratio-to-oracle={np.nanmedian(r['median_ratio_to_oracle_per_level']):.3f} "
                         f"max|log2|={r['max_abs_log2_ratio_to_oracle']:.3f} "
                         f"gate_changed={r['gate_changed_share']:.3f} "
                         f"clean_below_gate={r['n_clean_below_gate']}/{r['n_images']}")
        if k == len(args.arms) - 1:
            line += f" {log.tail()}"
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {kk: (vv.tolist() if isinstance(vv, np.ndarray) else vv) for kk, vv in v.items()}
                       for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
