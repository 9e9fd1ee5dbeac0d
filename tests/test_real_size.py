"""The real-size read-out (``benchmarks/real_size.py``): its derived float32 bound, and one study family at full size.

The full-size test is marked ``realsize`` (``make test-realsize``, not in ``make test``): it
builds a study model at its published configuration with random weights (about 8 GB of
memory) and reads one unit out with the batched engine against every prompt scored whole.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import real_size  # noqa: E402

#: bf16 engine against bf16 whole prompts, renormalised over the options: five times the 5.6e-3 that
#: benchmarks/real_size.py measured on InternVL3.5-2B (benchmarks/README.md, 2026-12-05)
BF16_RENORM_TOL = 0.03
#: the memory the read-out adds may exceed the engine's estimate of its rows by this factor (measured at full
#: size before the estimate counted padding and the attention temporaries: 7-25 % above it in float32; after:
#: 0.141 GiB measured against 0.166 estimated for Qwen3-VL-2B in bf16, 2026-12-05)
ROWS_MARGIN = 1.25


def test_renormalised_difference_is_bounded_by_the_logit_spread():
    """|dp~| <= tanh(R / 4) for any log-perturbation of spread R, and the worst case reaches it."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        k = int(rng.integers(2, 6))
        p = rng.dirichlet(np.ones(k)) * 10.0 ** rng.uniform(-5, 0)  # any option mass
        d = rng.normal(0.0, 10.0 ** rng.uniform(-7, 0), k)
        dp, spread = real_size.renormalised_difference(p * np.exp(d), p)
        assert spread == pytest.approx(d.max() - d.min(), rel=1e-6, abs=1e-12)
        assert dp <= math.tanh(spread / 4) * (1 + 1e-9) + 1e-15
        worst = max(worst, dp / math.tanh(spread / 4))
    # two options moved apart by R from 1 : e^(R/2) to e^(R/2) : 1 (symmetric about 1/2): the bound is attained
    q = 1e-4 * np.array([1.0, math.exp(0.15)])
    dp, spread = real_size.renormalised_difference(q * [math.exp(0.3), 1.0], q)
    assert spread == pytest.approx(0.3) and dp == pytest.approx(math.tanh(0.3 / 4), rel=1e-9)
    assert 0.3 < worst <= 1.0
    # the raw difference of tiny option probabilities says nothing of the renormalised one
    p = np.array([2e-5, 1e-5, 1e-5])
    dp, spread = real_size.renormalised_difference(p * np.exp([4e-6, 0, 0]), p)
    assert np.abs(p * np.exp([4e-6, 0, 0]) - p).max() < 1e-9 < 1e-6 < dp * 2


#: the family the full-size test reads out (see the test's docstring)
REALSIZE_FAMILY = "Qwen/Qwen3-VL-2B-Instruct"


@pytest.mark.realsize
def test_largest_family_within_8_gb_reads_out_at_full_size():
    """Qwen3-VL-2B at its published configuration in bf16, one unit: the engine against every prompt whole.

    The largest study family whose read-out fits in 8 GiB: in bf16, 2.13 B parameters
    (4.0 GiB) and murk's float32 copy of the tied output head (1.2 GiB) (Qwen3-VL-4B's bf16
    weights alone are 8.3 GiB, Gemma-4-E2B's 8.8 GiB; in float32 no family fits: the
    2B models' weights are 7.6-8.4 GiB). One COCO image (4:3, clean) read out by the
    batched engine with the real Qwen3-VL tokenizer, chat template and processor,
    against each of its 9 prompts scored whole, both in bf16. Checks: no fallback;
    126 or 140 visual tokens (one 448-px tile, as the real processor gives on COCO's
    4:3 images); the option probabilities renormalised within :data:`BF16_RENORM_TOL` (the
    bf16 spread ``benchmarks/real_size.py`` measured); the peak resident memory under 8 GiB;
    the memory the read-out itself added (the peak less the resident memory before it, the
    weights and the interpreter already in) within :data:`ROWS_MARGIN` of the engine's
    estimate of the rows (``engine._row_bytes``), and the estimate not above 4 times it. Flips are not asserted: random weights spread the first-token mass almost
    evenly over the options, so bf16 near-ties are common (2 of 9 on InternVL3.5-2B).
    """
    from murk.offline import real_model_files_dir

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    out = io.StringIO()
    recs = real_size.read_family(REALSIZE_FAMILY, 1, ("bfloat16",), budget_gib=8.0, wait_s=600.0, out=out)
    assert len(recs) == 1 and "skipped" not in recs[0], recs
    r = recs[0]
    print(real_size.format_line(r))
    assert r["params"] > 2.0e9 and r["dtype"] == "bfloat16"
    assert r["fallback_units"] == 0
    assert len(r["visual_tokens"]) == 1 and r["visual_tokens"][0] in (126, 140)
    assert r["prompts"] == 9
    assert r["renorm_max_abs_dp"] <= BF16_RENORM_TOL
    assert r["peak_gib"] <= 8.0
    assert r["hwm_reset"]  # the high-water mark is the read-out's own
    rows = r["peak_gib"] - r["rss_before_gib"]
    assert rows <= ROWS_MARGIN * r["rows_estimate_gib"], (rows, r["rows_estimate_gib"])
    assert r["rows_estimate_gib"] <= 4.0 * rows, (rows, r["rows_estimate_gib"])
