"""The study's design checks as the analysis notebook records and shows them: the control floors and t3's blank-image
answer (the design diagnostics), the box marker's contrast, and the comparison with another design's run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import xarray as xr

from murk import core, protocol, results, scene
from murk.report._design_words import describe_design, design_name
from murk.report._format import fmt, fmt_estimate, fmt_level
from murk.report._markdown import estimate_cell, markdown_table, verbatim
from murk.report._tables import design_comparison_words, design_row, diagnostic_finding, marker_finding

if TYPE_CHECKING:
    import pandas as pd


def diagnostics_table(numbers, ds: xr.Dataset, sc: xr.Dataset, image_scores: xr.DataArray, table: pd.DataFrame,
                      models: Sequence[str], name: Callable[[str], str], key: Callable[[str], str],
                      chance: Mapping[str, float], t3_options: Sequence[str], draw: Callable[[int], np.ndarray],
                      n_resamples: int, ci_level: float) -> tuple[str, dict[str, list[str]]]:
    """The design diagnostics per model and task (the control floors against chance and the prior guesser, t3's most
    frequent blank-image answer), recording ``diagnostic.*`` and ``finding.diagnostic`` into ``numbers``.

    The floors of every model, control and task are one family of tests (:func:`murk.results.floor_verdicts`,
    Holm-adjusted at ``alpha = 1 - ci_level``).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    ds : xarray.Dataset
        The VLMs' cube (``value``, dims model × arm × level × task × image × readout; ``n_items``).
    sc : xarray.Dataset
        The scores (``mean`` with a ``stat`` dim: point, lo, hi).
    image_scores : xarray.DataArray
        :func:`murk.results.image_scores` of ``ds`` (model, arm, level, task = t2 | t3, image, readout).
    table : pandas.DataFrame
        The selected items (``image_id``, ``t2_options``, ``t2_answer_index``; may be empty).
    models, name, key
        The VLMs, their display names and their slugs in numbers keys.
    chance : mapping
        Task -> chance accuracy.
    t3_options : sequence of str
        t3's answer options (the answer read-out indexes them).
    draw : callable
        ``n`` -> the bootstrap draw over ``n`` images (resamples × images; its first ``n_resamples`` rows are used).
    n_resamples : int
        The per-condition resamples.
    ci_level : float
        The interval level in (0, 1).

    Returns
    -------
    md : str
        The Markdown table, one row per model and task.
    dominated : dict
        t3 answer -> the models, as "name (share)", that give it to at least
        :data:`murk.results.DOMINANT_SHARE` of the blank image's t3 questions.
    """
    record = numbers.record

    def est(**sel) -> tuple[float, float, float]:
        x = sc["mean"].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in results.STATS)

    rows, flagged, floors, dominated = [], set(), {}, {}
    family: list[tuple] = []   # (model, control, task, estimate, replicates, chance, guesser, table row)
    for m in models:
        ids = set(ds["image"].values[results.common_images(ds, [m])].tolist())
        mine = table[table["image_id"].isin(ids)] if len(table) and "t2_options" in table else table.iloc[:0]
        guesser = {"t2": results.prior_guesser_accuracy(list(mine["t2_options"]), list(mine["t2_answer_index"]))
                   if len(mine) else np.nan,
                   "t3": results.majority_guesser_accuracy(["true", "false"] * len(ids))}
        blank_t3 = ds["value"].sel(model=m, arm="blank", level=0, task=["t3_true", "t3_false"], readout="answer")
        try:
            shares = results.answer_shares(blank_t3.values, len(t3_options))
        except ValueError:   # an answer outside the options: no share to read
            shares = np.full(len(t3_options), np.nan)
        top = results.dominant_answer(shares)
        top_k = int(np.nanargmax(shares)) if np.isfinite(shares).any() else None
        record(f"diagnostic.t3_blank_top_share.{key(m)}", shares[top_k] if top_k is not None else np.nan)
        record(f"diagnostic.t3_blank_top_answer.{key(m)}", t3_options[top_k] if top_k is not None else "n/a")
        if top is not None:
            dominated.setdefault(t3_options[top], []).append(f"{name(m)} ({fmt(shares[top])})")
            flagged.add(m)
        for task in ("t2", "t3"):
            row = {"VLM": name(m), "task": task, "chance": fmt(chance[task]),
                   "prior guesser": fmt(guesser[task]) if np.isfinite(guesser[task]) else "n/a"}
            record(f"diagnostic.guesser.{task}.{key(m)}", guesser[task])
            for ctrl in core.CONTROL_ARMS:
                e = est(model=m, arm=ctrl, level=0, task=task, readout="correct")
                # the replicates of the draw behind the interval (the model's own images), for the family's p-values
                keep = np.flatnonzero(results.common_images(ds, [m]))
                x_ = image_scores.sel(model=m, arm=ctrl, level=0, task=task, readout="correct").isel(image=keep).values
                reps = results.resampled_means(x_, draw(keep.size)[:n_resamples])
                row[f"{ctrl} accuracy"] = estimate_cell(fmt_estimate(*e))
                row[f"{ctrl} floor"] = ""   # the family's verdict, below
                family.append((m, ctrl, task, e, reps, chance[task], guesser[task], row))
            row["t3 on the blank: top answer"] = (f"{t3_options[top_k]} ({fmt(shares[top_k])})"
                                                  if task == "t3" and top_k is not None else "")
            rows.append(row)
    verdicts = results.floor_verdicts([f[3] for f in family], [f[4] for f in family], [f[5] for f in family],
                                      [f[6] for f in family], alpha=1 - ci_level)
    record("diagnostic.floor_family", sum(np.isfinite(f[3][0]) for f in family))
    for (m, ctrl, task, e, _, _, _, row), v in zip(family, verdicts):
        record(f"diagnostic.floor.{ctrl}.{task}.{key(m)}", v)
        row[f"{ctrl} floor"] = v
        if v in (results.BELOW_CHANCE, results.ABOVE_GUESSER):
            floors.setdefault((ctrl, task, v), []).append(f"{name(m)} ({fmt_estimate(*e)})")
            flagged.add(m)
    record("finding.diagnostic", diagnostic_finding(floors, dominated, [name(m) for m in models if m not in flagged]))
    return markdown_table(rows), dominated


def marker_contrasts(table: pd.DataFrame, image_dir: str | Path, render: Mapping[str, Any], depth: Mapping | None,
                     v_end: float) -> dict[str, list[float]]:
    """The box marker's contrast (:func:`murk.results.marker_contrast`) of every item, on the clean image and at
    visibility ``v_end`` in fog and under water.

    Parameters
    ----------
    table : pandas.DataFrame
        The selected items (``file_name``, ``width``, ``height``, ``image_id``, ``bbox``).
    image_dir : path
        The folder of the images.
    render : mapping
        The configuration's ``render`` section (``max_side_px``, ``box_width_px``, optional ``box_color_rgb``).
    depth : mapping or None
        :func:`murk.scene.current_depth` of the output root (``path``: the depth cache); None: no renderings.
    v_end : float
        The murkiest level's visibility, metres.

    Returns
    -------
    dict
        ``clean``, ``fog``, ``underwater`` -> one contrast per item rendered (an item with bad input or a failed
        rendering is left out; the cube records it as missing).
    """
    width, color = int(render["box_width_px"]), tuple(render.get("box_color_rgb", (255, 0, 0)))
    contrast: dict[str, list[float]] = {"clean": [], "fog": [], "underwater": []}
    n_marker = len(table) if depth is not None and "file_name" in table else 0
    for i in core.bar(range(n_marker), desc="analyse: marker contrast", unit="img") if n_marker else []:
        row = table.iloc[i]
        try:  # bad input or a failed rendering: left out here, recorded as missing in the cube
            img, size = scene.load_presented(Path(image_dir) / row["file_name"], render["max_side_px"],
                                             expected_size=(int(row["width"]), int(row["height"])))
            z = scene.load_depth(depth["path"], int(row["image_id"]), shape=img.shape[:2])
            shown = {"clean": img, "fog": scene.fog_sweep(img, z, np.asarray([v_end]))[0],
                     "underwater": scene.underwater_sweep(img, z, np.asarray([v_end]))[0]}
        except (FileNotFoundError, ValueError, OSError):
            continue
        bbox = scene.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
        for arm, x in shown.items():
            contrast[arm].append(results.marker_contrast(scene.draw_box(x, bbox, width, color), x))
    return contrast


def marker_table(numbers, contrast: Mapping[str, Sequence[float]], width_px: int,
                 v_end: float) -> tuple[str, dict[str, float]]:
    """The box marker's median contrast and the share of items where it is hard to see, per image kind, recording
    ``diagnostic.marker.*`` and ``finding.diagnostic_marker`` into ``numbers``.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    contrast : mapping
        ``clean``, ``fog``, ``underwater`` -> the items' contrasts (:func:`marker_contrasts`; NaN entries ignored).
    width_px : int
        The box's line width, pixels.
    v_end : float
        The murkiest level's visibility, metres.

    Returns
    -------
    md : str
        The Markdown table, one row per image kind.
    hard : dict
        Image kind -> the share of items below :data:`murk.results.HARD_TO_SEE_CONTRAST` (NaN: none rendered).
    """
    record = numbers.record
    record("diagnostic.marker.width_px", width_px)
    record("diagnostic.marker.patch_px", results.PATCH_PX)
    record("diagnostic.marker.threshold", fmt(results.HARD_TO_SEE_CONTRAST))
    record("diagnostic.marker.v_end_m", fmt_level(v_end))
    rows, hard = [], {}
    for arm, c in contrast.items():
        c = np.asarray(c, float)
        ok = c[np.isfinite(c)]
        med = float(np.median(ok)) if ok.size else np.nan
        share = float(np.mean(ok < results.HARD_TO_SEE_CONTRAST)) if ok.size else np.nan
        hard[arm] = share
        record(f"diagnostic.marker.median.{arm}", med)
        record(f"diagnostic.marker.hard_share.{arm}", share)
        record(f"diagnostic.marker.n.{arm}", int(ok.size))
        rows.append({"image": "clean" if arm == "clean" else f"{arm}, V = {fmt_level(v_end)} m", "items": str(ok.size),
                     "median contrast": fmt(med), "hard to see": fmt(share)})
    record("finding.diagnostic_marker", marker_finding(hard, width_px, v_end))
    return markdown_table(rows), hard


def design_comparison(numbers, ds: xr.Dataset, compare_with: str | Path | None, output_dir: str | Path | None,
                      models: Sequence[str], name: Callable[[str], str], key: Callable[[str], str],
                      chance: Mapping[str, float]) -> tuple[list[dict[str, str]], str | None]:
    """This design's floors, t3 blank-image answer share and V_acc (:func:`murk.results.design_summary`), and those
    of another design's run on the models and images both read out, recording ``diagnostic.compare.*`` and
    ``finding.design_comparison`` into ``numbers``.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    ds : xarray.Dataset
        This run's VLM cube, restricted to its design.
    compare_with : path or None
        The output folder of the other design's run (its ``cube.zarr`` and ``items.json``); None or empty: none.
    output_dir : path or None
        This run's output folder (a ``compare_with`` naming it is not compared).
    models, name, key
        The VLMs, their display names and their slugs in numbers keys.
    chance : mapping
        Task -> chance accuracy.

    Returns
    -------
    rows : list of dict
        The comparison table's rows (:func:`murk.report.design_row`).
    why : str or None
        Why the comparison was not made (``compare_with`` names this folder or a folder without an analysed run);
        None otherwise.
    """
    record = numbers.record
    rows, why, o_ds, o_cfg, other_root = [], None, None, None, None
    if compare_with:
        other_root = Path(compare_with).expanduser().resolve()
        if other_root == Path(core.output_dir(output_dir)).resolve():
            why = f"compare_with names this run's own folder {verbatim(other_root)}"
        elif not core.cube_store(other_root).exists() or not core.items_file(other_root).is_file():
            why = (f"{verbatim(other_root)} holds no analysed run (cube.zarr, items.json): run that design first, "
                   f"e.g. make demo for the study's design into outputs")
        else:
            _, o_meta = protocol.read_items(other_root)
            o_cfg = protocol.config_of(o_meta)
            o_ds = protocol.restrict_to_design(results.open_cube(core.cube_store(other_root)).load(), o_cfg)
            record("diagnostic.compare.root", str(other_root))
            record("diagnostic.compare.design_there", describe_design(o_cfg))
    sentences = []
    o_models = set(map(str, o_ds["model"].values)) if o_ds is not None else set()
    for m in models:
        mine = ds["image"].values[results.common_images(ds, [m])].tolist()
        if m not in o_models:   # this design alone, on the model's own images
            rows.append(design_row(name(m), "this design", results.design_summary(ds, m, mine, chance), len(mine)))
            continue
        o_sub = o_ds.sel(model=[m])
        ids = sorted(set(mine) & set(o_sub["image"].values[results.common_images(o_sub, [m])].tolist()))
        record(f"diagnostic.compare.n_images.{key(m)}", len(ids))
        if not ids:
            rows.append(design_row(name(m), "this design", results.design_summary(ds, m, mine, chance), len(mine)))
            sentences.append(f"{name(m)} was read out on no image that both runs share.")
            continue
        a = results.design_summary(ds, m, ids, chance)
        b = results.design_summary(o_ds, m, ids, chance)
        for k_, v_ in a.items():
            record(f"diagnostic.compare.here.{k_}.{key(m)}", v_)
            record(f"diagnostic.compare.there.{k_}.{key(m)}", b[k_])
        rows += [design_row(name(m), "this design", a, len(ids)), design_row(name(m), "compared design", b, len(ids))]
        sentences.append(design_comparison_words(name(m), len(ids), a, b, chance["t2"]))
    if not compare_with:
        out = ("No other design's run was given to compare with (the run setting compare_with); the table gives "
               "this design's numbers on each model's own images.")
    elif why:
        out = f"The design comparison was not made: {why}."
    else:
        out = (f"The run compared, in {verbatim(other_root)}, uses {design_name(o_cfg)}. " + " ".join(sentences)
               + ("" if o_models & set(models) else " It read out none of this run's models."))
    record("finding.design_comparison", out)
    return rows, why
