"""The protocol: the COCO annotations, the selection of items and distractors, the questions and prompt templates
(spec Table II), and the design variants (pilot and study).

Layer 3 of 9 of the data flow (core < scene < protocol < offline < readout < results < monitor < report <
pipeline). It may import :mod:`murk.core` and :mod:`murk.scene`. The names below are its public surface; the
modules behind it (``_coco``, ``_design``, ``_item_files``, ``_items``, ``_prompts``) are its implementation.
"""

from __future__ import annotations

from murk.protocol._coco import (  # noqa: F401
    ANNOTATIONS_URL,
    ANNOTATIONS_MD5,
    IMAGES_URL,
    MissingImageWarning,
    coco_files,
    fetch_annotations,
    ensure_images,
)
from murk.protocol._design import (  # noqa: F401
    DESIGN_KEYS,
    STUDY_DESIGN,
    BINARY_TASKS,
    DISTRACTOR_RULES,
    EXISTENCE_STEM,
    design_config,
    design_of,
    is_study_design,
    design_from_settings,
    sweep_of,
    restrict_to_design,
    differences,
    config_of,
)
from murk.protocol._items import (  # noqa: F401
    BadBoxWarning,
    BOX_BORDER_TOLERANCE_PX,
    COLUMNS,
    HASH_COLUMNS,
    select_items,
    selection_report,
    shuffled_partner,
)
from murk.protocol._item_files import (  # noqa: F401
    items_hash,
    save_items,
    load_items,
    read_items,
    save_selection,
    image_checks,
    image_digests,
    input_digests,
)
from murk.protocol._prompts import (  # noqa: F401
    VERBAL_WORDINGS,
    TASKS,
    PROMPT_VARIANTS,
    Question,
    indefinite_article,
    questions_for_item,
    option_letters,
    render_prompt,
    EXAMPLE_ITEM,
    prompt_table,
)

__all__ = [
    "VERBAL_WORDINGS",
    "ANNOTATIONS_URL",
    "ANNOTATIONS_MD5",
    "IMAGES_URL",
    "MissingImageWarning",
    "coco_files",
    "fetch_annotations",
    "ensure_images",
    "DESIGN_KEYS",
    "STUDY_DESIGN",
    "BINARY_TASKS",
    "DISTRACTOR_RULES",
    "EXISTENCE_STEM",
    "design_config",
    "design_of",
    "is_study_design",
    "design_from_settings",
    "sweep_of",
    "restrict_to_design",
    "differences",
    "config_of",
    "BadBoxWarning",
    "BOX_BORDER_TOLERANCE_PX",
    "COLUMNS",
    "HASH_COLUMNS",
    "select_items",
    "selection_report",
    "items_hash",
    "save_items",
    "load_items",
    "shuffled_partner",
    "read_items",
    "save_selection",
    "image_checks",
    "image_digests",
    "input_digests",
    "TASKS",
    "PROMPT_VARIANTS",
    "Question",
    "indefinite_article",
    "questions_for_item",
    "option_letters",
    "render_prompt",
    "EXAMPLE_ITEM",
    "prompt_table",
]
