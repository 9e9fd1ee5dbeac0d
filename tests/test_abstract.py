"""murk.report._abstract: the abstract, discussion and contributions written from a handful of verdicts."""

import math

from murk.report import _abstract as abstract
from murk.report import _claims as claims

MODELS = ["org/a", "org/b"]
N_OF = {"org/a": 4, "org/b": 2}


def _name(m):
    return m.split("/")[1].upper()


def _key(m):
    return m.replace("/", "--")


def _numbers(**over):
    n = {"n_items": "4", "cfg.mid_level_m": "7.8", "nominal.veq_range": "40–160", "config_hash": "abc",
         "n_conditions": "34"}
    for m in MODELS:
        k = _key(m)
        for arm in ("fog", "underwater"):
            n[f"verdict.rq1.{arm}.t2.{k}"] = claims.COLLAPSE
            n[f"verdict.rq2.c_int.{arm}.t2.{k}"] = claims.LAGS
            n[f"verdict.rq2.verbal_conf.{arm}.t2.{k}"] = "undefined: it has no parseable value"
            n[f"verdict.rq3.abstain.{arm}.t2.{k}"] = claims.WITH
            n[f"verdict.rq3.wording.{arm}.t2.{k}"] = claims.AT
        n[f"verdict.rq4.t2.{k}"] = claims.PLATEAU
        n[f"diagnostic.floor.blank.t2.{k}"] = "below chance"
    n.update(over)
    return n


def _abstract(numbers, pipeline_check=(), approximate=False):
    return abstract.abstract_and_discussion(numbers, MODELS, _name, _key, N_OF, 4, ["fog", "underwater"],
                                            list(pipeline_check), approximate)


def test_the_abstract_counts_the_verdicts():
    out = _abstract(_numbers())
    assert list(out) == ["abstract", "discussion.confidence", "discussion.abstention", "discussion.nominal",
                         "discussion.scope"]
    a = out["abstract"]
    assert "2 models (A and B)" in a and "over 4 COCO images (B on the first 2)" in a
    # the same verdict in both arms is said once
    assert "In both arms, identification (t2) accuracy collapses to chance for both models (A and B)." in a
    assert "the internal confidence, which falls in murkier conditions, lags it (W > 0) for 4 of the 4" in a
    assert "Whether the verbalized confidence follows the collapse of accuracy cannot be stated" in a
    assert "No dependence of the abstain rate on the wording" in a and "(4 model–arm pairs)" in a
    assert "lie above the failure band, on the plateau of accuracy, for both models (A and B)" in a
    assert "random-weight" not in a
    assert out["discussion.confidence"].startswith("Where a confidence lags accuracy (A in fog, A under water")
    assert out["discussion.abstention"].startswith("An explicit abstain option rises with or before the collapse")
    assert "a monocular depth estimate" in out["discussion.scope"]


def test_the_abstract_follows_a_changed_verdict():
    n = _numbers(**{f"verdict.rq1.underwater.t2.{_key(m)}": claims.NO_FALL for m in MODELS})
    a = _abstract(n, pipeline_check=MODELS, approximate=True)
    assert "In fog, identification (t2) accuracy collapses" in a["abstract"]
    assert "under water, no collapse is observed within the sweep" in a["abstract"]
    assert "**The results of A and B come from random-weight checkpoints" in a["abstract"]
    assert "an approximate constant depth" in a["discussion.scope"]
    n = _numbers(**{f"verdict.rq2.c_int.{arm}.t2.{_key(m)}": claims.WITH for m in MODELS
                    for arm in ("fog", "underwater")})
    assert _abstract(n)["discussion.confidence"].startswith("Where a confidence falls together with accuracy")


def test_the_contributions_are_written_from_the_run():
    out = abstract.contributions(_numbers(), MODELS, _name, _key, N_OF, 4, ["fog", "underwater"], [], 3, 1, 0.5,
                                 1.953125)
    assert list(out) == ["intro.contribution.protocol", "intro.contribution.measurement",
                         "intro.contribution.evidence", "intro.contribution.diagnostics"]
    assert "(hash abc)" in out["intro.contribution.protocol"]
    assert out["intro.contribution.measurement"].startswith("A measurement on 4 COCO val2017 images (B on the first 2)")
    assert "3 distractors" in out["intro.contribution.measurement"]
    assert "equivalent to median visibilities of 40–160 m" in out["intro.contribution.evidence"]
    d = out["intro.contribution.diagnostics"]
    assert "2 of the 8 control floors" in d and "for 1 of 2 models" in d and "on a share of 0.50 of the items" in d
    no_marker = abstract.contributions(_numbers(), MODELS, _name, _key, N_OF, 4, ["fog"], MODELS, 3, 0, math.nan,
                                       1.953125)
    assert "hard to see" not in no_marker["intro.contribution.diagnostics"]
    assert no_marker["intro.contribution.measurement"].startswith("A pipeline check")
