"""Rates and image-level means the analysis pools: the verbal parse and cut rates over blocks of the cube, and
question-level values (t3's two questions per image) back to images."""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import xarray as xr


def pooled_rates(parts: Sequence[xr.Dataset], dims) -> xr.Dataset:
    """Parse and limit-hit rates of several blocks of verbal rates pooled over ``dims``, weighted by the
    continuations asked.

    Parameters
    ----------
    parts : sequence of xarray.Dataset
        Blocks of :func:`murk.results.verbal_rates` (``n_asked``, ``parse_rate``, ``limit_hit_rate``), e.g. one
        arm with every level and the other arms without their clean level (counted once).
    dims : str or list of str
        The dimensions pooled over (``["level"]``).

    Returns
    -------
    xarray.Dataset
        ``n_asked`` (sum), ``parse_rate`` and ``limit_hit_rate`` (shares of the continuations asked; NaN where
        none was asked; a limit-hit rate not recorded in any block stays NaN).

    Examples
    --------
    >>> r = xr.Dataset({"n_asked": ("level", [10, 30]), "parse_rate": ("level", [1.0, 0.5]),
    ...                 "limit_hit_rate": ("level", [0.0, 0.1])})
    >>> p = pooled_rates([r], ["level"])
    >>> int(p["n_asked"]), float(p["parse_rate"]), round(float(p["limit_hit_rate"]), 3)
    (40, 0.625, 0.075)
    """
    n = sum(r["n_asked"].sum(dims) for r in parts)
    parsed = sum((r["parse_rate"] * r["n_asked"]).fillna(0).sum(dims) for r in parts)
    cut = sum((r["limit_hit_rate"] * r["n_asked"]).sum(dims, min_count=1) for r in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return xr.Dataset({"n_asked": n, "parse_rate": (parsed / n).where(n > 0),
                           "limit_hit_rate": (cut / n).where(n > 0)})


def per_image(x: np.ndarray, n_img: int) -> np.ndarray:
    """Question values (arm, level, unit) as image values (arm, level, image): the questions of an image averaged,
    as the cube's scores average t3's two questions.

    Parameters
    ----------
    x : numpy.ndarray
        Shape (arm, level, unit), units ordered question-major: unit ``q * n_img + i`` is question ``q`` of image
        ``i`` (:func:`murk.results.question_scores`; t2: one question, t3: two).
    n_img : int
        The images; ``x.shape[2]`` is a multiple of it.

    Returns
    -------
    numpy.ndarray
        Shape (arm, level, ``n_img``); NaN where every question of the image is NaN.

    Examples
    --------
    >>> per_image(np.array([[[1.0, 0.0, 0.0, np.nan]]]), 2)
    array([[[0.5, 0. ]]])
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x.reshape(x.shape[0], x.shape[1], x.shape[2] // n_img, n_img), axis=2)
