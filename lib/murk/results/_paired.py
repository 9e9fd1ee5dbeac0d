"""A paired difference between two image-level scores, with its bootstrap interval over the images both were run on."""

from __future__ import annotations

from typing import Callable

import numpy as np
import xarray as xr

from murk.results._analysis import common_images, condition_means


def paired_difference(a: xr.DataArray, b: xr.DataArray, cube: xr.Dataset, n_resamples: int, seed: int,
                      ci_level: float, counts: Callable[[int], np.ndarray]) -> tuple[float, float, float]:
    """Mean over images of ``a - b`` with its paired bootstrap interval.

    The images are those the models of ``a`` and ``b`` (their scalar ``model`` coordinates) were both run on
    (:func:`murk.results.common_images`): a model read out on its first n items is compared over those, with the
    draw of its own scores.

    Parameters
    ----------
    a, b : xarray.DataArray
        Image-level scores (dim ``image``, e.g. :func:`murk.results.image_scores` at one condition); a scalar
        ``model`` coordinate names the model of each.
    cube : xarray.Dataset
        The cube (or its VLMs) whose ``missing_reason`` says which images each model was run on.
    n_resamples, seed : int
        The bootstrap's resamples (the first rows of the draw) and seed (:func:`murk.results.condition_means`).
    ci_level : float
        The interval's level (0.95: the 2.5th and 97.5th percentiles).
    counts : callable
        The draw over ``n`` images (resamples × images) for ``n`` images, shared by every statistic of that size.

    Returns
    -------
    (float, float, float)
        The mean difference and its interval (NaN where no image has both).
    """
    ms = sorted({str(x["model"].values) for x in (a, b) if "model" in x.coords and x["model"].ndim == 0})
    keep = np.flatnonzero(common_images(cube, ms) if ms else np.ones(a.sizes["image"], bool))
    d = (a - b).isel(image=keep).expand_dims(k=[0])
    m = condition_means(d, n_resamples, seed, ci_level, counts=counts(keep.size))
    return tuple(float(m[v].sel(k=0)) for v in ("mean", "lo", "hi"))
