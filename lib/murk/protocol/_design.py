"""Design variants: the study's design choices as independent run settings (spec Sec. III, "pilot").

The study follows a 200-image pilot whose controls revealed confounds; the
main study corrects five design choices (spec Sec. III: "(i) The existence
task of the pilot ... is replaced by t3 ... (ii) Distractors are
prior-matched ... (iii) The box is thicker (8 px instead of 3 px). (iv) The
sweep reaches 1.95 m ... (v) A second abstain wording is collected"). Each
choice is one run setting here (:data:`DESIGN_KEYS`), null meaning the frozen
study configuration's choice, so the pilot's design, the study's, and any mix
of the two are runs of the same pipeline:

============== ======================= =============================== ==========================
setting        study (null)            pilot (``data/pilot.yaml``)     enters
============== ======================= =============================== ==========================
binary_task    ``verification`` (t3)   ``existence``                   the t3 stem (read-out)
distractors    ``prior-matched``       ``uniform``                     the selection (items)
box_width_px   8                       3                               the renderings
sweep_end_m    1.95                    3.9                             the analysis' levels
abstain_words  2                       1                               the analysis' read-outs
============== ======================= =============================== ==========================

A design is applied to the frozen configuration by :func:`design_config`; the
frozen file ``data/config.yaml`` and its hash stay as they are. The study's
design gives the frozen configuration itself (the same hash); any other design
gives a configuration holding a ``design`` block, whose hash is the variant's
own identity (:func:`murk.core.config_hash`), so that its stores, its frozen
record and its paper never mix with the study's.

Two choices the pipeline cannot vary per condition are applied in the
analysis, and said so where they are reported: the read-out engine reads its
fixed 24 conditions and three prompt variants per question
(:mod:`murk.readout`), so a sweep that ends earlier drops the murkier levels
from the analysis (:func:`restrict_to_design`: crossings are then censored at
the design's last level), and a single abstain wording sets the second
wording's read-outs to missing there.

The existence wording (:data:`EXISTENCE_STEM`) is murk's own: the spec names
the pilot's existence task but does not quote its wording.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from murk import scene
from murk.core import match_level

__all__ = ["DESIGN_KEYS", "STUDY_DESIGN", "BINARY_TASKS", "DISTRACTOR_RULES", "EXISTENCE_STEM",
           "design_config", "design_of", "is_study_design", "design_from_settings", "sweep_of",
           "restrict_to_design", "differences", "config_of"]

#: the run settings that make a design, in the order of ``data/workflow.yaml``
DESIGN_KEYS: tuple[str, ...] = ("binary_task", "distractors", "box_width_px", "sweep_end_m", "abstain_wordings")
#: what the binary (t3) question asks: ``verification`` of the boxed object (the study's t3),
#: ``existence`` of the category anywhere in the image (the pilot's task)
BINARY_TASKS: tuple[str, ...] = ("verification", "existence")
#: how distractors are drawn: ``prior-matched`` (spec Sec. III, weight freq(c) / absent share) or
#: ``uniform`` over the categories absent from the image (the pilot's)
DISTRACTOR_RULES: tuple[str, ...] = ("prior-matched", "uniform")
#: the existence question of the binary task: murk's own wording (the spec does not quote the
#: pilot's); the whole image, not the boxed object
EXISTENCE_STEM = "Is there {article} {category} anywhere in the image?"
#: the study's design (spec Sec. III); the box width is read from data/config.yaml, the sweep end is the
#: last level of :data:`murk.scene.SWEEP_M`
STUDY_DESIGN: dict[str, Any] = {"binary_task": "verification", "distractors": "prior-matched",
                                "box_width_px": None, "sweep_end_m": None, "abstain_wordings": 2}


def _study_values(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The study design with the frozen configuration's box width and the sweep's last level."""
    return {**STUDY_DESIGN, "box_width_px": int(cfg["render"]["box_width_px"]),
            "sweep_end_m": float(min(scene.SWEEP_M))}


def design_of(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The full design of a configuration (the frozen one, or one made by :func:`design_config`).

    Parameters
    ----------
    cfg : dict
        A configuration (:func:`murk.core.load_config`, :func:`design_config`).

    Returns
    -------
    dict
        Every key of :data:`DESIGN_KEYS` with its value: ``binary_task`` (str),
        ``distractors`` (str), ``box_width_px`` (int, px), ``sweep_end_m``
        (float, m) and ``abstain_wordings`` (int, 1 or 2).
    """
    return {**_study_values(cfg), **dict(cfg.get("design", {}))}


def is_study_design(cfg: Mapping[str, Any]) -> bool:
    """Whether a configuration is the study's design (no ``design`` block)."""
    return not cfg.get("design")


def _checked(design: Mapping[str, Any], cfg: Mapping[str, Any]) -> dict[str, Any]:
    sweep = [float(v) for v in scene.SWEEP_M]
    out: dict[str, Any] = {}
    for k, v in design.items():
        if k not in DESIGN_KEYS:
            raise ValueError(f"{k!r} is not a design setting: the design settings are {', '.join(DESIGN_KEYS)}")
        if v is None:
            continue
        if k == "binary_task" and v not in BINARY_TASKS:
            raise ValueError(f"binary_task must be one of {', '.join(BINARY_TASKS)}, got {v!r}")
        if k == "distractors" and v not in DISTRACTOR_RULES:
            raise ValueError(f"distractors must be one of {', '.join(DISTRACTOR_RULES)}, got {v!r}")
        if k == "box_width_px" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"box_width_px must be a whole number of pixels >= 1, got {v!r}")
        if k == "abstain_wordings" and v not in (1, 2):
            raise ValueError(f"abstain_wordings must be 1 or 2, got {v!r}")
        if k == "sweep_end_m":
            match = None if isinstance(v, bool) else match_level(v, sweep)
            if match is None:
                raise ValueError(f"sweep_end_m must be one of the sweep's levels "
                                 f"({', '.join(f'{s:g}' for s in sweep)} m), got {v!r}")
            v = match
        out[k] = v
    return out


def design_config(cfg: Mapping[str, Any], design: Mapping[str, Any] | None) -> dict[str, Any]:
    """The configuration of a design: the frozen configuration with the design's choices applied.

    Parameters
    ----------
    cfg : dict
        The frozen study configuration (:func:`murk.core.load_config`).
    design : mapping or None
        Design settings (keys of :data:`DESIGN_KEYS`; a value None, or a value equal to
        the study's, keeps the study's choice). None or ``{}``: the study's design.

    Returns
    -------
    dict
        A new configuration. For the study's design it equals ``cfg`` (the same
        :func:`murk.core.config_hash`). Otherwise it holds ``design`` (the
        settings that differ from the study's) and: ``prompts.t3_stem`` =
        :data:`EXISTENCE_STEM` (``binary_task: existence``), ``items.distractors``
        (``uniform``), ``render.box_width_px``; the sweep and the abstain wordings
        are read from ``design`` by the analysis (:func:`restrict_to_design`).

    Raises
    ------
    ValueError
        For an unknown key or a value out of its range (the message names the key
        and the accepted values).
    """
    out = copy.deepcopy(dict(cfg))
    if out.get("design"):
        raise ValueError("design_config takes the frozen configuration (data/config.yaml), not a design's")
    given = _checked(design or {}, cfg)
    study = _study_values(cfg)
    diff = {k: v for k, v in given.items() if v != study[k]}
    if not diff:
        return out
    out["design"] = {k: diff[k] for k in DESIGN_KEYS if k in diff}
    if diff.get("binary_task") == "existence":
        out["prompts"]["t3_stem"] = EXISTENCE_STEM
    if "distractors" in diff:
        out["items"]["distractors"] = diff["distractors"]
    if "box_width_px" in diff:
        out["render"]["box_width_px"] = int(diff["box_width_px"])
    return out


def design_from_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The design settings of a run configuration (the Snakefile's ``config``, or the run defaults).

    Parameters
    ----------
    settings : mapping
        Run settings; the keys of :data:`DESIGN_KEYS` that are set and not null are taken.

    Returns
    -------
    dict
        key -> value, JSON-serialisable (what the select stage is given as ``design``).
    """
    return {k: settings[k] for k in DESIGN_KEYS if settings.get(k) is not None}


def sweep_of(cfg: Mapping[str, Any]) -> list[float]:
    """The design's sweep: the levels of :data:`murk.scene.SWEEP_M` down to ``sweep_end_m`` (m, clearest first)."""
    end = design_of(cfg)["sweep_end_m"]
    return [float(v) for v in scene.SWEEP_M if float(v) >= end * (1 - 1e-9)]


def restrict_to_design(ds, cfg: Mapping[str, Any]):
    """A cube (or read-out store) restricted to what the design measures.

    Parameters
    ----------
    ds : xarray.Dataset
        With a ``level`` dimension (level 0 clean, then :data:`murk.scene.SWEEP_M`) and,
        for ``abstain_wordings: 1``, a ``value`` variable with a ``readout`` coordinate.
    cfg : dict
        The design's configuration (:func:`design_config`).

    Returns
    -------
    xarray.Dataset
        ``ds`` itself for the study's design; otherwise the levels 0 .. len(sweep)
        (the ImageNet-C arm's levels 0-5 are kept whole) and, with one abstain
        wording, the read-outs ``abstain2`` and ``p_abstain2`` set to NaN.
    """
    d = design_of(cfg)
    n = 1 + len(sweep_of(cfg))
    if n < ds.sizes["level"]:
        ds = ds.isel(level=slice(0, n))
    if d["abstain_wordings"] == 1 and "value" in ds:
        drop = [r for r in ("abstain2", "p_abstain2") if r in ds["readout"].values]
        if drop:
            ds = ds.copy()
            ds["value"] = ds["value"].where(~ds["readout"].isin(drop))
    return ds


def differences(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The design settings in which a configuration differs from the study's (empty for the study)."""
    return dict(cfg.get("design", {}))


def config_of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration of a selected run: the frozen one with the design its select stage recorded.

    Parameters
    ----------
    meta : mapping
        ``items_meta.json`` of the run (:func:`murk.protocol.read_items`); its ``design``
        (absent or empty for the study's design) is applied to ``data/config.yaml``.

    Returns
    -------
    dict
        :func:`design_config` of the two: every stage after *select* reads its
        configuration here, so that the stages of a design variant agree.
    """
    from murk.core import load_config

    return design_config(load_config(), meta.get("design") or {})
