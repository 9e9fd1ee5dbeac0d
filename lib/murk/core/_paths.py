"""The one place that knows murk's layout.

Every stage asks this module for paths instead of building them itself.

Layout
------
``data/``                 inputs only: config.yaml, README, checksums
``outputs/``              everything generated (git-ignored); relocatable with
                          the environment variable ``MURK_OUTPUT_DIR`` or the
                          ``output_dir`` parameter of each notebook
``outputs/items.json``    the selected items (stage *select*)
``outputs/depth/``        metric depth per image, cached (stage *depth*)
``outputs/readout/``      one zarr store per model (stage *readout*)
``outputs/cube.zarr``     the merged result cube (stage *analyse*)
``outputs/analysis/``     tables of the analysis, and the numbers fragment of each
                          analysis notebook (``numbers-study.json``, ``numbers-beyond.json``)
``outputs/figures/``      figures (PNG and PDF)
``outputs/paper_numbers.json``  the flat numbers file the paper reads (the fragments merged)
``outputs/notebooks/``    executed notebooks (the audit trail)
``outputs/checkpoints/``  tiny offline checkpoints built by murk
``outputs/paper/``        the converted paper (HTML, PDF)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def project_root() -> Path:
    """Root of the murk project (the folder holding ``pyproject.toml``)."""
    return PROJECT_ROOT


def data_dir() -> Path:
    """The read-only input folder ``data/``."""
    return PROJECT_ROOT / "data"


def config_file() -> Path:
    """The study configuration: ``data/config.yaml``, or the file named by ``$MURK_CONFIG``.

    ``MURK_CONFIG`` runs every stage with another configuration (e.g. an
    ablation, or a test of the frozen-run check); the select stage records its
    hash, and a frozen run refuses a configuration whose hash differs.
    """
    return Path(os.environ["MURK_CONFIG"]) if os.environ.get("MURK_CONFIG") else data_dir() / "config.yaml"


def output_dir(output_dir: str | os.PathLike | None = None) -> Path:
    """The output root.

    Parameters
    ----------
    output_dir : path, optional
        Explicit root. Default: ``$MURK_OUTPUT_DIR`` if set, else ``outputs/``
        of the project. Relative paths are taken from the project root.
    """
    root = output_dir or os.environ.get("MURK_OUTPUT_DIR") or "outputs"
    root = Path(root)
    if not root.is_absolute():
        root = PROJECT_ROOT / root
    return root


def items_file(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "items.json"


def depth_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "depth"


def readout_store(model: str, root: str | os.PathLike | None = None, shard: int | None = None,
                  shard_size: int | None = None) -> Path:
    """Zarr store of one model's read-outs.

    ``outputs/readout/<slug>.zarr`` for an unsharded run; for shard ``k`` of
    ``shard_size`` items, ``outputs/readout/<slug>/s<shard_size>-<k:04d>.zarr``
    (the shard size is in the name, so a run with another shard size never
    mixes with finished shards of this one).
    """
    if shard is None:
        return output_dir(root) / "readout" / f"{model_slug(model)}.zarr"
    if shard_size is None or int(shard_size) < 1:
        raise ValueError("readout_store: a shard needs shard_size >= 1")
    return output_dir(root) / "readout" / model_slug(model) / f"s{int(shard_size)}-{int(shard):04d}.zarr"


def n_shards(n_items: int, shard_size: int | None) -> int:
    """Number of shards of ``shard_size`` items covering ``n_items`` (1 when unsharded)."""
    if shard_size is None:
        return 1
    return max(1, -(-int(n_items) // int(shard_size)))


def shard_span(n_items: int, shard: int | None = None, shard_size: int | None = None,
               max_items: int | None = None) -> range:
    """Item positions one read-out job covers.

    All items (or the first ``max_items``) when unsharded; items
    ``shard * shard_size`` to ``(shard + 1) * shard_size - 1`` of those for a
    shard (empty beyond the last item).
    """
    last = int(n_items) if max_items is None else min(int(n_items), int(max_items))
    if shard is None:
        return range(0, last)
    if shard_size is None or int(shard_size) < 1:
        raise ValueError("shard_span: a shard needs shard_size >= 1")
    first = int(shard) * int(shard_size)
    return range(min(first, last), min(last, first + int(shard_size)))


def readout_stores(model: str, n_items: int, shard_size: int | None = None,
                   root: str | os.PathLike | None = None) -> Path | list[Path]:
    """The store of a model's unsharded read-out, or the list of its shard stores."""
    if shard_size is None:
        return readout_store(model, root)
    return [readout_store(model, root, s, shard_size) for s in range(n_shards(n_items, shard_size))]


def cube_store(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "cube.zarr"


def analysis_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "analysis"


def figures_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "figures"


def numbers_file(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "paper_numbers.json"


#: the analysis notebooks (``notebooks/<stage>.py``), in the order they run, -> the numbers fragment each writes
#: under ``analysis/`` (merged into :func:`numbers_file` by ``murk.report.merge_numbers``)
NUMBERS_FRAGMENTS = {"04_analyse": "numbers-study.json", "05_beyond": "numbers-beyond.json"}


def numbers_fragment(stage: str, root: str | os.PathLike | None = None) -> Path:
    """The numbers fragment an analysis notebook writes: ``<root>/analysis/numbers-study.json`` (``04_analyse``) or
    ``numbers-beyond.json`` (``05_beyond``).

    Raises
    ------
    ValueError
        If ``stage`` is not an analysis notebook.
    """
    if stage not in NUMBERS_FRAGMENTS:
        raise ValueError(f"{stage!r} is not an analysis notebook: one of {', '.join(NUMBERS_FRAGMENTS)}")
    return analysis_dir(root) / NUMBERS_FRAGMENTS[stage]


def notebooks_out_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "notebooks"


def checkpoints_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "checkpoints"


def paper_out_dir(root: str | os.PathLike | None = None) -> Path:
    return output_dir(root) / "paper"


def model_slug(model: str) -> str:
    """File-system-safe name of a model id or folder: the name of its store, its notebook and its numbers keys.

    The whole id or path is kept, so that two models never share a slug: ``"HuggingFaceTB/SmolVLM-256M-Instruct"``
    -> ``"HuggingFaceTB--SmolVLM-256M-Instruct"``; ``"/data/run1/final"`` -> ``"data--run1--final"`` and
    ``"/data/run2/final"`` -> ``"data--run2--final"`` (a folder's ``.`` and ``..`` components and its
    separators, ``/`` or ``\\``, are dropped). The one slug function: the Snakefile names its markers with it.

    A component with no letter, digit, ``.``, ``_`` or ``-`` of ASCII left (a folder named ``€€`` or ``数据``)
    is named by the digest of its text, ``u`` and 12 hex digits of its UTF-8 bytes' SHA-256, so that a slug is never
    empty and two such folders do not share one (an empty slug named no store, and Snakemake said only
    ``MissingInputException``).

    >>> model_slug("murk-tiny/smolvlm"), model_slug("./ckpt/run1/final/")
    ('murk-tiny--smolvlm', 'ckpt--run1--final')
    >>> model_slug("€€"), model_slug("./€€/"), model_slug("run/€€")
    ('u3ea027bcb894', 'u3ea027bcb894', 'run--u3ea027bcb894')
    """
    parts = [x for x in re.split(r"[\\/]+", str(model)) if x not in ("", ".", "..")]
    slugs = (re.sub(r"[^A-Za-z0-9._-]+", "--", x).strip("-") or _digest_name(x) for x in parts)
    return "--".join(x for x in slugs if x)


def _digest_name(part: str) -> str:
    """A component of a model's path that has no character a slug keeps, named by its content: ``u`` and the first
    12 hex digits of the SHA-256 of its UTF-8 bytes (48 bits)."""
    import hashlib

    return "u" + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def offline() -> bool:
    """True when ``MURK_OFFLINE=1``: no network access at all."""
    return os.environ.get("MURK_OFFLINE", "0").strip().lower() in {"1", "true", "yes"}


def coco_dir(coco_dir: str | os.PathLike | None = None) -> Path:
    """The COCO folder (COCO's own layout: ``annotations/``, ``val2017/``).

    Parameters
    ----------
    coco_dir : path, optional
        Explicit folder. Default ``$MURK_COCO_DIR``, else ``outputs/coco``
        (where the fetch step downloads val2017).
    """
    d = coco_dir or os.environ.get("MURK_COCO_DIR") or (output_dir() / "coco")
    return Path(d).expanduser().resolve()


def unwritable(folder: str | os.PathLike) -> tuple[Path, str] | None:
    """Whether files can be made in ``folder`` (created if missing), without writing anything.

    Parameters
    ----------
    folder : path
        A folder, which may not exist yet.

    Returns
    -------
    (Path, str) or None
        None when ``folder``, or the nearest folder above it that exists (where it
        would be created), lets this user create files (:func:`os.access`,
        ``W_OK | X_OK``, which also says no on a read-only file system, whoever
        asks); otherwise that folder and why: ``"on a read-only file system"`` or
        ``"not writable by this user"``.
    """
    p = Path(folder).absolute()
    for d in [p, *p.parents]:
        if d.exists():
            if not d.is_dir() or os.access(d, os.W_OK | os.X_OK):
                return None  # (a file in the way is another refusal's)
            try:
                read_only = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
            except (OSError, AttributeError):  # pragma: no cover - non-POSIX
                read_only = False
            return d, "on a read-only file system" if read_only else "not writable by this user"
    return None
