"""Questions and prompt templates (spec Sec. III, Table II).

Two tasks are posed on the boxed target of an item (spec Sec. III):

* ``t2`` (identification): "What is the object inside the red box?" with four
  options, the target category and three distractors (chance 0.25);
* ``t3`` (verification): "Is the object inside the red box a(n) <category>?",
  asked once with the true category (``t3_true``, correct answer Yes) and once
  with a distractor (``t3_false``, correct answer No), chance 0.5.

Each question is rendered in three prompt variants (:data:`PROMPT_VARIANTS`):
``main`` (options + request for the letter and a verbal confidence), ``abstain``
(one more option "I cannot tell, the image is too unclear to decide") and
``abstain2`` (one more option "I don't know"). All wording comes from the
``prompts`` section of the frozen configuration (``data/config.yaml``), which is
hashed, so the templates cannot drift from the spec's Table II.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from murk.core import load_config

__all__ = [
    "TASKS",
    "VERBAL_WORDINGS",
    "PROMPT_VARIANTS",
    "Question",
    "indefinite_article",
    "questions_for_item",
    "option_letters",
    "render_prompt",
    "EXAMPLE_ITEM",
    "prompt_table",
]

#: the three questions asked per item, in this order
TASKS = ("t2", "t3_true", "t3_false")

#: the three prompt variants of each question (spec Sec. III read-outs 1-4)
PROMPT_VARIANTS = ("main", "abstain", "abstain2")
#: wordings of the verbalized-confidence request (spec Table VI); v1 is the main run's
VERBAL_WORDINGS = ("v1", "v2", "v3")

_DEFAULT_LETTERS = ("A", "B", "C", "D", "E")


@dataclass(frozen=True)
class Question:
    """One multiple-choice question about the boxed target.

    Attributes
    ----------
    task : {"t2", "t3_true", "t3_false"}
        Identification, or verification with the true / a distractor category.
    stem : str
        The question text, e.g. ``"What is the object inside the red box?"``.
    options : tuple of str
        Option texts in the order shown (4 category names for t2,
        ``("Yes", "No")`` for t3). The abstain option is *not* included; it is
        added by :func:`render_prompt`.
    correct_index : int
        Index into ``options`` of the correct answer.
    """

    task: str
    stem: str
    options: tuple[str, ...]
    correct_index: int

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if not 0 <= self.correct_index < len(self.options):
            raise ValueError(
                f"correct_index {self.correct_index} out of range for {len(self.options)} options"
            )


def indefinite_article(noun: str) -> str:
    """``"an"`` before a vowel letter, else ``"a"``.

    The rule looks at the first letter only (a, e, i, o, u, case-insensitive).
    This is exact for the 80 COCO category names ("an airplane", "an umbrella",
    "a motorcycle", "a hair drier"); it would be wrong for words whose sound
    differs from their spelling ("a unicorn", "an hour"), none of which is a
    COCO category.

    >>> indefinite_article("umbrella"), indefinite_article("truck")
    ('an', 'a')
    """
    return "an" if noun.strip()[:1].lower() in set("aeiou") else "a"


def _prompts_cfg(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    cfg = load_config() if config is None else config
    return cfg["prompts"]


def questions_for_item(row: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[Question]:
    """The three questions (t2, t3_true, t3_false) of one item.

    Parameters
    ----------
    row : mapping
        One selected item with keys ``category`` (str, the target's COCO
        category), ``t2_options`` (4 category names in the order shown),
        ``t2_answer_index`` (int, index of ``category`` in ``t2_options``) and
        ``t3_distractor`` (str, a category absent from the image).
    config : dict, optional
        Study configuration (:func:`murk.core.load_config`); uses
        ``prompts.t2_stem``, ``prompts.t3_stem`` and ``prompts.t3_options``.

    Returns
    -------
    list of Question
        ``[t2, t3_true, t3_false]``; t3_true is correct with "Yes" (index 0),
        t3_false with "No" (index 1).

    Raises
    ------
    ValueError
        If ``t2_options`` does not hold ``category`` at ``t2_answer_index``.
    """
    p = _prompts_cfg(config)
    category = str(row["category"])
    options = tuple(str(o) for o in row["t2_options"])
    answer = int(row["t2_answer_index"])
    if not 0 <= answer < len(options) or options[answer] != category:
        raise ValueError(
            f"t2_options {options} do not hold the category {category!r} at t2_answer_index {answer}"
        )
    distractor = str(row["t3_distractor"])
    yes_no = tuple(str(o) for o in p["t3_options"])

    def t3(cat: str) -> str:
        return p["t3_stem"].format(article=indefinite_article(cat), category=cat)

    return [
        Question("t2", p["t2_stem"], options, answer),
        Question("t3_true", t3(category), yes_no, 0),
        Question("t3_false", t3(distractor), yes_no, 1),
    ]


def option_letters(n: int, config: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The first ``n`` option letters (``readout.option_letters`` of the config).

    Raises
    ------
    ValueError
        If more letters are asked for than the configuration defines.
    """
    cfg = load_config() if config is None else config
    letters = tuple(cfg.get("readout", {}).get("option_letters", _DEFAULT_LETTERS))
    if n > len(letters):
        raise ValueError(f"{n} options but only {len(letters)} option letters configured")
    return letters[:n]


def render_prompt(
    question: Question, variant: str, config: Mapping[str, Any] | None = None, verbal: str = "v1"
) -> tuple[str, tuple[str, ...]]:
    """The user text of one question in one prompt variant (spec Table II).

    Parameters
    ----------
    question : Question
    variant : {"main", "abstain", "abstain2"}
        ``main``: the options lettered A.. and the verbalized-confidence
        request ``prompts.verbal_wordings[verbal]`` (the letter first, then
        ``Confidence: <0-100>``). ``abstain`` /
        ``abstain2``: one more option with the next letter and the text
        ``prompts.abstain`` / ``prompts.abstain2``, then
        ``prompts.instruction_abstain``.
    config : dict, optional
        Study configuration; uses ``prompts.template``, ``prompts.option_line``
        and the texts named above.
    verbal : {"v1", "v2", "v3"}
        Wording of the verbalized-confidence request of the ``main`` variant
        (spec Table VI; v1 is the main run's). Ignored by the abstain variants.

    Returns
    -------
    text : str
        ``prompts.template`` filled with stem, option lines (joined by newlines)
        and instruction.
    letters : tuple of str
        The option letters shown, in order; for the abstain variants the last
        letter is the abstain option.

    Raises
    ------
    ValueError
        For an unknown variant.
    """
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"variant must be one of {PROMPT_VARIANTS}, got {variant!r}")
    cfg = load_config() if config is None else config
    p = cfg["prompts"]
    texts = list(question.options)
    if variant == "main":
        if verbal not in p["verbal_wordings"]:
            raise ValueError(f"verbal wording must be one of {sorted(p['verbal_wordings'])}, got {verbal!r}")
        instruction = p["verbal_wordings"][verbal]
    else:
        texts.append(p[variant])
        instruction = p["instruction_abstain"]
    letters = option_letters(len(texts), cfg)
    lines = "\n".join(p["option_line"].format(letter=L, text=t) for L, t in zip(letters, texts))
    text = p["template"].format(stem=question.stem, options=lines, instruction=instruction)
    return text, letters


#: the sample item whose questions illustrate :func:`prompt_table`
EXAMPLE_ITEM: Mapping[str, Any] = {
    "category": "umbrella",
    "t2_options": ["car", "umbrella", "bench", "kite"],
    "t2_answer_index": 1,
    "t3_distractor": "truck",
}


def prompt_table(config: Mapping[str, Any] | None = None,
                 example: Mapping[str, Any] | None = None) -> list[dict[str, str]]:
    """The prompt templates as rows, for the paper's Table II.

    All texts come from the ``prompts`` section of the frozen configuration
    (and the prefill from ``readout.assistant_prefill``), so the table is the
    data file itself, never retyped.

    Parameters
    ----------
    config : dict, optional
        Study configuration; default the project's (:func:`load_config`).
    example : mapping, optional
        The item rendered in the ``example`` column (keys as for
        :func:`questions_for_item`); default :data:`EXAMPLE_ITEM`.

    Returns
    -------
    list of dict
        Rows with the keys ``name``, ``template`` and ``example`` (str):

        * the building blocks: ``t2 stem``, ``t3 stem`` (placeholders
          ``{article} {category}``), ``t3 options``, ``option line``,
          ``abstain option``, ``abstain2 option``, ``verbal request v1``–``v3``,
          ``abstain instruction``, ``assistant prefill``;
        * one row per question and prompt variant, ``<task> · <variant>``
          for task ``t2``, ``t3`` and variant ``main (v1)``, ``main (v2)``,
          ``main (v3)``, ``abstain``, ``abstain2``: ``template`` is the full
          user text with the option texts as placeholders (``{option 1}``..;
          the letters and the abstain option as shown), ``example`` the text
          rendered by :func:`render_prompt` for ``example``'s t2 or t3_true
          question. Options are lettered A, B, ...; the abstain option is one
          more lettered option (E for t2, C for t3). The assistant turn then
          starts with the prefill (``Answer:``).
    """
    cfg = load_config() if config is None else config
    p = cfg["prompts"]
    item = EXAMPLE_ITEM if example is None else example
    t2, t3_true, _ = questions_for_item(item, cfg)
    letters = option_letters(1, cfg)
    rows = [
        {"name": "t2 stem", "template": p["t2_stem"], "example": t2.stem},
        {"name": "t3 stem", "template": p["t3_stem"], "example": t3_true.stem},
        {"name": "t3 options", "template": " / ".join(p["t3_options"]), "example": " / ".join(t3_true.options)},
        {"name": "option line", "template": p["option_line"],
         "example": p["option_line"].format(letter=letters[0], text=t2.options[0])},
        {"name": "abstain option", "template": p["abstain"], "example": p["abstain"]},
        {"name": "abstain2 option", "template": p["abstain2"], "example": p["abstain2"]},
    ]
    rows += [{"name": f"verbal request {v}", "template": p["verbal_wordings"][v], "example": p["verbal_wordings"][v]}
             for v in p["verbal_wordings"]]
    rows.append({"name": "abstain instruction", "template": p["instruction_abstain"],
                 "example": p["instruction_abstain"]})
    prefill = str(cfg.get("readout", {}).get("assistant_prefill", ""))
    rows.append({"name": "assistant prefill", "template": prefill, "example": prefill})
    for task, q in (("t2", t2), ("t3", t3_true)):
        if task == "t2":  # the category names are placeholders; t3's Yes/No are fixed texts
            placeholder = Question(q.task, p["t2_stem"], tuple(f"{{option {k + 1}}}" for k in range(len(q.options))), 0)
        else:
            placeholder = Question(q.task, p["t3_stem"], q.options, 0)
        variants = [("main", v, f"main ({v})") for v in p["verbal_wordings"]]
        variants += [(v, "v1", v) for v in PROMPT_VARIANTS if v != "main"]
        for variant, verbal, label in variants:
            template, _ = render_prompt(placeholder, variant, cfg, verbal=verbal)
            text, _ = render_prompt(q, variant, cfg, verbal=verbal)
            rows.append({"name": f"{task} · {label}", "template": template, "example": text})
    return rows
