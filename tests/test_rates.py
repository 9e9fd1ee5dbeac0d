"""murk.results._rates: verbal rates pooled over blocks, question values back to images."""

import numpy as np
import xarray as xr

from murk.results import _rates as rates


def _block(n, parsed, cut):
    return xr.Dataset({"n_asked": ("level", np.asarray(n)), "parse_rate": ("level", np.asarray(parsed, float)),
                       "limit_hit_rate": ("level", np.asarray(cut, float))})


def test_pooled_rates_weights_by_the_continuations_asked():
    p = rates.pooled_rates([_block([10, 30], [1.0, 0.5], [0.0, 0.1]), _block([0, 60], [np.nan, 0.0], [np.nan, 0.5])],
                           ["level"])
    assert int(p["n_asked"]) == 100
    assert float(p["parse_rate"]) == (10 + 15 + 0) / 100        # a level asked nothing adds nothing
    assert np.isclose(float(p["limit_hit_rate"]), (0 + 3 + 30) / 100)


def test_pooled_rates_is_nan_where_nothing_was_asked():
    p = rates.pooled_rates([_block([0, 0], [np.nan, np.nan], [np.nan, np.nan])], ["level"])
    assert int(p["n_asked"]) == 0 and np.isnan(float(p["parse_rate"])) and np.isnan(float(p["limit_hit_rate"]))
    # a limit-hit rate not recorded (an older store) stays unknown, the parse rate does not
    p = rates.pooled_rates([_block([4], [0.5], [np.nan])], ["level"])
    assert float(p["parse_rate"]) == 0.5 and np.isnan(float(p["limit_hit_rate"]))


def test_per_image_averages_the_questions_of_each_image():
    # one arm, two levels, two questions of three images: unit q * 3 + i
    x = np.array([[[1, 0, 1, 0, 0, np.nan], [0, 0, 0, 1, 1, 1]]], float)
    out = rates.per_image(x, 3)
    assert out.shape == (1, 2, 3)
    assert out.tolist() == [[[0.5, 0.0, 1.0], [0.5, 0.5, 0.5]]]
    assert np.array_equal(rates.per_image(x[:, :, :3], 3), x[:, :, :3])   # one question: the values themselves
