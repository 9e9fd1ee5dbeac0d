"""The result cube's schema, defined once: its dimensions, arms, tasks and read-outs.

The read-out stage records these read-outs (:func:`murk.readout.item_readouts`) and the results layer stores
them in the cube (:mod:`murk.results`); both read them from here, the bottom layer, so that neither holds a
second copy. What each read-out means is documented with the cube (``murk.results._cube``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SCHEMA_VERSION", "DIMS", "ARMS", "PHYSICAL_ARMS", "CONTROL_ARMS", "TASKS", "READOUTS",
           "TEXT_READOUTS", "VALUE_DTYPE"]

SCHEMA_VERSION = 4  # 2: value float64, read-out visibility_hat_censored (issue 13); 3: verbal_stop read-outs (issue 12);
#                     4: p_option_0..3, target, p_abstain, p_abstain2 (recalibration and risk-coverage, issue 24)
#: dimensions of the cube's ``value``
DIMS = ("model", "arm", "level", "task", "image", "readout")
#: the physical arms (spec Sec. III), the nominal control and the two image controls
ARMS = ("fog", "underwater", "imagenet_c", "blank", "shuffled")
PHYSICAL_ARMS = ("fog", "underwater")
CONTROL_ARMS = ("blank", "shuffled")
#: t2 (4-way identification) and t3's two verification questions (true category, distractor)
TASKS = ("t2", "t3_true", "t3_false")
#: numeric read-outs, in the order of the ``readout`` coordinate (float64; NaN = missing): what
#: :func:`murk.readout.item_readouts` records per question. ``verbal_stop``, ``verbal_stop_v2`` and
#: ``verbal_stop_v3``: how the continuation of wording v1/v2/v3 ended (0 = end-of-sequence, 1 = token
#: limit, NaN = not asked)
READOUTS = ("answer", "correct", "c_int", "verbal_conf", "abstain", "abstain2", "option_mass",
            "verbal_conf_v2", "verbal_conf_v3", "visibility_hat_m", "visibility_hat_censored", "verbal_stop",
            "verbal_stop_v2", "verbal_stop_v3", "p_option_0", "p_option_1", "p_option_2", "p_option_3",
            "target", "p_abstain", "p_abstain2", "visibility_hat_arm")
#: dtype of ``value``: float64, so read-outs are stored exactly as produced (a
#: verbal k/100 stays the float64 nearest to the decimal, a c_int of 0.8999996
#: stays below the ECE bin edge 0.9; issue 13)
VALUE_DTYPE = np.float64
#: text read-outs, stored as separate string variables (``verbal_text_v2/v3``: empty when not asked)
TEXT_READOUTS = ("verbal_text", "top_token", "verbal_text_v2", "verbal_text_v3")
