"""Each fault of issue 37's list of messages: one line naming the file or setting and the fix (issue 37 item 5).

One test per message, each reading the message as the user sees it; the pipeline-wide behaviour of the
same faults (what is kept, what a rerun does) is in ``test_bad_input.py``, ``test_checkpoint_input.py`` and
``test_faults_snakemake.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from PIL import Image

from murk import report
from murk.core import COMMAND_LINE, SettingsError, check_run_settings, settings
from murk.core import _config as config
from murk.core import _diskfull as diskfull
from murk.core import _paths as paths
from murk.pipeline import markers as workflow
from murk.protocol import _item_files
from murk.protocol import _items as items
from murk.readout import load_vlm
from murk.report import paper
from murk.results import _cube as cube
from murk.scene import _images as images

import stages


def _one_line(msg: str) -> str:
    assert "\n" not in msg.strip(), msg
    return msg


# --- 1: a chat template that raises names the template file and the fix ---

@pytest.mark.parametrize("command,words", [("python", "pass murk.readout.load_vlm"),
                                           ("snakemake", "make demo ARGS='--config")])
def test_a_chat_template_that_raises_names_its_file_and_the_fix(command, words, tiny_checkpoint_dirs, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint_dirs["smolvlm"], folder)
    (folder / "chat_template.jinja").write_text("{{ raise_exception('this template takes no images') }}")
    with pytest.raises(OSError) as e:
        load_vlm(str(folder), device="cpu", command=command)
    msg = _one_line(str(e.value))
    assert f"its chat template {folder / 'chat_template.jinja'} fails on murk's prompt" in msg
    assert "this template takes no images" in msg and "fix: repair that template" in msg and words in msg


# --- 2: a tokenizer without one token per option letter names the tokenizer file and what murk needs ---

def test_option_letters_that_are_not_single_tokens_name_the_tokenizer_and_what_murk_needs(tiny_checkpoint_dirs):
    folder = tiny_checkpoint_dirs["smolvlm"]
    cfg = config.load_config()
    cfg["readout"] = {**cfg["readout"], "option_letters": ["A", "B", "C", "D", "\u03a9"]}  # Ω: two bytes, two tokens
    with pytest.raises(OSError) as e:
        load_vlm(str(folder), device="cpu", config=cfg, command="papermill")
    msg = _one_line(str(e.value))
    assert f"its tokenizer ({folder / 'tokenizer.json'})" in msg and "option letter '\u03a9'" in msg
    assert "must be a single token of the tokenizer" in msg and "readout.option_letters" in msg
    assert "fix:" in msg and "-p model" in msg  # the papermill user's words


# --- 3: a full disk while the offline checkpoint is built: docs/recovery.md's message, not a SafetensorError ---

def test_a_full_disk_while_the_offline_checkpoint_is_built_names_the_root_and_the_resume(tmp_path, monkeypatch):
    import transformers.modeling_utils as modeling_utils
    from safetensors import SafetensorError

    def full(*args, **kwargs):  # what safetensors raises on ENOSPC: no file named, no errno
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                              '"No space left on device" })')

    root = tmp_path / "out"
    root.mkdir()
    (root / "items.json").write_text("[]")
    monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    with pytest.raises(diskfull.DiskFullError) as e:
        load_vlm("murk-tiny/smolvlm", device="cpu", root=root)
    msg = _one_line(str(e.value))
    assert f"no space left on the disk of the output root {root}" in msg and "run the same command again" in msg
    assert "half-built checkpoint was removed" in msg
    assert sorted(p.name for p in root.rglob("*")) == ["checkpoints", "items.json"]  # nothing half-made is left


# --- 4: a cell the paper embeds that is absent or failed: the command that makes it again ---

def test_a_missing_or_failed_embed_says_what_to_run(tmp_path, monkeypatch, capsys):
    import nbformat

    root = tmp_path / "out"
    nb = root / "notebooks" / "04_analyse.ipynb"
    nb.parent.mkdir(parents=True)
    book = nbformat.v4.new_notebook()
    broken = nbformat.v4.new_code_cell("#| label: fig-broken\nplot()")
    broken.outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]
    book.cells.append(broken)
    nbformat.write(book, nb)
    errors = []
    for label in ("fig-absent", "fig-broken"):
        with pytest.raises(report.EmbedError) as e:
            report.resolve_qmd(f"{{{{< embed ../outputs/notebooks/04_analyse.ipynb#{label} >}}}}", {}, tmp_path, root)
        msg = _one_line(str(e.value))
        assert str(nb) in msg and label in msg and "re-run the stage" not in msg
        assert "fix: run the command that made this output root again with --forcerun analyse added" in msg
        assert f"make demo ARGS='--config output_dir={root} --forcerun analyse'" in msg
        assert "python -m murk.pipeline.execute notebooks/04_analyse.py " in msg and f"-p output_dir {root}" in msg  # or docs/stages.md's by-hand command
        errors.append(e.value)
    assert isinstance(errors[0], KeyError) and isinstance(errors[1], ValueError)  # as the callers caught them
    assert "--forcerun depth" in report.remake_words(root / "notebooks" / "02_depth.ipynb")

    def render(**kwargs):  # what render_paper meets (python -m murk.report.paper under make demo / make paper)
        raise errors[0]

    monkeypatch.setattr(paper, "refuse_mixed_paper", lambda root: {})
    monkeypatch.setattr(paper, "render_paper", render)
    monkeypatch.setattr(paper.shutil, "which", lambda name: None)
    assert paper.main(["--output-dir", str(root), "--fallback"]) == 2
    err = capsys.readouterr().err
    assert _one_line(err.strip()).startswith(f"murk: make paper (python -m murk.report.paper) cannot render the paper of "
                                             f"{root}: {nb} has no cell labelled 'fig-absent'")


# --- 5: a read-only output root is refused before the first job, and before pandoc ---

@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no file can be made in: mode 555 for a user, a read-only tmpfs for root (whom modes do not stop);
    skipped where neither is possible."""
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = False
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"root cannot mount a read-only tmpfs here: {r.stderr.decode().strip()}")
        mounted = True
    else:
        ro.chmod(0o555)
    try:
        yield ro
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], check=True)
        else:
            ro.chmod(0o755)


def _defaults() -> dict:
    import yaml

    return yaml.safe_load((stages.ROOT / "data" / "workflow.yaml").read_text())


def test_a_read_only_output_root_is_refused_before_the_first_job(read_only_dir, tmp_path):
    for value, where in ((str(read_only_dir), "it is"), (str(read_only_dir / "new"), f"{read_only_dir}, where it")):
        with pytest.raises(SettingsError) as e:
            check_run_settings({**_defaults(), "output_dir": value}, {"output_dir": COMMAND_LINE}, True, tmp_path)
        (line,) = e.value.problems
        assert line.startswith(f"--config output_dir={value}: the output root {value} cannot be written: {where}")
        assert "fix: make" in _one_line(line) and "writable" in line and "e.g. --config output_dir=" in line


@pytest.mark.slow
def test_snakemake_refuses_a_read_only_output_root_before_the_first_job(read_only_dir):
    """Through Snakemake (make plan / make demo): refused before any job, one line under murk's heading."""
    r = stages.snakemake(read_only_dir, "-n", n_items=1)
    text = r.stdout + r.stderr
    assert r.returncode != 0 and f"--config output_dir={read_only_dir}: the output root" in text, text[-3000:]
    assert "refused before any job ran" in text and "Errno" not in text and "rule select" not in text


def test_make_paper_into_a_read_only_root_refuses_before_pandoc(read_only_dir, monkeypatch, capsys):
    def render(**kwargs):  # pandoc is never reached
        raise AssertionError("render_paper called")

    monkeypatch.setattr(paper, "refuse_mixed_paper", lambda root: {})
    monkeypatch.setattr(paper, "render_paper", render)
    monkeypatch.setattr(paper.shutil, "which", lambda name: None)
    assert paper.main(["--output-dir", str(read_only_dir), "--fallback"]) == 2
    err = _one_line(capsys.readouterr().err.strip())
    assert err.startswith(f"murk: make paper (python -m murk.report.paper) cannot write the paper of {read_only_dir}: "
                          f"{read_only_dir} is ")
    assert "nothing was written" in err and f"fix: make {read_only_dir} writable" in err


# --- 6: a settings file with a Python tag: murk names the file, the line and the tag before Snakemake reads it ---

def test_configfiles_of_a_snakemake_command_line():
    argv = ["-n", "--configfile", "a.yaml", "b.yaml", "--config", "n_items=2", "--configfiles=c.yaml", "--cores", "1"]
    assert settings.configfiles_of(argv) == ["a.yaml", "b.yaml", "c.yaml"]
    assert settings.configfiles_of(["--config", "x.yaml=1", "n_items=2"]) == []


def test_a_settings_file_with_a_python_tag_names_the_file_line_and_tag(tmp_path):
    marker = tmp_path / "ran"
    bad = tmp_path / "mine.yaml"
    bad.write_text(f"n_items: 2\nmodels: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(SettingsError) as e:
        settings.check_configfile(bad)
    msg = _one_line(str(e.value))
    assert msg.startswith(f"--configfile {bad}, line 2: the YAML tag !!python/object/apply:os.system")
    assert "fix: remove the tag" in msg and not marker.exists()
    (tmp_path / "name.yaml").write_text("models: !!python/name:os.system\n")  # one Snakemake's loader accepts
    with pytest.raises(SettingsError, match="the YAML tag !!python/name:os.system"):
        settings.check_configfile(tmp_path / "name.yaml")
    (tmp_path / "broken.yaml").write_text("n_items: [2\n")
    with pytest.raises(SettingsError, match="broken.yaml, line 2: not valid YAML"):
        settings.check_configfile(tmp_path / "broken.yaml")
    (tmp_path / "ok.yaml").write_text("n_items: 2\nmodels: [org/a]\n")
    settings.check_configfile(tmp_path / "ok.yaml")  # plain data passes
    settings.check_configfile(tmp_path / "absent.yaml")  # left to Snakemake, which names it
    if shutil.which("make") is None:
        return
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-C", str(stages.ROOT), "plan", f"ARGS=--configfile {bad}"], capture_output=True,
                       text=True, env=env, timeout=300)  # as the user types it: make plan ARGS='--configfile ...'
    assert r.returncode != 0 and "mix whitespace" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert f"murk: --configfile {bad}, line 2: the YAML tag !!python/object/apply:os.system" in r.stderr
    assert "snakemake" not in r.stdout and not marker.exists()  # refused before Snakemake started


# --- 7: a changed per-model n_items names the model's n_items, not n_verbal_items ---

def _store_attrs(n_items: int, n_verbal: int = 5) -> dict:
    return cube.store_identity(config_hash="c", items_hash="i", model_id="org/m", depth_backend="constant-13.8m",
                               n_verbal_items=n_verbal, n_items=n_items)


def test_a_changed_model_n_items_names_that_n_items_and_the_fix(tmp_path):
    store = tmp_path / "m.zarr"
    cube.open_readout_store(store, [11, 12], ["car", "bus"], _store_attrs(2))
    for n, ids in ((3, [11, 12, 13]), (1, [11])):
        with pytest.raises(ValueError) as e:
            cube.open_readout_store(store, ids, ["car"] * n, _store_attrs(n))
        msg = _one_line(str(e.value))
        assert f"holds the first 2 items of model 'org/m' and this run asks for {n}" in msg
        assert "n_items changed" in msg and "n_verbal_items" not in msg
        assert "give that model n_items 2 again" in msg and f"rm -r {store}" in msg
    # n_verbal_items changed as well (not only capped by n_items): both are named, as before
    with pytest.raises(ValueError) as e:
        cube.open_readout_store(store, [11, 12, 13], ["car"] * 3, _store_attrs(3, n_verbal=1))
    assert "n_verbal_items: store 2, this run 1" in str(e.value)


# --- 8: a folder with an image's name ---

def test_a_folder_with_an_images_name_is_called_a_folder(tmp_path):
    (tmp_path / "000000000139.jpg").mkdir()
    with pytest.raises(ValueError) as e:
        images.load_image(tmp_path / "000000000139.jpg", (80, 40))
    msg = _one_line(str(e.value))
    assert "is a folder, not an image file" in msg and "not found" not in msg
    assert str(tmp_path / "000000000139.jpg") in msg and "replace the folder" in msg
    table = pd.DataFrame([(1, "000000000139.jpg", 80, 40)], columns=["image_id", "file_name", "width", "height"])
    assert "is a folder" in _item_files.image_checks(table, tmp_path)["unreadable"]["1"]  # the select stage's record


# --- 9: an animated GIF cut to its first frame, a PNG's alpha dropped: a note, not silence ---

def test_a_gifs_later_frames_and_a_pngs_alpha_are_noted(tmp_path):
    frames = [Image.fromarray(np.full((40, 80, 3), v, np.uint8)) for v in (0, 255)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    rgba = np.zeros((40, 80, 4), np.uint8)
    rgba[..., 3] = 128
    Image.fromarray(rgba).save(tmp_path / "alpha.png")
    Image.fromarray(np.zeros((40, 80, 3), np.uint8)).save(tmp_path / "plain.png")
    words = {"anim.gif": "is animated (2 frames): only its first frame is used",
             "alpha.png": "has an alpha channel (transparency): it is dropped"}
    for name, said in words.items():
        with pytest.warns(images.ConvertedImageWarning) as w:
            images.load_image(tmp_path / name, (80, 40))
        assert said in _one_line(str(w[0].message)) and str(tmp_path / name) in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        images.load_image(tmp_path / "plain.png", (80, 40))  # nothing left out: no note
    table = pd.DataFrame([(1, "anim.gif", 80, 40), (2, "alpha.png", 80, 40), (3, "plain.png", 80, 40)],
                         columns=["image_id", "file_name", "width", "height"])
    got = _item_files.image_checks(table, tmp_path)  # recorded by the select stage in items_report.json
    assert list(got["converted"]) == ["1", "2"] and not got["unreadable"] and not got["transposed"]
    assert words["anim.gif"] in got["converted"]["1"] and words["alpha.png"] in got["converted"]["2"]


# --- 10: a model that never ran "runs", one with a store "runs again" ---

def test_a_read_out_that_never_ran_is_not_announced_as_running_again(tmp_path):
    marker = tmp_path / "readout" / "new-model.done"
    downstream = [tmp_path / "cube.zarr"]
    downstream[0].mkdir()
    why = workflow.rerun_reason(marker, downstream)  # a model added to a finished run: no marker, no store
    assert why is not None
    said = workflow.rerun_words(marker, dry_run=True)
    assert "again" not in said and "would run (no store of it in this output root" in said
    assert "again" not in workflow.rerun_words(marker)
    workflow.store_of(marker).mkdir(parents=True)  # a store kept from before (its marker removed): it resumes
    assert workflow.rerun_words(marker, dry_run=True).startswith("its read-out would run again")
    assert workflow.rerun_words(marker).startswith("its read-out runs again")


# --- 11: the in-progress notebook folder of outputs-ü is not that of outputs-ä ---

def test_running_notebooks_dirs_of_non_ascii_roots_differ(tmp_path):
    a, b = (workflow.running_notebooks_dir(tmp_path / name) for name in ("outputs-ü", "outputs-ä"))
    assert a != b and a.parent == b.parent
    assert a.name.isascii() and "outputs" in a.name  # still readable, and a name any tool takes
    assert workflow.running_notebooks_dir(tmp_path / "outputs-ü") == a  # the same root: the same folder


# --- 12 (issue 49): a JSON settings file with a bad model entry names the file and the fix, not RepresenterError ---

def test_a_json_settings_file_with_a_bad_model_entry_names_the_file_and_the_fix(tmp_path):
    import json

    from snakemake.common.configfile import load_configfile   # Snakemake's loader: a JSON file's mappings are OrderedDicts

    for entry, said in (({"id": "murk-tiny/smolvlm", "n_items": "abc"}, "n_items must be a whole number of items "
                                                                          ">= 1 (the first N items of the selection), "
                                                                          "got 'abc'; leave it out"),
                        ({"id": "murk-tiny/smolvlm", "items": 2}, "unknown key(s) items; the keys are id, n_items"),
                        ({"n_items": 2}, "has no id: each entry of offline_models is a hub id or folder"),
                        (["a"], "is neither a model id nor a mapping: each entry")):
        bad = tmp_path / "run.json"
        bad.write_text(json.dumps({"offline_models": [entry]}))
        loaded = load_configfile(str(bad))
        shown = f"{bad} (--configfile)"
        with pytest.raises(SettingsError) as e:
            check_run_settings({**_defaults(), **loaded}, {"offline_models": shown}, True, tmp_path)
        (line,) = e.value.problems
        _one_line(line)
        # the value as the file has it (JSON), the file, the entry and the fix; never Python's repr of an OrderedDict
        assert line.startswith(f'"offline_models": [{json.dumps(entry)}] in {shown}: offline_models, entry 1'), line
        assert said in line and "OrderedDict" not in line
    bad.write_text('{"n_items": "abc"}')   # a setting's own example, written as JSON too
    with pytest.raises(SettingsError) as e:
        check_run_settings({**_defaults(), **load_configfile(str(bad))}, {"n_items": shown}, True, tmp_path)
    (line,) = e.value.problems
    assert line.startswith(f'"n_items": "abc" in {shown}: n_items must be') and f'e.g. "n_items": 8 in {shown}' in line


# --- 13 (issue 49): a model folder whose name has no ASCII letter still gets a store of its own ---

def test_a_folder_named_without_ascii_letters_gets_a_non_empty_store_name_of_its_own(tmp_path):
    slugs = {m: paths.model_slug(m) for m in ("€€", "££", "数据", "---")}
    assert all(re.fullmatch(r"u[0-9a-f]{12}", s) for s in slugs.values()), slugs   # the Snakefile's slug="[^/]+"
    assert len(set(slugs.values())) == len(slugs)          # two such folders do not share a store
    assert paths.model_slug("./€€/") == slugs["€€"]          # the same folder written another way: the same store
    assert paths.model_slug("runs/€€") == f"runs--{slugs['€€']}" != paths.model_slug("runs/££")
    assert paths.readout_store("€€", tmp_path).name == f"{slugs['€€']}.zarr"
    assert paths.model_slug("murk-tiny/smolvlm") == "murk-tiny--smolvlm"   # every slug that had a name keeps it


# --- 14 (issue 49): a read-only shard of a read-out store: the file and the fix, not a raw PermissionError ---

@pytest.fixture
def frozen(tmp_path):
    """``freeze(file)`` makes a store's shard file impossible to replace for this user: ``chattr +i`` for root (whom
    modes do not stop; skipped where the file system has no such flag), else its folder mode 555; ``freeze.undo()``
    (the message's fix) and the teardown undo it."""
    undo = []

    def thaw():
        while undo:
            subprocess.run(undo.pop(), check=True)

    def freeze(f):
        if os.geteuid() == 0:
            r = subprocess.run(["chattr", "+i", str(f)], capture_output=True)
            if r.returncode != 0:
                pytest.skip(f"chattr +i is not available here: {r.stderr.decode().strip()}")
            undo.append(["chattr", "-i", str(f)])
        else:
            f.parent.chmod(0o555)
            undo.append(["chmod", "755", str(f.parent)])

    freeze.undo = thaw
    yield freeze
    thaw()


def test_a_read_only_shard_names_the_file_and_the_fix_and_the_read_out_resumes_after_it(tmp_path, frozen):
    store = tmp_path / "m.zarr"
    cube.open_readout_store(store, [11, 12, 13], ["car", "bus", "dog"], _store_attrs(3))
    results = {(arm, lvl, task): {**{k: 0.5 for k in cube.READOUTS}, **{k: "x" for k in cube.TEXT_READOUTS}}
               for arm, lvl in cube.scene.CONDITIONS for task in cube.TASKS}
    cube.write_image(store, 0, results)
    shard = store / "done" / "c" / "0"   # the shard of the done flags, the last file each write makes
    assert shard.is_file()
    frozen(shard)
    for write in (lambda: cube.write_image(store, 1, results), lambda: cube.write_missing(store, 2, "bad image")):
        with pytest.raises(PermissionError) as e:   # still a PermissionError, for code that handles one
            write()
        msg = _one_line(str(e.value))
        assert msg.startswith(f"murk: {shard} of the read-out store {store} cannot be written"), msg
        assert ".partial" not in msg and "is not marked done and is read again" in msg
        assert f"chmod -R u+w {store}" in msg and f"rm -r {store}" in msg and "run the same command again" in msg
        assert e.value.__cause__ is None and e.value.__suppress_context__
    done = xr.open_zarr(store, consolidated=False)["done"].values
    assert done.tolist() == [True, False, False]   # the image before kept; the refused ones read again on resume
    frozen.undo()   # the fix (chmod -R u+w / chattr -i), then the same command: the read-out resumes
    cube.open_readout_store(store, [11, 12, 13], ["car", "bus", "dog"], _store_attrs(3))
    cube.write_image(store, 1, results)
    cube.write_missing(store, 2, "bad image")
    assert xr.open_zarr(store, consolidated=False)["done"].values.all()
