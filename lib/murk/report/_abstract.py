"""The sentences of the paper generated from the study's verdicts: the abstract, the discussion and the
introduction's contributions (i)–(iv).

Each counts, per question, the models (and arms) for which the cube shows an effect, from the verdicts the study's
analysis recorded (``verdict.rq1.*`` … ``verdict.rq4.*``, decided by :mod:`murk.report` on the bootstrap intervals),
and says "not observed" or "cannot be stated" where it does not, so that it changes when the cube does.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from murk import scene
from murk.core import CONTROL_ARMS
from murk.report import _claims as claims
from murk.report._findings import count_phrase, verdict_groups
from murk.report._format import fmt, fmt_level, fmt_list, fmt_range
from murk.results import ABOVE_GUESSER, BELOW_CHANCE

#: an awareness signal in a sentence
SIGNAL_WORDS = {"c_int": "internal confidence", "verbal_conf": "verbalized confidence",
                "abstain": "abstain rate with the main wording", "abstain2": "abstain₂ rate (“I don't know”)"}
#: a physical arm in a sentence
ARM_PHRASE = {"fog": "in fog", "underwater": "under water"}
#: a defined lag verdict (:func:`murk.report.awareness_lag`) as the abstract says it
LAG_WORDS = {claims.LAGS: "lags it (W > 0)", claims.WITH: "moves with it (within one sweep level)",
             claims.LEADS: "moves before it (W < 0)",
             claims.NO_LAG: "cannot be placed against it (no lag established, none excluded)"}


def _model_words(models: Sequence[str], name: Callable[[str], str]) -> str:
    n_models = len(models)
    return f"{'one model' if n_models == 1 else f'{n_models} models'} ({fmt_list(name(m) for m in models)})"


def abstract_and_discussion(numbers: Mapping[str, str], models: Sequence[str], name: Callable[[str], str],
                            key: Callable[[str], str], n_items_of: Mapping[str, int], n_images: int,
                            physical: Sequence[str], pipeline_check: Sequence[str], approximate: bool) -> dict[str, str]:
    """The abstract and the four paragraphs of the Discussion, generated from the study's verdicts.

    Parameters
    ----------
    numbers : mapping of str to str
        The study's numbers so far: its ``verdict.*`` keys, ``n_items``, ``cfg.mid_level_m`` and
        ``nominal.veq_range``.
    models : sequence of str
        The models analysed, in the order the sentences name them.
    name, key : callable
        A model's display name (with its † where its option mass is low) and its part of a numbers key.
    n_items_of : mapping of str to int
        Each model's number of items (a model read out on the first n items only is said so).
    n_images : int
        The items of the selection.
    physical : sequence of str
        The physical arms analysed (``fog``, ``underwater``).
    pipeline_check : sequence of str
        The models read out from random-weight checkpoints (a pipeline check, said so).
    approximate : bool
        The depth is the offline backend's constant (said in the scope paragraph).

    Returns
    -------
    dict of str to str
        ``abstract``, ``discussion.confidence``, ``discussion.abstention``, ``discussion.nominal`` and
        ``discussion.scope`` -> the sentence(s), in that order.
    """
    out: dict[str, str] = {}

    def record(k: str, v: str) -> str:
        out[k] = v
        return v

    def verdicts(prefix: str, arms=None) -> dict[str, list[str]]:
        return verdict_groups(numbers, prefix, models, name, key, arms, ARM_PHRASE)

    n_models = len(models)
    model_words = _model_words(models, name)
    parts = [f"How murky can a scene get before a vision-language model knows that it cannot see? murk places the "
             f"accuracy, internal confidence, verbalized confidence and abstention of {model_words} on one physical "
             f"axis, the meteorological visibility V in metres, for fog (Koschmieder) and for clear water (Pope–Fry "
             f"absorption), over {numbers['n_items']} COCO images"
             + (" (" + fmt_list(f"{name(m)} on the first {n_items_of[m]}" for m in models if n_items_of[m] < n_images) + ")"
                if any(n_items_of[m] < n_images for m in models) else "")
             + ", and summarises each signal against accuracy by the "
             "blind-spot width W, the decades of visibility by which it follows accuracy's collapse."]
    rq1 = []   # (arm, sentence template with {what}: the same template in every arm is said once)
    for arm in physical:
        v = verdicts(f"rq1.{arm}.t2")
        if claims.COLLAPSE in v:
            rq1.append((arm, "{what} collapses to chance for " + count_phrase(v[claims.COLLAPSE], n_models, "model")))
        elif claims.PARTIAL in v:
            rq1.append((arm, "{what} falls through its mid-way value, but not to chance, for "
                        + count_phrase(v[claims.PARTIAL], n_models, "model")))
        elif claims.NO_SKILL in v and len(v[claims.NO_SKILL]) == n_models:
            rq1.append((arm, "{what} is not above chance even on the clean image, so no collapse can be placed on the "
                        "axis"))
        else:
            rq1.append((arm, "no collapse of {what} is observed within the sweep"))
    if len(rq1) > 1 and len({t for _, t in rq1}) == 1:
        rq1 = [("both arms" if len(rq1) == 2 else "every arm", rq1[0][1])]
    bits = [f"{ARM_PHRASE.get(arm, 'in ' + arm)}, " + t.format(what="identification (t2) accuracy" if not i else "it")
            for i, (arm, t) in enumerate(rq1)]
    bits = [b.replace("no collapse of it is", "no collapse is") for b in bits]
    parts.append(bits[0][0].upper() + bits[0][1:] + ("; " + "; ".join(bits[1:]) if bits[1:] else "") + ".")
    rq23, undefined_signals = [], []
    for signal, rq in (("c_int", "rq2"), ("verbal_conf", "rq2"), ("abstain", "rq3")):
        v = verdicts(f"{rq}.{signal}.{{arm}}.t2", physical)
        defined = {k_: g for k_, g in v.items() if k_ in LAG_WORDS}
        n_def = sum(len(g) for g in defined.values())
        what = SIGNAL_WORDS[signal]
        if not n_def:
            undefined_signals.append(what)
            continue
        bits = [f"{LAG_WORDS[k_]} for {len(g)}" for k_, g in defined.items()]
        rq23.append(f"the {what}, which {claims.direction(signal)} in murkier conditions, " + fmt_list(bits)
                    + f" of the {n_def} model–arm pairs where accuracy collapses and W is defined")
    if rq23:
        parts.append("Against accuracy, " + "; ".join(rq23) + ".")
    if undefined_signals:
        parts.append(f"Whether the {fmt_list(undefined_signals)} follow{'s' if len(undefined_signals) == 1 else ''} "
                     "the collapse of accuracy cannot be stated: accuracy does not collapse, or the signal has no values.")
    wording = verdicts("rq3.wording.{arm}.t2", physical)
    n_w = sum(len(g) for k_, g in wording.items() if k_ != claims.UNDEFINED)
    if n_w:
        dep = len(wording.get(claims.ABOVE, [])) + len(wording.get(claims.BELOW, []))
        options = (f"(“I cannot tell, the image is too unclear to decide” against “I don't know”, "
                   f"V = {numbers['cfg.mid_level_m']} m)")
        parts.append(f"The abstain rate depends on the wording of the abstain option {options} for {dep} of {n_w} "
                     "model–arm pairs" + (" and not for the others." if dep < n_w else ".") if dep else
                     f"No dependence of the abstain rate on the wording of the abstain option {options} is observed "
                     f"({n_w} model–arm pairs).")
    nom = verdicts("rq4.t2")
    if "plateau" in nom or "reaches the band" in nom or claims.IN_BAND_NO_FALL in nom:
        bits = []
        if "plateau" in nom:
            bits.append(f"lie above the failure band, on the plateau of accuracy, for {count_phrase(nom['plateau'], n_models, 'model')}")
        if "reaches the band" in nom:
            bits.append(f"reach into it, accuracy falling there, for {count_phrase(nom['reaches the band'], n_models, 'model')}")
        if claims.IN_BAND_NO_FALL in nom:   # placed in the band, but accuracy does not fall there: not "reach into"
            bits.append("lie at visibilities of the band without accuracy falling below clean at any of them for "
                        + count_phrase(nom[claims.IN_BAND_NO_FALL], n_models, "model"))
        parts.append(f"The ImageNet-C fog severities, equivalent to median visibilities of {numbers['nominal.veq_range']} m, "
                     + fmt_list(bits) + ".")
    else:
        parts.append("Whether the ImageNet-C fog severities cover the failure band cannot be said from this run "
                     "(no collapse in fog, or the nominal equivalence was not computed).")
    if pipeline_check:
        parts.append(f"**The results of {fmt_list(name(m) for m in pipeline_check)} come from random-weight checkpoints "
                     "(a pipeline check): they test murk end to end and are no finding about any VLM.**")
    record("abstract", " ".join(parts))

    # the Discussion: what the verdicts mean, one paragraph per theme
    lag_c = verdicts("rq2.c_int.{arm}.t2", physical)
    lag_v = verdicts("rq2.verbal_conf.{arm}.t2", physical)
    lagging = lag_c.get(claims.LAGS, []) + lag_v.get(claims.LAGS, [])
    following = lag_c.get(claims.WITH, []) + lag_v.get(claims.WITH, [])
    if lagging:
        record("discussion.confidence", (
            f"Where a confidence lags accuracy ({fmt_list(sorted(set(lagging)))}), there is a band of visibility in "
            "which the model still reports the confidence of a clear image while its answers are already near chance: "
            "a user, or a system that gates on the confidence, is misled exactly where the scene stops supporting the "
            "answer. W measures the width of that band in decades, independent of the depth scale, so it can be "
            "compared across arms and models although the visibilities in metres cannot."))
    elif following:
        record("discussion.confidence", (
            f"Where a confidence falls together with accuracy ({fmt_list(sorted(set(following)))}), it is usable as a "
            "signal that the scene has become too murky: the cube shows no band in which the model stays confident "
            "while its answers have collapsed. This holds for the sweep and the models run, not beyond them."))
    else:
        record("discussion.confidence", (
            "No lag of a confidence behind accuracy can be stated from this run: either accuracy does not collapse "
            "within the sweep, or the confidences have no defined crossing. The question needs models whose accuracy "
            "starts above chance on the clean image and collapses within the sweep."))
    ab = verdicts("rq3.abstain.{arm}.t2", physical)
    dep = wording.get(claims.ABOVE, []) + wording.get(claims.BELOW, [])
    if ab.get(claims.WITH) or ab.get(claims.LEADS):
        text = (f"An explicit abstain option rises with or before the collapse of accuracy for "
                f"{fmt_list(ab.get(claims.WITH, []) + ab.get(claims.LEADS, []))}: offering the option exposes what a "
                "stated confidence may hide.")
    elif ab.get(claims.LAGS):
        text = (f"The abstain option rises only after accuracy has fallen for {fmt_list(ab[claims.LAGS])}: offering "
                "it does not by itself make a model say that it cannot see in time.")
    else:
        text = "Whether an explicit abstain option follows the collapse cannot be stated from this run."
    text += (f" Its rate depends on the wording for {fmt_list(dep)}, so an abstention benchmark that fixes one wording "
             "measures the wording as much as the model." if dep else
             " No dependence on its wording is observed at the level read.")
    record("discussion.abstention", text)
    if "plateau" in nom:
        record("discussion.nominal", (
            "The nominal ImageNet-C fog severities, placed on the physical axis by their retained contrast, sit at "
            f"visibilities where accuracy has not yet started to fall for {fmt_list(nom['plateau'])}: a robustness "
            f"score over severities {fmt_range(scene.IMAGENET_C_SEVERITIES, digits=0)} then measures the plateau, not the failure, and says nothing about where a "
            "model's awareness of its failure begins. A physical axis in metres places the failure band, and the "
            "five severities, on one scale."))
    elif "reaches the band" in nom or claims.IN_BAND_NO_FALL in nom:
        said = []
        if "reaches the band" in nom:
            said.append(f"The nominal severities reach into the failure band for {fmt_list(nom['reaches the band'])}: "
                        "there an ImageNet-C evaluation does probe the collapse, although on an ordinal scale whose steps "
                        "are not equal in visibility.")
        if claims.IN_BAND_NO_FALL in nom:   # the RQ4 change verdict: placed in the band, accuracy not falling there
            said.append(f"For {fmt_list(nom[claims.IN_BAND_NO_FALL])} the nominal severities lie at visibilities of the "
                        "failure band, but accuracy does not fall below clean at any of them: there they do not probe "
                        "the collapse.")
        record("discussion.nominal", " ".join(said))
    else:
        record("discussion.nominal", (
            "Where the nominal severities lie relative to the failure band cannot be said from this run; the "
            "physical axis still places them in metres (the equivalent visibilities above)."))
    record("discussion.scope", (
        (f"The results of {fmt_list(name(m) for m in pipeline_check)} are a pipeline check: random-weight checkpoints, whose "
         "verdicts test that each sentence follows the cube, not what any VLM does. " if pipeline_check else "")
        + f"The study covers {model_words}, synthetic degradations rendered from "
        + ("an approximate constant depth" if approximate else "a monocular depth estimate") + " and "
        "multiple-choice questions about one marked object; the visibilities in metres are conditional on the depth "
        "scale, W is not. A separate visibility estimate (the monitor) is one way to abstain without relying on the "
        "model's own awareness; its measured accuracy and gate are in the section before."))
    return out


def contributions(numbers: Mapping[str, str], models: Sequence[str], name: Callable[[str], str],
                  key: Callable[[str], str], n_items_of: Mapping[str, int], n_images: int, physical: Sequence[str],
                  pipeline_check: Sequence[str], distractors: int, n_dominated: int, marker_share: float,
                  v_end: float) -> dict[str, str]:
    """The introduction's contributions (i)–(iv), written from this run: the protocol, the measurement, the
    evidence (the verdicts) and the design diagnostics.

    Parameters
    ----------
    numbers : mapping of str to str
        The study's numbers so far: ``config_hash``, ``n_items``, ``n_conditions``, the ``verdict.*`` keys,
        ``nominal.veq_range`` where computed, and ``diagnostic.floor.*``.
    models, name, key, n_items_of, n_images, physical, pipeline_check
        As :func:`abstract_and_discussion`.
    distractors : int
        The design's distractors per question (:func:`murk.protocol.design_of`).
    n_dominated : int
        Models for which one answer dominates t3 on the blank image (the diagnostics).
    marker_share : float
        Share of the items whose box marker is hard to see at ``v_end`` in fog (NaN: not measured).
    v_end : float
        The end of the sweep, metres.

    Returns
    -------
    dict of str to str
        ``intro.contribution.protocol``, ``.measurement``, ``.evidence`` and ``.diagnostics`` -> the item's text.
    """
    out: dict[str, str] = {}

    def record(k: str, v: str) -> str:
        out[k] = v
        return v

    def verdicts(prefix: str, arms=None) -> dict[str, list[str]]:
        return verdict_groups(numbers, prefix, models, name, key, arms, ARM_PHRASE)

    n_models = len(models)
    model_words = _model_words(models, name)
    wording = verdicts("rq3.wording.{arm}.t2", physical)
    nom = verdicts("rq4.t2")
    arms_words = fmt_list({"fog": "fog (Koschmieder)", "underwater": "clear water (Pope–Fry absorption)"}.get(a, a)
                          for a in physical)
    record("intro.contribution.protocol", (
        "A protocol that places accuracy, internal confidence, verbalized confidence and abstention on one physical "
        f"axis, the visibility V in metres, for {arms_words}, with a scale-free summary, the blind-spot width "
        "W = log10(V_acc / V_aware), fixed with the rest of the design in the run's frozen configuration "
        f"(hash {numbers['config_hash']})."))
    subset = [f"{name(m)} on the first {n_items_of[m]}" for m in models if n_items_of[m] < n_images]
    pc_words = (f" The read-outs of {fmt_list(name(m) for m in pipeline_check)} come from random-weight checkpoints: a "
                "pipeline check of murk end to end, not a measurement of any VLM." if pipeline_check else "")
    all_pc = bool(pipeline_check) and len(pipeline_check) == n_models
    record("intro.contribution.measurement", (
        ("A pipeline check" if all_pc else "A measurement") + f" on {numbers['n_items']} COCO val2017 images" + (f" ({fmt_list(subset)})" if subset else "")
        + f", {model_words}, {len(physical)} physical degradation arm{'s' if len(physical) != 1 else ''} and two "
        f"tasks (identification, t2, and verification, t3), with blank- and shuffled-image controls, "
        f"{distractors} distractors and the ImageNet-C fog severities as a nominal control: "
        f"{numbers['n_conditions']} conditions per model." + pc_words))
    evidence, unstated = [], []
    for signal, rq in (("c_int", "rq2"), ("verbal_conf", "rq2"), ("abstain", "rq3")):
        v = verdicts(f"{rq}.{signal}.{{arm}}.t2", physical)
        defined = {k_: g for k_, g in v.items() if k_ in LAG_WORDS}
        n_def = sum(len(g) for g in defined.values())
        if n_def:
            evidence.append(f"the {SIGNAL_WORDS[signal]} " + fmt_list(f"{LAG_WORDS[k_]} for {len(g)}"
                                                                   for k_, g in defined.items())
                            + f" of the {n_def} model–arm pairs where W is defined")
        else:
            unstated.append(f"the {SIGNAL_WORDS[signal]}")
    if unstated:
        evidence.append(f"whether {fmt_list(unstated)} follow{'s' if len(unstated) == 1 else ''} it cannot be stated "
                        "(accuracy does not collapse, or the signal has no values)")
    n_w = sum(len(g) for k_, g in wording.items() if k_ != claims.UNDEFINED)
    dep_w = len(wording.get(claims.ABOVE, [])) + len(wording.get(claims.BELOW, []))
    evidence.append((f"the abstain rate depends on the wording of the abstain option for {dep_w} of {n_w} model–arm pairs"
                     if dep_w else f"no dependence of the abstain rate on the option's wording is observed ({n_w} "
                     "model–arm pairs)") if n_w else "whether the abstain rate depends on the option's wording cannot "
                    "be stated")
    if "nominal.veq_range" in numbers:
        where = ([f"on the plateau of accuracy for {count_phrase(nom['plateau'], n_models, 'model')}"]
                 if "plateau" in nom else []) + ([f"in the failure band for "
                                                   f"{count_phrase(nom['reaches the band'], n_models, 'model')}"]
                                                  if "reaches the band" in nom else [])
        evidence.append(f"the ImageNet-C fog severities are equivalent to median visibilities of "
                        f"{numbers['nominal.veq_range']} m" + (", " + fmt_list(where) if where else ""))
    lead = ("What this run's read-outs show, all of them a pipeline check (random-weight checkpoints, no finding about "
            "any VLM): " if all_pc else
            f"Evidence, for the models run (the read-outs of {fmt_list(name(m) for m in pipeline_check)} only a pipeline "
            "check): " if pipeline_check else "Evidence, for the models run: ")
    record("intro.contribution.evidence", lead + "against accuracy on t2, " + "; ".join(evidence) + ".")
    n_floors = len(models) * 2 * len(CONTROL_ARMS)
    confounded = sum(numbers.get(f"diagnostic.floor.{c}.{t}.{key(m)}") in (BELOW_CHANCE,
                                                                          ABOVE_GUESSER)
                     for m in models for t in ("t2", "t3") for c in CONTROL_ARMS)
    marker_words = ("" if not np.isfinite(marker_share) else f", and the box marker is hard to see at {fmt_level(v_end)} m "
                    "in fog on " + ("none" if marker_share == 0 else "all" if marker_share == 1 else
                                    f"a share of {fmt(marker_share)}") + " of the items")
    record("intro.contribution.diagnostics", (
        "Design diagnostics for confidence studies under degradation, the checks through which the spec's pilot found "
        "its own design confounded (a distractor prior, an answer bias of the yes/no question, a box marker), run on "
        f"this design's controls: {confounded} of the {n_floors} control floors (model, task, blank or shuffled image) "
        f"lie below chance or above a prior guesser, one answer dominates t3 on the blank image for {n_dominated} of "
        f"{n_models} model{'s' if n_models != 1 else ''}" + marker_words + "."))
    return out
