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


#: the family the full-size test reads out and how (see the test's docstring)
REALSIZE_FAMILY = "OpenGVLab/InternVL3_5-2B-HF"


@pytest.mark.realsize
def test_largest_family_within_8_gb_reads_out_at_full_size():
    """InternVL3.5-2B at its published configuration, float32, one unit: engine vs every prompt whole.

    The largest study family whose float32 weights fit in 8 GB (2.04 B parameters,
    7.6 GiB; Qwen3-VL-2B's are 7.9 GiB, over 8 GB): one COCO image, clean, read out
    by the batched engine with its real tokenizer and processor, against every one of
    its prompts scored whole. Checks: no fallback; 256 visual tokens (448-px tile,
    pixel shuffle 0.5); every first-token probability within 1e-6; the renormalised
    option probabilities within the bound their logit differences imply and within
    1e-5; no flipped answer; the peak memory within the engine's estimate plus the
    interpreter's 1.5 GiB.
    """
    from murk.checkpoints import real_model_files_dir

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    out = io.StringIO()
    recs = real_size.read_family(REALSIZE_FAMILY, 1, ("float32",), budget_gib=9.5, wait_s=600.0, out=out)
    assert len(recs) == 1 and "skipped" not in recs[0], recs
    r = recs[0]
    print(real_size.format_line(r))
    assert r["params"] > 2.0e9
    assert r["fallback_units"] == 0
    assert r["visual_tokens"] == [256]
    assert r["prompts"] == 9
    assert r["max_abs_dp"] <= 1e-6
    assert r["renorm_max_abs_dp"] <= r["renorm_bound"] * (1 + 1e-6) + 1e-12
    assert r["renorm_max_abs_dp"] <= 1e-5
    assert r["flips"] == 0
    assert r["peak_gib"] <= r["estimate_gib"] + 1.5
