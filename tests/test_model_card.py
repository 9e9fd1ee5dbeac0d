"""murk.report's model cards (issue 41, item 4): Hugging Face ``model-index`` front matter whose numbers are the
run's crossings, the run's identity, its conditions, the depth-scale caveat and the pipeline-check label."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from murk import report
from test_export import RUN_ID, crossings_of, numbers_of
from test_samples import small_cube  # noqa: F401  (the module's cube fixture)


def _front(card: str) -> tuple[dict, str]:
    assert card.startswith("---\n")
    head, body = card[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def _metrics(front: dict) -> dict:
    """{(arm-task config, metric name): (value, args)} of a card's model-index, read by huggingface_hub."""
    from huggingface_hub.repocard_data import model_index_to_eval_results

    name, evals = model_index_to_eval_results(front["model-index"])
    return name, {(e.dataset_config, e.metric_name): (e.metric_value, e.metric_args or {}) for e in evals}


def test_front_matter_holds_the_runs_crossings_and_widths(small_cube):  # noqa: F811
    models = [str(m) for m in small_cube["model"].values]
    cr = crossings_of(models)
    card = report.model_card("org/a", small_cube, cr, numbers_of(models))
    front, _ = _front(card)
    name, got = _metrics(front)
    assert name == "org/a" and front["tags"][:2] == ["murk", "vision-language-model"]
    c = cr.sel(model="org/a")
    want = 0
    for arm in ("fog", "underwater"):
        for task in ("t2", "t3"):
            for ro in report.CARD_SIGNALS:
                x = c.sel(arm=arm, task=task, readout=ro)
                who = "acc" if ro == "correct" else ro
                key = next(k for k in got if k[0] == f"{arm}-{task}" and k[1].startswith(f"V_{who} (m)"))
                value, args = got[key]
                assert value == float(x["v_cross_m"])   # exact: from crossings.nc, not from printed text
                if str(x["censored_side"].values):
                    assert args == {"bound": "upper"}
                else:
                    assert (args["ci_low"], args["ci_high"]) == (float(x["v_lo_m"]), float(x["v_hi_m"]))
                    assert args["ci_level"] == 0.95 and args["bootstrap_resamples"] == 2000
                want += 1
                if ro != "correct" and np.isfinite(float(x["w"])):
                    key = next(k for k in got if k[0] == f"{arm}-{task}" and k[1].startswith(f"W_{ro} "))
                    assert got[key][0] == float(x["w"])
                    want += 1
    # every metric in its own arm and task (huggingface_hub groups results by dataset config: t2 and t3 apart),
    # the undefined W (verbal_conf, under water, t3) left out
    assert len(got) == want == 4 * 5 + 4 * 4 - 1
    assert not any(c == "underwater-t3" and n.startswith("W_verbal_conf") for c, n in got)
    assert any(c == "underwater-t2" and n.startswith("W_verbal_conf") for c, n in got)


def test_a_changed_crossing_changes_the_card(small_cube):  # noqa: F811
    """The seam: the card reads crossings.nc, so a crossing changed there is the card's value."""
    models = [str(m) for m in small_cube["model"].values]
    cr = crossings_of(models)
    cr["v_cross_m"].loc[dict(model="org/a", arm="underwater", task="t2", readout="abstain")] = 42.5
    _, got = _metrics(_front(report.model_card("org/a", small_cube, cr, numbers_of(models)))[0])
    assert got[("underwater-t2", next(n for c, n in got if n.startswith("V_abstain (m)")))][0] == 42.5


def test_body_names_run_conditions_caveat_and_pipeline_check(small_cube):  # noqa: F811
    models = [str(m) for m in small_cube["model"].values]
    numbers = numbers_of(models)
    real = report.model_card("org/a", small_cube, crossings_of(models), numbers, report.EXPORT_FILES)
    check = report.model_card("murk-tiny/b", small_cube, crossings_of(models), numbers)
    front_real, body_real = _front(real)
    front_check, body_check = _front(check)
    assert "pipeline-check" in front_check["tags"] and "pipeline-check" not in front_real["tags"]
    assert "Pipeline check, not a result" in body_check and "Pipeline check" not in body_real
    for text in (f"`{RUN_ID}`", "`a-feedfacecafe`", f"`{small_cube.attrs['config_hash']}`", "`rev0`",
                 "`constant-13.8m`", "| fog | t2 | accuracy | 12.6 | [9.0, 15.0] |  |  |",
                 "| fog | t2 | internal confidence | n/a |  | ≥ 0.51 |  |", report.DEPTH_SCALE_CAVEAT,
                 numbers["methods.depth"], "ImageNet-C fog severities 1, 2, 3, 4, 5", "items: 3 COCO val2017 images",
                 "samples.parquet"):
        assert text in body_real, text
    assert "items: 2 COCO val2017 images read out by this model (of 3" in body_check
    with pytest.raises(KeyError, match="no crossings"):
        report.model_card("murk/visibility-monitor", small_cube, crossings_of(models), numbers)


def test_a_model_folder_named_with_markup_is_shown_as_written(small_cube):  # noqa: F811
    """Issue 49: the card's heading and identity table show a folder named with HTML, a Markdown link and
    backticks as code: the HTML of the body (GitHub's Markdown, as the Hub renders cards) holds no tag or link
    from it, and the name as written."""
    import html as html_lib

    pypandoc = pytest.importorskip("pypandoc")
    hostile = "runs/`x` <img src=x onerror=alert(1)> [x](javascript:alert(1)) a|b"
    models = [hostile if str(m) == "org/a" else str(m) for m in small_cube["model"].values]
    cube = small_cube.assign_coords(model=models)
    cube["model_revision"] = cube["model_revision"].copy(data=np.array(["sha256:<b>|`r`"] * len(models), object))
    _, body = _front(report.model_card(hostile, cube, crossings_of(models), numbers_of(models)))
    assert body.lstrip().startswith(f"# murk read-outs of ``{hostile}``")
    html = pypandoc.convert_text(body, "html5", format="gfm", extra_args=["--wrap=none"])   # the Hub's Markdown
    assert "<img" not in html and "href=" not in html and "<b>" not in html
    assert hostile in html_lib.unescape(html) and "sha256:<b>|`r`" in html_lib.unescape(html)
