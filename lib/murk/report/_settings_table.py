"""The paper's settings table (spec Table III): each value from where it lives (:func:`settings_rows`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

__all__ = ["settings_rows"]


# --- the settings table (spec Table III): each value from where it lives ---

def _setting_value(v: Any) -> str:
    """A setting as the settings table prints it: lists joined by ", ", numbers as Python writes them."""
    if isinstance(v, (list, tuple)) or (hasattr(v, "ndim") and getattr(v, "ndim", 0) > 0):
        return ", ".join(_setting_value(x) for x in v)
    if hasattr(v, "item"):            # a NumPy scalar
        v = v.item()
    return str(v)


def settings_rows(cfg: Mapping[str, Any], meta: Mapping[str, Any] | None = None,
                  attrs: Mapping[str, Any] | None = None) -> list[dict[str, str]]:
    """The rows of the paper's settings table (spec Table III), each value taken from where the run took it.

    The frozen configuration's settings (:func:`murk.core.settings_table`; every one has a reader), and
    beside them what the configuration does not hold: the constants in code, with their source (the
    physics of :mod:`murk.scene`, the ImageNet-C severities of :mod:`murk.scene`, the depth clip range
    of :mod:`murk.scene`, the decoding of :mod:`murk.readout`), and the choices recorded with the run (the
    COCO split, number of items and seed of the selection, the depth model of the cube). A row of this table is the value the run
    used, not a copy of it (tests/test_config.py ties each row to its reader).

    Parameters
    ----------
    cfg : mapping
        The frozen configuration (:func:`murk.core.load_config`).
    meta : mapping, optional
        The selection's ``items_meta.json`` (``annotation_file``, whose name gives the COCO split, ``n_items``,
        ``seed``); None: those are printed as not recorded.
    attrs : mapping, optional
        The cube's attributes (``depth_model``, ``depth_backend``: the depth the run used); None: not recorded.

    Returns
    -------
    list of dict
        ``setting`` (a dotted key of the configuration, or the code's name of a constant, or the run
        setting), ``value`` (str; lists joined by ", ") and ``source`` (str), in the order of the spec's
        table: items, physics, depth, render, read-out, analysis.
    """
    from murk import core, readout, scene

    frozen = "data/config.yaml"
    rows = [{**r, "source": frozen} for r in core.settings_table(dict(cfg))]
    meta, attrs = dict(meta or {}), dict(attrs or {})
    ann = str(meta.get("annotation_file") or "")
    split = Path(ann).stem.removeprefix("instances_") if ann else ""
    depth_ran = str(attrs.get("depth_model") or attrs.get("depth_backend") or "")

    def code(name: str, value: Any, source: str) -> dict[str, str]:
        return {"setting": name, "value": _setting_value(value), "source": source}

    selection = "the selection (items_meta.json; run setting {})"
    dataset = [code("split", f"COCO {split}" if split else "not recorded", selection.format("split")),
               code("n_items", meta.get("n_items", "not recorded"), selection.format("n_items")),
               code("seed", meta.get("seed", "not recorded"), selection.format("seed"))]
    physics = [
        code("murk.scene.KOSCHMIEDER_CONSTANT", scene.KOSCHMIEDER_CONSTANT,
             "-ln 0.02, the 2 % contrast threshold (Koschmieder 1924; spec Sec. III)"),
        code("murk.scene.FOG_AIRLIGHT", scene.FOG_AIRLIGHT, "fog airlight A, linear RGB (spec Sec. III)"),
        code("murk.scene.SWEEP_M", scene.SWEEP_M, "eight levels, factor 2 from 250 m (spec Sec. III)"),
        code("murk.scene.UNDERWATER_WAVELENGTHS_NM", scene.UNDERWATER_WAVELENGTHS_NM,
             "R, G, B (spec Sec. III)"),
        code("murk.scene.POPE_FRY_ABSORPTION_PER_M", scene.POPE_FRY_ABSORPTION_PER_M,
             "pure water at those wavelengths (Pope & Fry 1997; spec Sec. III)"),
        code("murk.scene.IMAGENET_C_SEVERITIES", scene.IMAGENET_C_SEVERITIES,
             "ImageNet-C fog (Hendrycks & Dietterich 2019; spec Sec. III)"),
    ]
    depth = [
        code("depth_model", depth_ran or "not recorded", "the cube (what the depth stage ran; run setting depth_model)"),
        code("murk.scene.DEPTH_MIN_M", scene.DEPTH_MIN_M, "depth clipped to [0.5, 80] m (spec Sec. III)"),
        code("murk.scene.DEPTH_MAX_M", scene.DEPTH_MAX_M, "depth clipped to [0.5, 80] m (spec Sec. III)"),
    ]
    decoding = [code("murk.readout.DECODING", readout.DECODING, "the only decoding murk implements")]

    def after(prefix: str) -> int:
        at = [i for i, r in enumerate(rows) if r["setting"].startswith(prefix)]
        return at[-1] + 1 if at else len(rows)

    rows[after("readout.dtype_cpu"):after("readout.dtype_cpu")] = decoding
    rows[after("items."):after("items.")] = physics + depth
    first_item = next((i for i, r in enumerate(rows) if r["setting"].startswith("items.")), 0)
    rows[first_item:first_item] = dataset    # the items the run selected, then the selection's rules
    return rows

