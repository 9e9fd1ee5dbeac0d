"""murk.results._paired: a paired difference over the images two models share."""

import numpy as np
import xarray as xr

from murk.results import _analysis as analysis
from murk.results import _cube as cube_
from murk.results import _paired as paired


def _draw(n):
    return analysis.resample_counts(n, 200, 0)


def test_paired_difference_is_the_mean_difference_with_a_paired_interval():
    a = xr.DataArray([1.0, 1.0, 0.0, 1.0], dims="image")
    b = xr.DataArray([0.0, 1.0, 0.0, 0.0], dims="image")
    cube = xr.Dataset(coords={"image": [1, 2, 3, 4]})
    mean, lo, hi = paired.paired_difference(a, b, cube, 200, 0, 0.95, _draw)
    assert mean == 0.5 and 0.0 <= lo <= mean <= hi <= 1.0
    # equal scores: no difference, and no spread (pairing removes the image-to-image variation)
    assert paired.paired_difference(a, a, cube, 200, 0, 0.95, _draw) == (0.0, 0.0, 0.0)


def test_paired_difference_keeps_the_images_both_models_were_run_on():
    models = ["org/a", "org/b"]
    cube = xr.Dataset({"missing_reason": (("model", "image"), np.array([["", "", "", ""],
                                                                          ["", "", cube_.NOT_RUN, cube_.NOT_RUN]], object))},
                      coords={"model": models, "image": [1, 2, 3, 4]})
    a = xr.DataArray([1.0, 0.0, 1.0, 1.0], dims="image", coords={"model": "org/a"})
    b = xr.DataArray([0.0, 0.0, np.nan, np.nan], dims="image", coords={"model": "org/b"})
    sizes = []

    def draw(n):
        sizes.append(n)
        return _draw(n)

    mean, _, _ = paired.paired_difference(a, b, cube, 200, 0, 0.95, draw)
    assert sizes == [2] and mean == 0.5          # over b's two images, with the draw of two
