"""Benchmark: accuracy of the visibility monitor on the COCO sample (issue 9).

Renders the fog and underwater sweeps (spec Sec. III, ``physics.SWEEP_M``) of the
images of ``../shared/coco-val2017-sample`` at the presented size (longer side
448 px) with a known depth (``ground``: :func:`murk.monitor.ground_plane_depth`;
``billboard``: the annotated boxes stood on it, :func:`murk.monitor.billboard_depth`)
and estimates V_hat with the same depth. Prints, per arm, depth model and
estimator variant, the share of images with V_hat within a factor 2 of V at each
level, the share over 3.9-62.5 m (the issue's criterion: >= 0.8) and the median
ratio V_hat / V per level, plus the median V_hat of the clean images and of a
uniform grey image.

Run ``python benchmarks/monitor.py [--n-images 158] [--variants] [--json out.json]``
(all 158 images, default estimator: about a minute per arm and depth model on one
core; ``--variants`` adds omega = 0.95, ``method="lsq"``, He et al.'s transmission
window and the spec's known veiling light).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from murk import monitor, paths, physics, render

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
        full = render.load_image(root / "val2017" / rec["file_name"])
        size = render.presented_size(full.shape[1], full.shape[0])
        image = render.resize_image(full, size)
        ground = monitor.ground_plane_depth(image.shape[0], image.shape[1])
        scaled = [render.scale_bbox(b, (full.shape[1], full.shape[0]), size) for b in boxes.get(rec["id"], [])]
        yield rec["id"], image, {"ground": ground, "billboard": monitor.billboard_depth(ground, scaled)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-images", type=int, default=158)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    variants = {"default": {}}
    if args.variants:
        variants |= {"omega=0.95": {"omega": 0.95}, "lsq": {"method": "lsq"},
                     "window=transmission": {"window_space": "transmission"}, "known_veiling_light": None}
    scenes = list(load_scenes(args.n_images))
    results = {}
    for arm in ("fog", "underwater"):
        for dm in ("ground", "billboard"):
            for name, kw in variants.items():
                if kw is None:
                    kw = {"veiling_light": physics.FOG_AIRLIGHT if arm == "fog" else physics.underwater_veiling_light()}
                t0 = time.process_time()
                v_hat = np.array([monitor.estimate_sweep(im, d[dm], arm, **kw) for _, im, d in scenes])
                clean = np.array([monitor.estimate_visibility(im, d[dm], arm, **kw) for _, im, d in scenes])
                blank = np.array([monitor.estimate_visibility(np.full_like(im, 128), d[dm], arm, **kw)
                                  for _, im, d in scenes[:10]])
                secs = time.process_time() - t0
                ratio = v_hat / physics.SWEEP_M
                within = (ratio >= 0.5) & (ratio <= 2.0)
                row = {"arm": arm, "depth": dm, "variant": name, "n_images": len(scenes),
                       "share_within_2_per_level": within.mean(axis=0).round(3).tolist(),
                       "share_within_2_core": round(float(within[:, CORE].mean()), 4),
                       "median_ratio_per_level": np.nanmedian(ratio, axis=0).round(3).tolist(),
                       "clean_median_m": float(np.nanmedian(clean)), "clean_min_m": float(np.nanmin(clean)),
                       "blank_median_m": float(np.nanmedian(blank)), "cpu_s": round(secs, 1)}
                results[f"{arm}/{dm}/{name}"] = row
                print(f"{arm:10s} {dm:9s} {name:20s} core={row['share_within_2_core']:.3f} "
                      f"per-level={row['share_within_2_per_level']} median-ratio={row['median_ratio_per_level']} "
                      f"clean-median={row['clean_median_m']:.0f} m clean-min={row['clean_min_m']:.0f} m "
                      f"blank={row['blank_median_m']:.1f} m cpu={secs:.0f}s", flush=True)
    print("levels (m):", physics.SWEEP_M.tolist())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
