"""Every score of every condition into the numbers file, so that the paper can cite any of them.

Keys: ``<readout>.<level>.<arm>.<task>.<model>`` (means, ``.ci`` their interval; ``<level>`` is ``clean``, the exact
visibility such as ``1.953125``, or ``end``), ``ece|auroc.<confidence>.<level>.<arm>.<task>.<model>``,
``coverage|risk.<option>.<level>.<arm>.<task>.<model>``, ``v.<readout>.<arm>.<task>.<model>`` (crossings),
``w.<signal>.…`` (W), ``v.correct_blank.…`` (blank floor), ``mono.<signal>.<arm>.<task>.<model>`` (raw share of
wrong-way pairs; ``.sig`` beyond two standard errors; ``.count``), ``correct.<control>.<task>.<model>`` and
``confident.acc|n.<model>``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import xarray as xr

from murk.core import CONTROL_ARMS
from murk.report._findings import crossing_text
from murk.report._format import fmt_visibility_interval, level_label
from murk.report._numbers import Numbers
from murk.results import STATS


def record_scores(numbers: Numbers, sc: xr.Dataset, cross: xr.Dataset, models: Sequence[str],
                  key: Callable[[str], str], physical: Sequence[str], end: int) -> None:
    """Record every score of every condition of ``models`` (the keys above) into ``numbers``.

    Parameters
    ----------
    numbers : murk.report.Numbers
        The numbers being written (each key is recorded with :meth:`murk.report.Numbers.record`, so that it
        keeps the label of the notebook cell that calls this).
    sc : xarray.Dataset
        The scores (:func:`murk.results.analyse` ``["scores"]``, a ``stat`` dim: point, lo, hi).
    cross : xarray.Dataset
        The crossings (``["crossings"]``).
    models : sequence of str
        The VLMs.
    key : callable
        A model's part of a numbers key (:func:`murk.core.model_slug`).
    physical : sequence of str
        The physical arms of the scores.
    end : int
        The index of the last, murkiest level (its keys are also recorded with the level ``end``).
    """
    record = numbers.record

    def est(var: str, **sel) -> tuple[float, float, float]:
        x = sc[var].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in STATS)

    def vis(arm: str):   # the level's visibility on this arm (the cube's coordinate is per arm)
        v = sc["visibility_m"]
        return v.sel(arm=arm) if "arm" in v.dims else v

    for m in models:
        k = key(m)
        for arm in physical:
            for task in sc["task"].values:
                for lvl in sc["level"].values:
                    labels = [level_label(vis(arm).sel(level=lvl))] + (["end"] if lvl == end else [])
                    cell = dict(model=m, arm=arm, level=lvl, task=task)
                    for lab in labels:
                        for ro in sc["readout"].values:
                            pt, lo, hi = est("mean", **cell, readout=ro)
                            record(f"{ro}.{lab}.{arm}.{task}.{k}", pt, ci=(lo, hi))
                        for opt in sc["option"].values:
                            for var in ("coverage", "risk"):
                                pt, lo, hi = est(var, **cell, option=opt)
                                record(f"{var}.{opt}.{lab}.{arm}.{task}.{k}", pt, ci=(lo, hi))
                        for conf in sc["confidence"].values:
                            for var in ("ece", "auroc"):
                                pt, lo, hi = est(var, **cell, confidence=conf)
                                record(f"{var}.{conf}.{lab}.{arm}.{task}.{k}", pt, ci=(lo, hi))
                c = dict(model=m, arm=arm, task=task)
                for ro in sc["readout"].values:
                    cr = cross.sel(**c, readout=ro)
                    side = str(cr["censored_side"].values)
                    record(f"v.{ro}.{arm}.{task}.{k}", crossing_text(float(cr["v_cross_m"]), np.nan, np.nan, side))
                    record(f"v.{ro}.{arm}.{task}.{k}.ci", "" if side or not np.isfinite(float(cr["v_cross_m"]))
                           else fmt_visibility_interval(float(cr["v_lo_m"]), float(cr["v_hi_m"])))
                    if ro != "correct":
                        record(f"w.{ro}.{arm}.{task}.{k}", float(cr["w"]), ci=(float(cr["w_lo"]), float(cr["w_hi"])),
                               lower=bool(cr["w_lower_bound"]), upper=bool(cr["w_upper_bound"]))
                    pairs = int(sc["mono_pairs"].sel(**c, readout=ro))
                    raw, sig = float(sc["mono_raw"].sel(**c, readout=ro)), float(sc["mono_beyond_noise"].sel(**c, readout=ro))
                    record(f"mono.{ro}.{arm}.{task}.{k}", raw)
                    record(f"mono.{ro}.{arm}.{task}.{k}.sig", sig)
                    record(f"mono.{ro}.{arm}.{task}.{k}.count", f"{round(raw * pairs) if pairs else 0}/{pairs}")
                    record(f"mono.{ro}.{arm}.{task}.{k}.sig.count", f"{round(sig * pairs) if pairs else 0}/{pairs}")
                pt, lo, hi = est("v_acc_blank_m", **c)
                cb = str(sc["censored_blank_side"].sel(**c).values)
                record(f"v.correct_blank.{arm}.{task}.{k}", crossing_text(pt, np.nan, np.nan, cb))
                record(f"v.correct_blank.{arm}.{task}.{k}.ci", fmt_visibility_interval(lo, hi) if np.isfinite(pt) and not cb
                       else "")
        for task in sc["task"].values:
            for ctrl in CONTROL_ARMS:
                pt, lo, hi = est("mean", model=m, arm=ctrl, level=0, task=task, readout="correct")
                record(f"correct.{ctrl}.{task}.{k}", pt, ci=(lo, hi))
        pt, lo, hi = est("confident_accuracy", model=m)
        record(f"confident.acc.{k}", pt, ci=(lo, hi))
        record(f"confident.n.{k}", int(sc["confident_n"].sel(model=m)))
