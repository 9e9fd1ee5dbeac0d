"""Tests of murk.protocol: questions and prompt templates (spec Sec. III, Table II)."""

import pytest

from murk.core import load_config
from murk.protocol import (PROMPT_VARIANTS, Question, TASKS, indefinite_article, prompt_table, questions_for_item,
                           render_prompt)

ROW = {
    "category": "umbrella",
    "t2_options": ["car", "umbrella", "bench", "kite"],
    "t2_answer_index": 1,
    "t3_distractor": "truck",
}

INSTRUCTION_MAIN = (
    "Answer with the letter of the correct option first. Then, on a new line, state how confident "
    'you are that your answer is correct as "Confidence: <a number from 0 to 100>".'
)


def test_questions_for_item():
    t2, t3t, t3f = questions_for_item(ROW)
    assert (t2.task, t3t.task, t3f.task) == TASKS
    assert t2 == Question("t2", "What is the object inside the red box?", ("car", "umbrella", "bench", "kite"), 1)
    assert t3t == Question("t3_true", "Is the object inside the red box an umbrella?", ("Yes", "No"), 0)
    assert t3f == Question("t3_false", "Is the object inside the red box a truck?", ("Yes", "No"), 1)


@pytest.mark.parametrize(
    "noun, article",
    [("umbrella", "an"), ("airplane", "an"), ("elephant", "an"), ("oven", "an"), ("orange", "an"),
     ("truck", "a"), ("motorcycle", "a"), ("hair drier", "a"), ("Umbrella", "an")],
)
def test_indefinite_article(noun, article):
    assert indefinite_article(noun) == article


def test_render_main_exact_text():
    text, letters = render_prompt(questions_for_item(ROW)[0], "main")
    assert letters == ("A", "B", "C", "D")
    assert text == (
        "What is the object inside the red box?\n"
        "A. car\nB. umbrella\nC. bench\nD. kite\n" + INSTRUCTION_MAIN
    )


def test_render_abstain_variants():
    cfg = load_config()
    t2, t3t, _ = questions_for_item(ROW, cfg)
    text, letters = render_prompt(t2, "abstain", cfg)
    assert letters == ("A", "B", "C", "D", "E")
    assert text.endswith(
        "D. kite\nE. I cannot tell, the image is too unclear to decide\n"
        "Answer with the letter of the correct option."
    )
    text, letters = render_prompt(t2, "abstain2", cfg)
    assert "\nE. I don't know\n" in text and letters[-1] == "E"
    text, letters = render_prompt(t3t, "abstain", cfg)
    assert letters == ("A", "B", "C")
    assert text == (
        "Is the object inside the red box an umbrella?\nA. Yes\nB. No\n"
        "C. I cannot tell, the image is too unclear to decide\nAnswer with the letter of the correct option."
    )
    text, letters = render_prompt(t3t, "main", cfg)
    assert letters == ("A", "B") and "Confidence:" in text


def test_render_uses_config_templates():
    cfg = load_config()
    cfg["prompts"]["option_line"] = "({letter}) {text}"
    text, _ = render_prompt(questions_for_item(ROW, cfg)[0], "main", cfg)
    assert "(A) car\n(B) umbrella" in text


def test_errors():
    q = questions_for_item(ROW)[0]
    with pytest.raises(ValueError, match="variant"):
        render_prompt(q, "nope")
    with pytest.raises(ValueError, match="t2_answer_index"):
        questions_for_item({**ROW, "t2_answer_index": 0})
    with pytest.raises(ValueError):
        Question("t4", "x", ("a",), 0)
    assert set(PROMPT_VARIANTS) == {"main", "abstain", "abstain2"}


def test_verbal_wordings_follow_the_spec():
    cfg = load_config()
    q = questions_for_item(ROW, cfg)[0]
    texts = {v: render_prompt(q, "main", cfg, verbal=v)[0] for v in ("v1", "v2", "v3")}
    assert texts["v1"].endswith(INSTRUCTION_MAIN)
    assert "rate how likely it is that your answer is correct, from 0 to 100" in texts["v2"]
    assert "If the image is too unclear to be sure, give a low number" in texts["v3"]
    assert len(set(texts.values())) == 3
    with pytest.raises(ValueError, match="verbal"):
        render_prompt(q, "main", cfg, verbal="v9")


def test_prompt_table_is_the_config():
    cfg = load_config()
    rows = prompt_table(cfg)
    by_name = {r["name"]: r for r in rows}
    assert all(set(r) == {"name", "template", "example"} for r in rows)
    assert len(by_name) == len(rows)
    assert by_name["abstain option"]["template"] == "I cannot tell, the image is too unclear to decide"
    assert by_name["abstain2 option"]["template"] == "I don't know"
    assert by_name["assistant prefill"]["template"] == "Answer:"
    assert by_name["t3 stem"]["example"] == "Is the object inside the red box an umbrella?"
    for v in ("v1", "v2", "v3"):
        assert by_name[f"verbal request {v}"]["template"] == cfg["prompts"]["verbal_wordings"][v]
    # one row per task and variant; the abstain option is one more lettered option
    for task, q, last in (("t2", questions_for_item(ROW, cfg)[0], "E"), ("t3", questions_for_item(ROW, cfg)[1], "C")):
        for label, variant, verbal in (("main (v1)", "main", "v1"), ("main (v2)", "main", "v2"),
                                       ("main (v3)", "main", "v3"), ("abstain", "abstain", "v1"),
                                       ("abstain2", "abstain2", "v1")):
            row = by_name[f"{task} · {label}"]
            assert row["example"] == render_prompt(q, variant, cfg, verbal=verbal)[0]
        assert f"\n{last}. I cannot tell, the image is too unclear to decide\n" in by_name[f"{task} · abstain"]["template"]
        assert f"\n{last}. I don't know\n" in by_name[f"{task} · abstain2"]["template"]
    assert by_name["t2 · main (v1)"]["template"].startswith(
        "What is the object inside the red box?\nA. {option 1}\nB. {option 2}\nC. {option 3}\nD. {option 4}\n")
    assert by_name["t3 · abstain"]["template"].startswith(
        "Is the object inside the red box {article} {category}?\nA. Yes\nB. No\nC. ")
    # a changed template shows up in the table
    cfg["prompts"]["abstain2"] = "No idea"
    assert "\nE. No idea\n" in {r["name"]: r for r in prompt_table(cfg)}["t2 · abstain2"]["example"]
