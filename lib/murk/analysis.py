"""From the cube to the study's summaries: condition means, crossings, W.

Every statistic is an image-level mean with a percentile bootstrap interval
over images (spec Sec. III), paired: the same resampled image indices serve
every model, arm, level, task and read-out, so differences and crossings are
consistent. Resampled means are computed as a (resamples × images) count
matrix times the data, i.e. without a Python loop over resamples.
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from murk import cube, metrics

__all__ = ["SIGNALS", "AWARENESS_SIGNALS", "image_scores", "resample_counts", "condition_means",
           "floor_of", "crossing_table"]

#: read-outs summarised per condition
SIGNALS = ("correct", "c_int", "verbal_conf", "abstain", "abstain2")
#: awareness signals whose crossing is compared with accuracy's (spec Sec. III)
AWARENESS_SIGNALS = ("c_int", "verbal_conf", "abstain", "abstain2")


def image_scores(ds: xr.Dataset) -> xr.DataArray:
    """Image-level scores with ``task`` in (t2, t3) and ``readout`` in :data:`SIGNALS`.

    Parameters
    ----------
    ds : the cube (:mod:`murk.cube`)

    Returns
    -------
    float64 DataArray (model, arm, level, task, image, readout)
    """
    value = ds["value"].sel(readout=list(SIGNALS)).astype(np.float64)
    return cube.t3_image_scores(value).transpose("model", "arm", "level", "task", "image", "readout")


def resample_counts(n_images: int, n_resamples: int, seed: int) -> np.ndarray:
    """How often each image is drawn in each bootstrap resample.

    Parameters
    ----------
    n_images, n_resamples : int
    seed : int
        Seed of :func:`murk.metrics.bootstrap_indices` (paired resampling).

    Returns
    -------
    float64 ndarray (n_resamples, n_images); each row sums to ``n_images``.
    """
    idx = metrics.bootstrap_indices(n_images, n_resamples, seed)
    counts = np.zeros((n_resamples, n_images))
    np.add.at(counts, (np.repeat(np.arange(n_resamples), n_images), idx.ravel()), 1.0)
    return counts


def _resampled_means(scores: xr.DataArray, counts: np.ndarray) -> xr.DataArray:
    """NaN-aware means over ``image`` for each resample: (bootstrap, ...)."""
    x = scores.transpose("image", ...)
    v = x.values.reshape(x.sizes["image"], -1)
    ok = ~np.isnan(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = (counts @ np.where(ok, v, 0.0)) / (counts @ ok)
    dims = ("bootstrap", *x.dims[1:])
    shape = (counts.shape[0], *x.shape[1:])
    coords = {k: c for k, c in x.coords.items() if "image" not in c.dims}
    return xr.DataArray(m.reshape(shape), dims=dims, coords=coords)


def condition_means(scores: xr.DataArray, n_resamples: int = 1000, seed: int = 0,
                    ci_level: float = 0.95) -> xr.Dataset:
    """Mean over images per condition with a paired percentile bootstrap interval.

    Parameters
    ----------
    scores : DataArray with an ``image`` dim (e.g. :func:`image_scores`)
    n_resamples : int
        1000 for per-condition values (spec Sec. III).
    seed : int
    ci_level : float
        Central interval mass (0.95).

    Returns
    -------
    Dataset with ``mean``, ``lo``, ``hi`` and ``n`` (images with a value), dims of
    ``scores`` without ``image``.
    """
    counts = resample_counts(scores.sizes["image"], n_resamples, seed)
    boot = _resampled_means(scores, counts)
    a = (1 - ci_level) / 2
    with warnings.catch_warnings():  # cells that do not exist (e.g. blank at level 3) are all-NaN: NaN is right
        warnings.simplefilter("ignore", RuntimeWarning)
        q = boot.quantile([a, 1 - a], dim="bootstrap", skipna=True)
    return xr.Dataset({
        "mean": scores.mean("image", skipna=True),
        "lo": q.isel(quantile=0, drop=True),
        "hi": q.isel(quantile=1, drop=True),
        "n": scores.notnull().sum("image"),
    })


def floor_of(task: str, signal: str, chance: dict | None = None) -> float:
    """Reference floor of a signal (spec Sec. III, "Crossing points").

    Chance (0.25 for t2, 0.5 for t3) for accuracy and confidences; 1 for the
    abstain rates, which rise towards it.
    """
    chance = chance or {"t2": 0.25, "t3": 0.5}
    return 1.0 if signal.startswith("abstain") else float(chance[task])


def crossing_table(scores: xr.DataArray, n_resamples: int = 2000, seed: int = 0,
                   ci_level: float = 0.95, chance: dict | None = None,
                   arms=cube.PHYSICAL_ARMS) -> xr.Dataset:
    """Crossing visibilities and blind-spot widths with bootstrap intervals.

    For each model, physical arm, task and signal: the crossing visibility
    (:func:`murk.metrics.crossing_visibility`, levels 1-8 against the clean
    value at level 0), and for each awareness signal W = log10(V_acc / V_aware)
    (:func:`murk.metrics.blind_spot_width`). Intervals come from 2000 paired
    image resamples (spec Sec. III).

    Returns
    -------
    Dataset (model, arm, task, readout) with ``v_cross_m``, ``v_lo_m``,
    ``v_hi_m``, ``censored`` (bool), ``w``, ``w_lo``, ``w_hi`` (decades; NaN for
    ``correct``) and ``w_lower_bound`` (bool: V_aware censored, so W is "≥").
    """
    x = scores.sel(arm=list(arms))
    vis = x["visibility_m"].values[1:]
    counts = resample_counts(x.sizes["image"], n_resamples, seed)
    point = x.mean("image", skipna=True)                           # (model, arm, level, task, readout)
    boot = _resampled_means(x, counts)                             # (bootstrap, model, arm, level, task, readout)
    floors = xr.DataArray(
        [[floor_of(t, s, chance) for s in x["readout"].values] for t in x["task"].values],
        dims=("task", "readout"), coords={"task": x["task"], "readout": x["readout"]})

    def cross(m: xr.DataArray):
        m = m.transpose(..., "level")
        like = m.isel(level=0, drop=True)
        fl = floors.broadcast_like(like).transpose(*like.dims)
        v, c = metrics.crossing_visibility(vis, m.isel(level=slice(1, None)).values, like.values, fl.values)
        return like.copy(data=np.asarray(v, float)), like.copy(data=np.asarray(c, bool))

    v, cens = cross(point)
    with warnings.catch_warnings():  # signals without any crossing give all-NaN slices: NaN is the answer
        warnings.simplefilter("ignore", RuntimeWarning)
        vb, _ = cross(boot)
        return _crossing_dataset(x, v, cens, vb, ci_level)


def _crossing_dataset(x, v, cens, vb, ci_level):
    a = (1 - ci_level) / 2
    out = xr.Dataset({"v_cross_m": v, "censored": cens,
                      "v_lo_m": vb.quantile(a, "bootstrap", skipna=True).drop_vars("quantile"),
                      "v_hi_m": vb.quantile(1 - a, "bootstrap", skipna=True).drop_vars("quantile")})
    w = xr.DataArray(metrics.blind_spot_width(v.sel(readout="correct").values[..., None], v.values),
                     dims=v.dims, coords=v.coords)
    wb = xr.DataArray(metrics.blind_spot_width(vb.sel(readout="correct").values[..., None], vb.values),
                      dims=vb.dims, coords=vb.coords)
    not_acc = x["readout"] != "correct"
    out["w"] = w.where(not_acc)
    out["w_lo"] = wb.quantile(a, "bootstrap", skipna=True).drop_vars("quantile").where(not_acc)
    out["w_hi"] = wb.quantile(1 - a, "bootstrap", skipna=True).drop_vars("quantile").where(not_acc)
    out["w_lower_bound"] = cens & not_acc
    out["v_cross_m"].attrs.update(units="m", long_name="crossing visibility")
    out["w"].attrs.update(units="decades", long_name="blind-spot width W = log10(V_acc / V_aware)")
    return out
