"""The visibility monitor (beyond the spec): its estimator, gate and evaluation, and the recalibration of
confidence by the monitor's visibility.

Layer 7 of 9 of the data flow (core < scene < protocol < offline < readout < results < monitor < report <
pipeline). It may import the layers below it: core, scene, protocol, offline, readout, results. The names below
are its public surface; the modules behind it (``_estimator``, ``_evaluation``, ``_gate``, ``_monitor``,
``_recalibration``, ``_validation_depth``) are its implementation.
"""

from __future__ import annotations

from murk.monitor._estimator import (  # noqa: F401
    CAP_M,
    FAR_M,
    FAR_FRACTION,
    QUANTILE,
    CENSORED_CODE,
    T_RELIABLE,
    spectral_shape,
    veiling_light_shape,
    default_window_px,
    transmission_estimate,
    estimate_veiling_light,
    estimate_visibility,
    estimate_visibility_details,
    usable_depth,
)
from murk.monitor._gate import (  # noqa: F401
    CONFIDENCE_RANGE_M,
    DEFAULT_THRESHOLD_M,
    visibility_confidence,
    gate_decisions,
    certified_visibility,
)
from murk.monitor._monitor import (  # noqa: F401
    CONDITION_ARM,
    monitor_readouts,
    MONITOR_ID,
    MONITOR_DEPLOYABLE_ID,
    MONITOR_IDS,
    ARM_CODE,
    estimate_arm,
    deployable_readouts,
)
from murk.monitor._validation_depth import (  # noqa: F401
    ground_plane_depth,
    billboard_depth,
)
from murk.monitor._evaluation import (  # noqa: F401
    SIGNAL_FLOOR,
    signal_range,
    awareness_crossing,
    split_images,
    pick_threshold,
    threshold_at_coverage,
    compare_at_equal_coverage,
)
from murk.monitor._bands import (  # noqa: F401
    vhat_band,
    at_temperature_bound,
    paired_w,
    held_out_units,
)
from murk.monitor._recalibration import (  # noqa: F401
    SUM_TOL,
    T_BOUNDS,
    P_FLOOR,
    METHODS,
    apply_temperature,
    fit_temperature,
    fit_visibility_temperature,
    visibility_temperature,
    option_confidence,
    recalibrate,
    model_halves,
)

__all__ = [
    "CAP_M",
    "FAR_M",
    "FAR_FRACTION",
    "QUANTILE",
    "CENSORED_CODE",
    "T_RELIABLE",
    "CONFIDENCE_RANGE_M",
    "DEFAULT_THRESHOLD_M",
    "CONDITION_ARM",
    "spectral_shape",
    "veiling_light_shape",
    "default_window_px",
    "transmission_estimate",
    "estimate_veiling_light",
    "estimate_visibility",
    "estimate_visibility_details",
    "ground_plane_depth",
    "billboard_depth",
    "visibility_confidence",
    "gate_decisions",
    "certified_visibility",
    "SIGNAL_FLOOR",
    "signal_range",
    "awareness_crossing",
    "usable_depth",
    "split_images",
    "pick_threshold",
    "threshold_at_coverage",
    "compare_at_equal_coverage",
    "monitor_readouts",
    "MONITOR_ID",
    "MONITOR_DEPLOYABLE_ID",
    "MONITOR_IDS",
    "ARM_CODE",
    "estimate_arm",
    "deployable_readouts",
    "SUM_TOL",
    "T_BOUNDS",
    "P_FLOOR",
    "METHODS",
    "apply_temperature",
    "fit_temperature",
    "fit_visibility_temperature",
    "visibility_temperature",
    "option_confidence",
    "recalibrate",
    "model_halves",
    "vhat_band",
    "at_temperature_bound",
    "paired_w",
    "held_out_units",
]
