"""Bad input and refusals through Snakemake on the offline demo, as users meet them (issue 14).

One offline run of nine COCO items with one tiny checkpoint (a pipeline check) carries eight faults
at once: in a private copy of the COCO folder, one image truncated to a third, one deleted, one
overwritten with 100 random bytes, one replaced by a genuine 20000 x 20000 px PNG (over Pillow's
decompression-bomb limit, issue 21), and one stored rotated by 90 degrees with EXIF orientation 6 while
its annotation keeps the unrotated size (issue 21); after the depth stage, one depth map replaced by a
3 x 3 array, one deleted, and one made negative (right shape: the rendering itself fails). The run
completes (rc 0), every faulty image is recorded in ``missing_reason`` naming its file or the failed
rendering (values NaN), the rotated one is used transposed and recorded so, the good image is read out,
and the paper's colophon lists each one.

The same output root then serves the refusals: a changed ``data/config.yaml`` (in a copy of the
project) and a selection of other items under a new run name are refused before anything is written:
the output root stays byte for byte as it was, and the message gives the complete fixes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import struct
import zlib

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from murk.core import _paths as paths

import stages  # tests/stages.py: the shared COCO sample

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE
MODEL = "murk-tiny/smolvlm"
N_ITEMS = 9
RUN = "faults-test"
pytestmark = [pytest.mark.slow, stages.needs_sample]


def _env(coco: Path, project: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(coco),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg",
            "PYTHONPATH": str(project / "lib")}


def snakemake(out: Path, coco: Path, *targets: str, project: Path = ROOT, n_items: int = N_ITEMS,
              run_name: str = RUN) -> subprocess.CompletedProcess:
    """``snakemake --cores 1 [TARGETS] --config …`` in ``project``, offline, on the COCO folder ``coco``."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *targets, "--config", f"output_dir={out}",
           f"n_items={n_items}", f'offline_models=["{MODEL}"]', f"run_name={run_name}", "figure_pdf=false"]
    return subprocess.run(cmd, cwd=project, env=_env(coco, project), capture_output=True, text=True, timeout=1500)


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root``: relative path -> SHA-256 of its bytes. The root's writer lock (``.murk/``: the
    record of the last run that held the root, murk.core's root lock) is left out: it is no output, and a refused
    run held the root while it checked."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.relative_to(root).parts[0] != ".murk"}


def _times(root: Path) -> dict[Path, int]:
    """Every file under ``root`` (but the root's writer lock, as :func:`tree`) -> its modification time (ns)."""
    return {p: p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] != ".murk"}


def _cells_text(nb: Path) -> str:
    cells = json.loads(nb.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", []))


def _big_png(width: int, height: int) -> bytes:
    """A valid 1-bit grey PNG of ``width`` x ``height`` px, all black (a few kB: its rows compress to nothing)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    row = b"\0" * (1 + -(-width // 8))  # filter byte + the packed bits
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


#: faults whose image is read out all the same (the rotated one: used transposed, recorded in the colophon)
READ_OUT = ("good", "rotated")


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """(output root, COCO copy, {fault: (image id, file)}, the runs' output)."""
    base = tmp_path_factory.mktemp("faults")
    coco, out = base / "coco", base / "out"
    (coco / "val2017").mkdir(parents=True)
    (coco / "annotations").mkdir()
    shutil.copy(SAMPLE / "annotations" / "instances_val2017.json", coco / "annotations")
    for f in (SAMPLE / "val2017").iterdir():
        os.symlink(f, coco / "val2017" / f.name)  # the images nobody damages: links to the shared sample

    r = snakemake(out, coco, f"{out}/items.json")  # select on the intact folder: which items
    assert r.returncode == 0, r.stderr[-4000:]
    table = json.loads((out / "items.json").read_text())
    assert len(table) == N_ITEMS
    ids = [int(x["image_id"]) for x in table]
    files = [x["file_name"] for x in table]
    faults = dict(zip(["truncated", "deleted", "undecodable", "wrong-shape depth", "deleted depth",
                       "negative depth", "good", "over pixel limit", "rotated"], zip(ids, files)))
    img = coco / "val2017"
    data = (SAMPLE / "val2017" / files[0]).read_bytes()
    (img / files[0]).unlink()
    (img / files[0]).write_bytes(data[: len(data) // 3])
    (img / files[1]).unlink()
    (img / files[2]).unlink()
    (img / files[2]).write_bytes(np.random.default_rng(0).bytes(100))
    (img / files[7]).unlink()
    (img / files[7]).write_bytes(_big_png(20000, 20000))  # 4e8 pixels: Pillow refuses to open it
    (img / files[8]).unlink()  # the annotated image stored rotated 90 degrees, EXIF orientation 6 ("show it upright")
    exif = Image.Exif()
    exif[0x0112] = 6
    with Image.open(SAMPLE / "val2017" / files[8]) as im:
        im.transpose(Image.Transpose.ROTATE_90).save(img / files[8], quality=95, exif=exif)
    shutil.rmtree(out)  # the real run starts from the damaged folder (select keeps the missing image)

    r1 = snakemake(out, coco, f"{out}/depth/current.json")
    assert r1.returncode == 0, r1.stderr[-4000:]
    cache = Path(json.loads((out / "depth" / "current.json").read_text())["folder"])
    cache = out / "depth" / cache
    np.save(cache / f"{ids[3]}.npy", np.full((3, 3), 10.0, np.float32))  # a map of the wrong shape
    (cache / f"{ids[4]}.npy").unlink()  # a deleted map
    z = np.load(cache / f"{ids[5]}.npy")
    np.save(cache / f"{ids[5]}.npy", -z)  # the right shape, negative metres: the rendering fails
    r2 = snakemake(out, coco)
    assert r2.returncode == 0, r2.stdout[-2000:] + r2.stderr[-4000:]
    return out, coco, faults, r1.stdout + r1.stderr + r2.stdout + r2.stderr


def test_bad_input_is_recorded_per_image_and_the_run_completes(faulty_run):
    out, coco, faults, _ = faulty_run
    cube = xr.open_zarr(out / "cube.zarr").load()
    assert set(cube["model"].values) == {MODEL, "murk/visibility-monitor", "murk/visibility-monitor-deployable"}
    want = {"truncated": "truncated", "deleted": "not found", "undecodable": "cannot be decoded",
            "wrong-shape depth": "has shape (3, 3)", "deleted depth": "missing",
            "negative depth": "depth_m must be non-negative",
            "over pixel limit": "is 20000 x 20000 px (400,000,000 pixels), over Pillow's decompression-bomb limit"}
    for model in cube["model"].values:
        reasons = dict(zip(cube["image"].values.tolist(), map(str, cube["missing_reason"].sel(model=model).values)))
        for fault, (image_id, name) in faults.items():
            r = reasons[image_id]
            if fault in READ_OUT:
                assert r == "", (model, fault, r)
                continue
            assert want[fault] in r, (model, fault, r)
            if fault == "negative depth":  # the monitor (and the batched read-out, issue 16) prefix it
                assert not model.startswith("murk/visibility-monitor") or r.startswith("rendering failed: "), r
                continue
            named = str(coco / "val2017" / name) if "depth" not in fault else f"{image_id}.npy"
            assert named in r, (model, fault, r)  # the reason names the file
    v = cube["value"].sel(readout="c_int", arm="fog")
    for fault, (image_id, _) in faults.items():
        got = v.sel(image=image_id)
        assert (got.notnull().all() if fault in READ_OUT else got.isnull().all()), fault
    for fault in READ_OUT:
        acc = cube["value"].sel(model=MODEL, readout="answer", image=faults[fault][0])
        assert acc.notnull().any()  # the good image, and the rotated one used transposed, were read out by the VLM


def test_the_rotated_image_is_used_transposed_and_recorded_so(faulty_run):
    """Select records it (stored size, EXIF orientation, the annotation's size), the depth stage wrote its map
    at the annotation's presented size (so the box lies on the target), and the paper's colophon names it."""
    out, coco, faults, _ = faulty_run
    image_id, name = faults["rotated"]
    checks = json.loads((out / "items_report.json").read_text())["image_checks"]
    note = checks["transposed"][str(image_id)]
    rec = next(x for x in json.loads((out / "items.json").read_text()) if int(x["image_id"]) == image_id)
    w, h = int(rec["width"]), int(rec["height"])
    assert str(coco / "val2017" / name) in note and f"stored {h} x {w} px with EXIF orientation 6" in note
    assert f"its annotation is {w} x {h} px: used transposed" in note and list(checks["transposed"]) == [str(image_id)]
    named = {str(faults[f][0]) for f in ("deleted", "undecodable", "over pixel limit")}  # from the headers alone
    assert named <= set(checks["unreadable"]) <= named | {str(faults["truncated"][0])}  # (its header is intact)
    select = _cells_text(out / "notebooks" / "01_select.ipynb")
    assert f"image {image_id} used transposed" in select
    assert f"image {faults['over pixel limit'][0]} recorded as missing" in select
    current = json.loads((out / "depth" / "current.json").read_text())
    z = np.load(out / "depth" / current["folder"] / f"{image_id}.npy")
    s = min(1.0, 448 / max(w, h))
    assert z.shape == (max(1, round(h * s)), max(1, round(w * s)))  # the annotation's frame, not the stored one
    md = (out / "paper" / "index.md").read_text(encoding="utf-8")
    assert f"image {image_id} (stored {h} x {w} px with EXIF orientation 6" in md


def test_the_stages_name_what_they_skipped(faulty_run):
    out, coco, faults, _ = faulty_run
    select = _cells_text(out / "notebooks" / "01_select.ipynb")
    assert "MissingImageWarning" in select and faults["deleted"][1] in select  # the warning names the file
    depth = _cells_text(out / "notebooks" / "02_depth.ipynb")
    for fault in ("truncated", "deleted", "undecodable", "over pixel limit"):
        assert f"no depth map for image {faults[fault][0]}" in depth
    assert f"scene figure: image {faults['wrong-shape depth'][0]}" in depth  # the first item with depth
    nominal = xr.open_dataset(out / "analysis" / "nominal_equivalence.nc").load()
    nominal.close()
    miss = dict(zip(nominal["image"].values.tolist(), map(str, nominal["missing_reason"].values)))
    for fault in ("truncated", "deleted", "undecodable", "over pixel limit"):  # (depth damaged after this stage)
        assert miss[faults[fault][0]] != "", fault
    assert "decompression-bomb" in miss[faults["over pixel limit"][0]]
    for fault in READ_OUT:
        assert miss[faults[fault][0]] == "", fault


def test_the_colophon_lists_every_missing_image(faulty_run):
    out, _, faults, _ = faulty_run
    html = (out / "paper" / "index.html").read_text(encoding="utf-8")
    md = (out / "paper" / "index.md").read_text(encoding="utf-8")
    assert (out / "paper" / "index.pdf").is_file()
    for fault, (image_id, _) in faults.items():
        rows = [line for line in md.splitlines() if line.startswith("|") and f"| {image_id} |" in line]
        assert bool(rows) == (fault not in READ_OUT), (fault, rows)  # in the missing table, and only the faulty
        assert fault in READ_OUT or str(image_id) in html


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) not installed")
def test_the_pdf_keeps_every_table_row(faulty_run):
    """The demo paper's PDF (A4): every table row present, nothing drawn over anything, and every row
    of the sweep tables and of the missing-input table found as one line of the PDF."""
    from _pdf import check_pdf_keeps_every_table_row, check_rows_on_lines

    out = faulty_run[0]
    pdf = out / "paper" / "index.pdf"
    check_pdf_keeps_every_table_row(pdf, (out / "paper" / "index.md").read_text(encoding="utf-8"))
    for name in ("tbl-sweep-t2", "tbl-sweep-t3", "tbl-missing"):
        table = (out / "analysis" / f"{name}.md").read_text(encoding="utf-8")
        assert check_rows_on_lines(pdf, table) == len(table.splitlines()) - 2, name


# --- a refusal writes nothing ---

_SKIP = {".git", ".venv", ".snakemake", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def _project_copy(dst: Path) -> Path:
    def ignore(folder, names):
        top = Path(folder).resolve() == ROOT.resolve()
        return {n for n in names if n in _SKIP or n.endswith(".egg-info") or (top and n.startswith("outputs"))}

    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def test_changed_config_is_refused_and_writes_nothing(faulty_run, tmp_path):
    """``data/config.yaml`` edited under the frozen run name: Snakemake re-runs select, which refuses
    before writing; the output root is byte-identical; both complete fixes are named. The same in a
    new, empty output root (only the frozen record refuses there): it stays without a file."""
    out, coco, _, _ = faulty_run
    project = _project_copy(tmp_path / "murk")
    cfg = project / "data" / "config.yaml"
    text = cfg.read_text()
    assert "shuffle_offset: 37" in text
    cfg.write_text(text.replace("shuffle_offset: 37", "shuffle_offset: 38"))
    before = tree(out)
    new_root = tmp_path / "new-root"
    msgs = {}
    for root in (out, new_root):
        r = snakemake(root, coco, project=project)
        msgs[root] = r.stdout + r.stderr
        assert r.returncode != 0, msgs[root][-3000:]
        assert "Nothing was written" in msgs[root]
        assert "git checkout data/config.yaml" in msgs[root]  # fix 1: restore the config
        assert "make demo ARGS='--config run_name=NEW output_dir=outputs-NEW'" in msgs[root]  # fix 2: a new run
    assert tree(out) == before
    assert "holds 4 store(s) of another selection" in msgs[out] and "config_hash" in msgs[out]
    assert "Restored previous version" in msgs[out]  # Snakemake put items.json back (update() outputs)
    assert f"run {RUN!r} is frozen" in msgs[new_root]  # no stores there: the frozen record refused
    assert not new_root.exists() or tree(new_root) == {}


def test_root_with_stores_of_another_selection_is_refused_before_writing(faulty_run):
    """Other items under a new run name into the same output root: select refuses (its stores belong to
    the old selection) before it writes anything, the new run name's frozen record included."""
    out, coco, _, _ = faulty_run
    before = tree(out)
    times = _times(out)
    r = snakemake(out, coco, n_items=N_ITEMS - 1, run_name="faults-test-other")
    msg = r.stdout + r.stderr
    assert r.returncode != 0
    assert f"refuses to write into the output root {out}" in msg and "items_hash" in msg
    assert str(out / "readout" / f"{paths.model_slug(MODEL)}.zarr") in msg and "rm -r" in msg
    assert tree(out) == before
    assert not (Path(os.environ["MURK_FROZEN_DIR"]) / "faults-test-other.json").exists()  # not even the record
    # nor a time stamp (Snakemake restores a failed job's update() outputs as new files; murk puts the times
    # back), so by the files nothing is out of date; nor the refused job's params, which Snakemake records as if
    # it had run (murk puts the records of before back, issue 39): the old settings, every rerun trigger on
    # (params included), plan nothing
    assert _times(out) == times
    r = snakemake(out, coco, "-n")
    assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_checkpoints_that_cannot_be_read_out_are_refused_in_snakemakes_words(faulty_run, tmp_path):
    """Four local checkpoints as offline_models on the finished root (issue 21): a truncated
    model.safetensors, pickle weights only, a text-only language model: each read-out refuses in one line
    naming the file (or what the checkpoint is) and the fix in the words a Snakemake user types. The
    fourth declares custom code (auto_map) for its known model_type: it is read out with the built-in
    class, and its executed notebook and store say which class was used instead of which. Nothing the
    root held changes (the fourth model's new files are removed again, for the tests after this one)."""
    import torch
    from safetensors.torch import load_file

    from test_checkpoint_input import _text_only  # a tiny random LlamaForCausalLM, saved offline

    out, coco, _, _ = faulty_run
    built = out / "checkpoints" / paths.model_slug(MODEL)
    trunc = shutil.copytree(built, tmp_path / "ckpt-truncated")
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[: len(data) // 2])
    pickled = shutil.copytree(built, tmp_path / "ckpt-pickled")
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    llama = _text_only("llama", tmp_path / "ckpt-llama")
    automap = shutil.copytree(built, tmp_path / "ckpt-automap")
    cfg = json.loads((automap / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForImageTextToText": "modeling_murk_x.XForConditionalGeneration"}
    (automap / "config.json").write_text(json.dumps(cfg))
    before = tree(out)
    # the fourth, which is read out, on its first item only (a model entry with n_items, as a configfile sets it)
    models = json.dumps([str(p) for p in (trunc, pickled, llama)] + [{"id": str(automap), "n_items": 1}])
    # --rerun-triggers mtime: the refused run of the test before recorded its select params (Snakemake's params
    # trigger would re-plan select and everything after it); only the four new read-outs are asked for here
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--keep-going", "--rerun-triggers", "mtime",
           "--config", f"output_dir={out}",
           f"n_items={N_ITEMS}", f"offline_models={models}", f"run_name={RUN}", "figure_pdf=false"]
    r = subprocess.run(cmd, cwd=ROOT, env=_env(coco), capture_output=True, text=True, timeout=1500)
    msg = r.stdout + r.stderr
    assert r.returncode != 0, msg[-3000:]
    lines = {k: [ln for ln in msg.splitlines() if f"cannot load model '{p}'" in ln]
             for k, p in (("trunc", trunc), ("pickled", pickled), ("llama", llama))}
    assert all(lines.values()), msg[-6000:]
    assert f"{trunc / 'model.safetensors'} is truncated" in lines["trunc"][0]
    assert "transformers version" not in lines["trunc"][0]
    assert "pytorch_model.bin" in lines["pickled"][0] and "--config allow_pickle=true" in lines["pickled"][0]
    assert "murk.readout.load_vlm" not in lines["pickled"][0]
    assert "a text-only language model (model_type 'llama', architectures LlamaForCausalLM)" in lines["llama"][0]
    assert "--config offline_models=" in lines["llama"][0]
    # custom code not run: said in the executed notebook and kept in the store's attributes
    store = paths.readout_store(str(automap), out)
    note = json.loads(xr.open_zarr(store, consolidated=False).attrs["custom_code_not_run"])
    assert note == {"config.json AutoModelForImageTextToText":
                    "modeling_murk_x.XForConditionalGeneration -> SmolVLMForConditionalGeneration"}
    new = sorted(set(tree(out)) - set(before))
    nbs = [out / k for k in new if k.startswith("notebooks/03_readout")]
    assert len(nbs) == 1, new
    said = _cells_text(nbs[0])
    assert ("WARNING" in said and "modeling_murk_x.XForConditionalGeneration: the built-in transformers class "
            "SmolVLMForConditionalGeneration was used instead" in said)
    after = tree(out)
    assert {k: v for k, v in after.items() if k in before} == before  # a refusal loses nothing already computed
    assert all(k.startswith(("notebooks/03_readout", "readout/")) for k in new), new
    shutil.rmtree(store)
    for k in new:
        (out / k).unlink(missing_ok=True)


def test_an_unknown_category_id_is_refused_in_one_line_and_writes_nothing(faulty_run, tmp_path):
    """The same COCO folder with one annotation of a category its file does not declare (was a bare
    ``KeyError: 9999``): select (re-run: another COCO folder) refuses in one line naming the annotation file,
    the annotation id and the fix; the output root stays byte for byte as it was."""
    out, coco, _, _ = faulty_run
    coco2 = tmp_path / "coco"
    (coco2 / "annotations").mkdir(parents=True)
    os.symlink(coco / "val2017", coco2 / "val2017")
    ann = json.loads((coco / "annotations" / "instances_val2017.json").read_text())
    first = json.loads((out / "items.json").read_text())[0]
    ann["annotations"].append({"id": 987654321, "image_id": int(first["image_id"]), "category_id": 9999,
                               "bbox": [1.0, 1.0, 60.0, 60.0], "area": 3600.0, "iscrowd": 0})
    (coco2 / "annotations" / "instances_val2017.json").write_text(json.dumps(ann))
    before = tree(out)
    r = snakemake(out, coco2)
    msg = r.stdout + r.stderr
    assert r.returncode != 0, msg[-3000:]
    line = next(x for x in msg.splitlines() if "annotation 987654321" in x)
    assert str(coco2 / "annotations" / "instances_val2017.json") in line and "category_id 9999" in line
    assert "add each such category to 'categories'" in line and "run select again" in line
    assert "KeyError" not in msg
    assert tree(out) == before
