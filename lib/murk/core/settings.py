"""The run settings' schema: every key of ``data/workflow.yaml``, its type and range, checked before anything runs.

The run settings (which models, how many items, where; ``data/workflow.yaml``, a
``--configfile`` such as ``data/study.yaml``, ``--config key=value`` on the command
line) are read by the Snakefile and, for a notebook run by hand, by
:func:`murk.core.run_default`. :data:`SCHEMA` is their one description:
:func:`check_run_settings` checks a whole configuration when the Snakefile is
parsed, before any job and also in a dry run (``make plan``), and
:func:`check_setting` checks one value (a notebook parameter that mirrors a run
setting). A key that is not a run setting is refused with the nearest known key
(``n_itmes`` -> "did you mean n_items?"), a value of the wrong type or out of range
is refused naming the key, the value as it was typed and the accepted form, and an
empty model list is refused at the start instead of three stages later.

What arrives
------------
Snakemake's ``--config key=value`` tries ``int``, ``float``, the words ``True`` and
``False``, then YAML with every scalar kept as text (``yaml.BaseLoader``): so
``n_items=abc`` arrives as the text ``"abc"``, ``trust_remote_code=true`` as the
text ``"true"`` (only ``True`` and ``False`` become booleans), ``shard_size=null``
as the text ``"null"``, ``shard_size=`` as None, and the ``n_items`` of a model entry
``offline_models=[{id: x, n_items: 2}]`` as the text ``"2"``. papermill's ``-p``
turns ``True``, ``False``, ``None`` and numbers into Python values and keeps the
rest as text. A configfile is YAML (``true``, ``yes``, ``null`` are YAML's). The
checks accept these spellings and nothing looser: a whole number written as
digits, ``true``/``false`` in any case, ``null``/``~``/``none`` for a setting that
may be null; ``yes``, ``1`` or ``2.0`` for a boolean or a count are refused.

Paths
-----
A relative ``output_dir`` (or ``coco_dir``) is taken from the folder Snakemake runs
in (its working directory: the project folder for ``make demo``), as Snakemake
takes the rules' files. :func:`check_run_settings` returns that folder's absolute
path, which the Snakefile gives the notebooks and ``murk.report.paper``:
:func:`murk.core.output_dir` would take a relative path from the project root
(the folder of this package's checkout), which is another folder when Snakemake
runs elsewhere or with another checkout's environment.

This module imports nothing heavy (the Snakefile imports it on every run).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from murk.core._model_entries import model_entries

__all__ = ["Setting", "SCHEMA", "COMMAND_LINE", "PAPERMILL", "DEFAULT_FILE", "SettingsError", "RunSettings",
           "check_setting", "setting_origins", "check_run_settings", "LEVEL_TOLERANCE", "match_level",
           "check_configfile", "configfiles_of", "model_id_problem", "remote_job_problems"]

#: origin of a value given on Snakemake's command line (``--config key=value``, also ``make demo ARGS='--config …'``)
COMMAND_LINE = "--config"
#: origin of a notebook parameter given by hand (``papermill … -p key value``)
PAPERMILL = "papermill"
#: the run settings' defaults, the Snakefile's ``configfile:`` (relative to the project folder)
DEFAULT_FILE = "data/workflow.yaml"

_NULL_WORDS = {"", "null", "~", "none"}
_BOOL_WORDS = {"true": True, "false": False}
_INT_TEXT = re.compile(r"^[+-]?[0-9]+$")
# the text forms of a COCO split and a frozen run name (murk.core.freeze_run's rule)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_DEVICE = re.compile(r"^(cpu|mps|cuda(:[0-9]+)?|xpu(:[0-9]+)?)$")
# characters the Snakefile cannot put into its file patterns and shell commands: Snakemake reads
# {…} as wildcards, and the rules' commands hold the output root unquoted
_PATH_BAD = re.compile(r"[\s{}'\"$;&|<>()`*?\[\]!#\\]")
# a Hugging Face hub id (huggingface_hub.utils.validate_repo_id: [org/]name of letters, digits, '-', '_', '.', at
# most 96 characters, neither '--' nor '..'); every other model id must name an existing folder
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)?[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# what snakemake-executor-plugin-slurm (2.8) cannot carry literally to its jobs: it passes each --config text as
# Python's repr inside sbatch --wrap="…", which a shell reads on the submitting machine and again in the job
# (one kind of quote is carried; both kinds in one text are not, nor $, backticks, backslashes, line breaks)
_REMOTE_UNSAFE = re.compile(r"[$`\\\n\r]")


@dataclass(frozen=True)
class Setting:
    """One run setting: its key, kind, range and accepted form.

    Attributes
    ----------
    key : str
        The key, as in ``data/workflow.yaml``.
    kind : {"int", "bool", "name", "text", "path", "choice", "device", "models", "level"}
        ``int``: a whole number (``minimum`` and above); ``bool``: true or false;
        ``name``: letters, digits, ``.``, ``_``, ``-`` (1-100, not a number);
        ``text``: any non-empty text; ``path``: a folder path; ``choice``: one of
        ``choices``; ``device``: a torch device (``cpu``, ``cuda``, ``cuda:N``,
        ``mps``); ``models``: a model list (:func:`murk.core.model_entries`);
        ``level``: a visibility of the sweep in m (exact, or within 2.5 % as the spec
        prints it: 3.9 for 3.90625).
    form : str
        The accepted form in words (used in refusals).
    example : str
        A valid value as a user types it (used in refusals: ``--config key=<example>``).
    nullable : bool
        Whether null is accepted (its meaning is in ``form``).
    minimum : int, optional
        Least value of an ``int``.
    maximum : int, optional
        Greatest value of an ``int``.
    choices : tuple of str
        The values of a ``choice``.
    """

    key: str
    kind: str
    form: str
    example: str
    nullable: bool = False
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    maximum: int | None = None


_MODELS_FORM = ("a list of models: hub ids or folders, or {id: <hub id or folder>, n_items: N} for the first "
                "N items, with server: <base URL> (and served_model: <name>) for a model read out through an "
                "OpenAI-compatible server (murk.core.model_entries)")

#: The run settings, in the order of ``data/workflow.yaml`` (a test checks that the two list the same keys).
SCHEMA: dict[str, Setting] = {s.key: s for s in (
    Setting("output_dir", "path", "a folder path (created if missing; a relative path is taken from the folder "
            "snakemake runs in, the project folder for make)", "outputs-NEW"),
    Setting("coco_dir", "path", "null ($MURK_COCO_DIR, else outputs/coco) or a folder in COCO's layout "
            "(annotations/, val2017/)", "../shared/coco-val2017-sample", nullable=True),
    Setting("split", "name", "the name of a COCO split, whose annotations are annotations/instances_<split>.json "
            "(the study: val2017)", "val2017"),
    Setting("n_items", "int", "a whole number of items >= 1 (the study: 1000)", "8", minimum=1),
    Setting("seed", "int", "a whole number >= 0 (the selection's seed; the study: 1)", "1", minimum=0),
    Setting("run_name", "name", "null (offline-demo, or demo online) or a name of 1-100 letters, digits, '.', '_' "
            "or '-' that starts with a letter or digit and is not a number (its frozen record "
            "data/frozen/<run_name>.json)", "study-2025", nullable=True),
    Setting("depth_backend", "choice", "one of auto (constant when MURK_OFFLINE=1, else depth-anything-v2), "
            "depth-anything-v2, folder or constant", "auto",
            choices=("auto", "depth-anything-v2", "folder", "constant")),
    Setting("depth_model", "text", "a hub id or folder of a Depth Anything V2 metric checkpoint (with "
            "depth_backend folder: a folder of <image_id>.npy maps in metres)",
            "depth-anything/Depth-Anything-V2-Metric-Outdoor-Small-hf"),
    Setting("device", "device", "null (cuda if available, else cpu), cpu, cuda, cuda:N or mps", "cuda:0",
            nullable=True),
    Setting("shard_size", "int", "null (one read-out job per model) or a whole number of items >= 1 per "
            "read-out job", "100", nullable=True, minimum=1),
    Setting("n_verbal_items", "int", "a whole number of items >= 0 also asked the verbal wordings v2 and v3 "
            "(0: none; the study: 300)", "2", minimum=0),
    Setting("trust_remote_code", "bool", "true or false (true runs code shipped with a checkpoint: only for "
            "checkpoints you trust)", "true"),
    Setting("allow_pickle", "bool", "true or false (true also accepts pickle weights, pytorch_model.bin)", "true"),
    Setting("binary_task", "choice", "null (the study's t3: verification of the boxed object) or one of "
            "verification, existence (the pilot's: is the category anywhere in the image; murk.protocol)", "existence",
            nullable=True, choices=("verification", "existence")),
    Setting("distractors", "choice", "null (the study's prior-matched distractors) or one of prior-matched, "
            "uniform (the pilot's: uniform over the categories absent from the image)", "uniform",
            nullable=True, choices=("prior-matched", "uniform")),
    Setting("box_width_px", "int", "null (the study's 8 px, data/config.yaml) or a whole number of pixels >= 1 "
            "(the pilot: 3)", "3", nullable=True, minimum=1),
    Setting("sweep_end_m", "level", "null (the study's 1.95 m) or one of the sweep's levels in m, as printed or "
            "exact (250, 125, 62.5, 31.3, 15.6, 7.8, 3.9, 1.95; the pilot: 3.9)", "3.9", nullable=True),
    Setting("abstain_wordings", "int", "null (the study's 2) or 1 (the pilot: the main wording only) or 2",
            "1", nullable=True, minimum=1, maximum=2),
    Setting("compare_with", "path", "null or the output folder of another design's run on the same COCO "
            "folder and models (e.g. outputs, the study's design), compared with this run in the paper's "
            "diagnostics", "outputs", nullable=True),
    Setting("figure_pdf", "bool", "true or false (true: the analysis notebooks also write each figure as a vector "
            "PDF, figures/<name>.pdf, beside the PNG the paper embeds)", "false"),
    Setting("models", "models", _MODELS_FORM + ", read out when MURK_OFFLINE is not set",
            "[HuggingFaceTB/SmolVLM-256M-Instruct]"),
    Setting("offline_models", "models", _MODELS_FORM + ", read out when MURK_OFFLINE=1",
            "[murk-tiny/smolvlm]"),
)}


class SettingsError(ValueError):
    """Run settings refused: the message names each key, its value as typed and the accepted form.

    Attributes
    ----------
    problems : list of str
        One line per refused setting.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message)
        self.problems = list(problems) or [message]


class RunSettings(NamedTuple):
    """A checked configuration (:func:`check_run_settings`).

    Attributes
    ----------
    settings : dict
        Every setting with its value normalised (``"true"`` -> True, ``"null"`` ->
        None, digits -> int, a model entry's ``n_items`` -> int); keys as given.
    output_dir : str
        ``output_dir`` as Snakemake's paths use it: ``~`` expanded, normalised
        (``outputs/`` -> ``outputs``), relative to Snakemake's working directory
        when given relative.
    output_root : str
        The same folder, absolute: what the notebooks (``-p output_dir``) and
        ``python -m murk.report.paper --output-dir`` are given.
    models_key : str
        ``"offline_models"`` when ``MURK_OFFLINE=1``, else ``"models"``.
    model_entries : list of murk.core.ModelEntry
        The models that run, each with its number of items.
    notes : list of str
        Lines for the start of the run (:func:`announce`): the models that run, the
        output root, and why a given model list is not used.
    """

    settings: dict
    output_dir: str
    output_root: str
    models_key: str
    model_entries: list
    notes: list


# ----------------------------------------------------------------------------- how values were typed

def _plain(value: Any) -> Any:
    """``value`` with every mapping a dict and every sequence a list: Snakemake reads a JSON settings file into
    ``OrderedDict`` mappings, which YAML's safe dumper refuses (``RepresenterError``)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _is_json(origin: str) -> bool:
    """Whether ``origin`` is a JSON settings file (``run.json (--configfile)``)."""
    return origin.removesuffix(" (--configfile)").lower().endswith(".json")


def _as_typed(value: Any, origin: str) -> str:
    """A value as the user typed it at ``origin`` (a ``.json`` settings file's as JSON, any other file's as YAML)."""
    import json

    import yaml

    value = _plain(value)
    if _is_json(origin):
        return json.dumps(value, ensure_ascii=False, default=str)
    if origin == COMMAND_LINE:
        if value is None:
            return ""
        if isinstance(value, (list, tuple, dict)):
            return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        return str(value)
    if value is not None and not isinstance(value, (list, tuple, dict)) and origin == PAPERMILL:
        return str(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").strip()


def _where(key: str, value: Any, origin: str) -> str:
    """``--config n_items=abc`` / ``-p n_items abc`` / ``n_items: abc in data/study.yaml``."""
    typed = _as_typed(value, origin)
    if origin == COMMAND_LINE:
        return f"--config {key}={typed}"
    if origin == PAPERMILL:
        return f"-y '{key}: {typed}'" if isinstance(value, (list, tuple, dict)) else f"-p {key} {typed}"
    return f'"{key}": {typed} in {origin}' if _is_json(origin) else f"{key}: {typed} in {origin}"


def _fix(key: str, origin: str) -> str:
    """The accepted form of ``key`` written the way it was given."""
    ex = SCHEMA[key].example
    if origin == COMMAND_LINE:
        return f"e.g. --config {key}={ex}" if SCHEMA[key].kind != "models" else f"e.g. --config '{key}={ex}'"
    if origin == PAPERMILL:
        return f"e.g. -y '{key}: {ex}'" if SCHEMA[key].kind == "models" else f"e.g. -p {key} {ex}"
    if _is_json(origin):   # the example (YAML text) as JSON
        import json

        import yaml

        return f'e.g. "{key}": {json.dumps(yaml.safe_load(ex), ensure_ascii=False)} in {origin}'
    return f"e.g. {key}: {ex} in {origin}"


def _refuse(key: str, value: Any, origin: str, why: str = "") -> SettingsError:
    s = SCHEMA[key]
    got = f" ({why})" if why else ""
    return SettingsError(f"{_where(key, value, origin)}: {key} must be {s.form}{got}; {_fix(key, origin)}")


def _unknown(key: str, value: Any, origin: str, known: Sequence[str]) -> SettingsError:
    near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else f"the run settings are {', '.join(known)}"
    return SettingsError(f"{_where(key, value, origin)}: {key} is not a run setting: {hint} "
                         f"(each run setting is listed and explained in {DEFAULT_FILE})")


# ----------------------------------------------------------------------------- one value

#: a sweep level given as the spec prints it (3.9 for 3.90625, 1.95 for 1.953125) is matched within this share
LEVEL_TOLERANCE = 0.025


def match_level(value: float, levels) -> float | None:
    """The sweep level (m) that ``value`` (m) names, exact or as the spec prints it; None if none does.

    Parameters
    ----------
    value : float
        A visibility in m.
    levels : iterable of float
        The sweep's levels in m (:data:`murk.scene.SWEEP_M`).

    Returns
    -------
    float or None
        The level within :data:`LEVEL_TOLERANCE` of ``value`` (the levels are a factor 2 apart, so at most one).
    """
    return next((float(x) for x in levels if abs(float(value) - float(x)) <= LEVEL_TOLERANCE * float(x)), None)


def _is_number(text: str) -> bool:
    """Whether papermill would pass ``text`` on as a number (``2025``, ``1e3``, ``nan``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NULL_WORDS)


def check_setting(key: str, value: Any, origin: str = DEFAULT_FILE) -> Any:
    """Check one run setting and return its value normalised.

    Parameters
    ----------
    key : str
        A key of :data:`SCHEMA`.
    value : any
        The value as it arrived: from YAML, from Snakemake's ``--config`` parser,
        or from papermill's ``-p`` (see the module's notes for what each passes).
    origin : str
        Where it was given, for the message: :data:`COMMAND_LINE`
        (``--config key=value``), :data:`PAPERMILL` (``-p key value``), or the name
        of the YAML file that set it (e.g. ``"data/study.yaml (--configfile)"``).

    Returns
    -------
    any
        ``int`` for a whole number (digits given as text become an int), ``bool``
        for a boolean (``"true"``/``"false"`` in any case become one), ``None`` for a
        null (``null``, ``~``, ``none``, the empty text) where the setting may be
        null, a ``str`` otherwise (a path with ``~`` expanded); a model list is
        returned as given, with its entries' ``n_items`` given as digits made ints
        (:func:`murk.core.model_entries` checks the list).

    Raises
    ------
    SettingsError
        A ValueError whose message names the key, the value as it was typed
        (``--config n_items=abc``), the accepted form and an example, for: a key
        that is not a run setting (with the nearest known key, :mod:`difflib`), a
        null where none is accepted, a wrong type (a number, a boolean or a list
        where another is expected; a boolean given as other text than
        true/false, e.g. ``yes``), a number out of range (``shard_size=0``, a
        negative seed), a name or device not of its form, a path with characters
        the workflow cannot quote (blanks, ``{}``, quotes, ``$``, ...).
    """
    if key not in SCHEMA:
        raise _unknown(key, value, origin, list(SCHEMA))
    s = SCHEMA[key]
    if s.kind == "models":
        return _models_value(value)
    if _is_null(value):
        if s.nullable:
            return None
        raise _refuse(key, value, origin, "it is not set" if value is None or value == "" else "null is not accepted")
    if s.kind == "int":
        v = value
        if isinstance(v, str) and _INT_TEXT.match(v.strip()):
            v = int(v.strip())
        if isinstance(v, bool) or not isinstance(v, int):
            kind = ("a boolean" if isinstance(v, bool) else "a number with a fraction" if isinstance(v, float)
                    else "a list" if isinstance(v, (list, tuple)) else "a mapping" if isinstance(v, dict)
                    else "text" if isinstance(v, str) else type(v).__name__)
            raise _refuse(key, value, origin, f"got {kind}")
        if s.minimum is not None and v < s.minimum:
            raise _refuse(key, value, origin, f"got {v}, below {s.minimum}")
        if s.maximum is not None and v > s.maximum:
            raise _refuse(key, value, origin, f"got {v}, above {s.maximum}")
        return int(v)
    if s.kind == "level":  # a sweep level (murk.scene.SWEEP_M), exact or as the spec prints it (3.9, 1.95)
        v = value
        if isinstance(v, str):
            try:
                v = float(v.strip())
            except ValueError:
                raise _refuse(key, value, origin, "got text") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _refuse(key, value, origin, f"got {type(v).__name__}")
        match = match_level(v, [250.0 / 2.0 ** k for k in range(8)])   # murk.scene.SWEEP_M, without numpy here
        if match is None:
            raise _refuse(key, value, origin, f"got {v:g}, not a level of the sweep")
        return match
    if s.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        raise _refuse(key, value, origin, f"got {'the text ' + repr(value) if isinstance(value, str) else repr(value)}")
    if s.kind == "path" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a folder named by digits: --config passes it as a number
    if not isinstance(value, str):
        raise _refuse(key, value, origin, f"got {'a number' if isinstance(value, (int, float)) else type(value).__name__}")
    v = value.strip()
    if s.kind == "name":
        if not _NAME.match(v) or _is_number(v):
            raise _refuse(key, value, origin)
        return v
    if s.kind == "choice":
        if v not in s.choices:
            near = difflib.get_close_matches(v, list(s.choices), n=1, cutoff=0.6)
            raise _refuse(key, value, origin, f"did you mean {near[0]}?" if near else "")
        return v
    if s.kind == "device":
        if not _DEVICE.match(v):
            raise _refuse(key, value, origin)
        return v
    if not v:
        raise _refuse(key, value, origin, "it is empty")
    if s.kind == "path":
        bad = sorted(set(_PATH_BAD.findall(v)))
        if bad:
            shown = ", ".join("a blank" if c.isspace() else repr(c) for c in bad)
            raise _refuse(key, value, origin, f"it holds {shown}, which the workflow's commands cannot carry: "
                          f"choose a path without them")
        return os.path.expanduser(v)
    return v


def _models_value(value: Any) -> Any:
    """A model list with its mapping entries' ``n_items`` and ``max_in_flight`` given as digits (``--config``) made
    ints."""
    if isinstance(value, (list, tuple)):
        out = []
        for e in value:
            for key in ("n_items", "max_in_flight"):
                if isinstance(e, dict) and isinstance(e.get(key), str) and _INT_TEXT.match(e[key].strip()):
                    e = {**e, key: int(e[key].strip())}
            out.append(e)
        return out
    return value


# ----------------------------------------------------------------------------- a whole configuration

def _shown(path: str | os.PathLike, cwd: str) -> str:
    p = Path(path)
    try:
        return p.resolve().relative_to(Path(cwd).resolve()).as_posix()
    except ValueError:
        return str(p)


def setting_origins(keys: Sequence[str], overrides: Mapping[str, Any] | None = None,
                    configfiles: Sequence[str | os.PathLike] = (), default_file: str = DEFAULT_FILE,
                    cwd: str | os.PathLike | None = None) -> dict[str, str]:
    """Where each setting's value came from, in the words of the command.

    Snakemake reads the Snakefile's ``configfile:`` (``data/workflow.yaml``), then
    each ``--configfile`` in order, then ``--config``; the last one that sets a key wins.

    Parameters
    ----------
    keys : sequence of str
        The keys of the configuration.
    overrides : mapping, optional
        ``--config`` as Snakemake parsed it (``workflow.config_settings.config``).
    configfiles : sequence of path
        The ``--configfile`` files (``workflow.config_settings.configfiles``); read
        here (YAML; JSON is YAML) to see which keys each sets.
    default_file : str
        The Snakefile's ``configfile:``.
    cwd : path, optional
        Snakemake's working directory (default the current one): files are shown relative to it.

    Returns
    -------
    dict
        key -> :data:`COMMAND_LINE`, ``"<file> (--configfile)"``, or ``default_file``.
    """
    import yaml

    cwd = str(cwd or os.getcwd())
    default_abs = (Path(cwd) / default_file).resolve()
    origin = {k: default_file for k in keys}
    for f in configfiles:
        if Path(cwd, f).resolve() == default_abs:
            continue  # data/workflow.yaml given again (make study): still the defaults
        try:
            with open(Path(cwd, f), encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except (OSError, yaml.YAMLError):
            continue  # Snakemake has read it; it says what is wrong with a file it cannot read
        for k in data if isinstance(data, dict) else ():
            if k in origin:
                origin[k] = f"{_shown(f, cwd)} (--configfile)"
    for k in overrides or {}:
        if k in origin:
            origin[k] = COMMAND_LINE
    return origin


def _output_folder(value: str, origin: str, cwd: str) -> tuple[str, str]:
    """(output_dir for Snakemake's paths, its absolute path), or SettingsError when it cannot be a folder."""
    rel = os.path.normpath(value)
    root = os.path.normpath(os.path.join(cwd, rel))
    p = Path(root)
    if p.exists() and not p.is_dir():
        raise SettingsError(f"{_where('output_dir', value, origin)}: the output root {root} is a file, not a folder: "
                            f"give the path of a folder (it is created if missing), {_fix('output_dir', origin)}")
    for up in p.parents:
        if up.exists():
            if not up.is_dir():
                raise SettingsError(f"{_where('output_dir', value, origin)}: the output root {root} lies inside "
                                    f"{up}, which is a file, not a folder: give the path of a folder, "
                                    f"{_fix('output_dir', origin)}")
            break
    from murk.core import _paths as paths

    blocked = paths.unwritable(p)
    if blocked is not None:
        folder, why = blocked
        where = "it" if folder == p else f"{folder}, where it would be created,"
        raise SettingsError(f"{_where('output_dir', value, origin)}: the output root {root} cannot be written: "
                            f"{where} is {why}; fix: make {folder} writable, or give an output root you can write, "
                            f"{_fix('output_dir', origin)}")
    return rel, root


def check_run_settings(config: Mapping[str, Any], origins: Mapping[str, str] | None = None,
                       offline: bool | None = None, cwd: str | os.PathLike | None = None) -> RunSettings:
    """Check a whole run configuration, as the Snakefile has it, before anything runs.

    Parameters
    ----------
    config : mapping
        Snakemake's ``config``: ``data/workflow.yaml`` updated by each
        ``--configfile`` and by ``--config``.
    origins : mapping, optional
        key -> where it was given (:func:`setting_origins`); default every key from
        :data:`DEFAULT_FILE`.
    offline : bool, optional
        ``MURK_OFFLINE=1`` (default: read from the environment,
        :func:`murk.core.offline`): the run reads ``offline_models``, else ``models``.
    cwd : path, optional
        Snakemake's working directory (default the current one): a relative
        ``output_dir`` is taken from it.

    Returns
    -------
    RunSettings
        The normalised settings, the output root (as given and absolute), the models
        that run and the lines to print at the start.

    Raises
    ------
    SettingsError
        Listing every refused setting, one line each (:func:`check_setting`), and:
        a run setting that is missing (``data/workflow.yaml`` lacks it); an
        ``output_dir`` that is a file or lies inside one, or that cannot be
        written (read-only, :func:`murk.core.unwritable`); a model list that
        :func:`murk.core.model_entries` refuses (``offline_models=[]``, an
        entry with an unknown key, a model listed twice, ...), both lists being
        checked whichever the run reads.
    """
    from murk.core import _paths as paths

    cwd = str(cwd or os.getcwd())
    offline = paths.offline() if offline is None else bool(offline)
    origins = dict(origins or {})
    origin = lambda k: origins.get(k, DEFAULT_FILE)  # noqa: E731
    problems: list[str] = []
    out: dict[str, Any] = {}
    for key, value in config.items():
        try:
            out[key] = check_setting(key, _plain(value), origin(key))
        except SettingsError as e:
            problems.append(str(e))
    for key in SCHEMA:
        if key not in config:
            problems.append(f"{key} is not set: {DEFAULT_FILE} lists every run setting (restore it: git checkout "
                            f"{DEFAULT_FILE}); {_fix(key, COMMAND_LINE)}")
    rel = root = ""
    if isinstance(out.get("output_dir"), str):
        try:
            rel, root = _output_folder(out["output_dir"], origin("output_dir"), cwd)
            out["output_dir"] = rel
        except SettingsError as e:
            problems.append(str(e))
    n_items = out.get("n_items") if isinstance(out.get("n_items"), int) else None
    models_key = "offline_models" if offline else "models"
    entries: dict[str, list] = {}
    for key in ("models", "offline_models"):
        if key in out:
            o = origin(key)
            try:
                entries[key] = model_entries(out[key], n_items, key)
            except ValueError as e:
                fix = f"; {_fix(key, o)}" if o == COMMAND_LINE else ""  # the parser's example is YAML, as in a file
                problems.append(f"{_where(key, config[key], o)}: {e}{fix}")
    for key, key_entries in entries.items():
        for k, e in enumerate(key_entries, start=1):
            why = model_id_problem(e.id, cwd)
            if why:
                problems.append(f"{_where(key, config[key], origin(key))}: {key}, entry {k} ({e.id!r}): {why}")
    if problems:
        n = len(problems)
        raise SettingsError(f"murk: {'this run setting is' if n == 1 else f'these {n} run settings are'} refused "
                            f"before any job ran (nothing was written):\n" + "\n".join(f"  - {p}" for p in problems),
                            problems)
    chosen = entries[models_key]
    notes = [f"murk: output root {root}" + (f" (output_dir={config['output_dir']})" if rel != root else ""),
             f"murk: {len(chosen)} model{'s' if len(chosen) != 1 else ''} to read out ({models_key}"
             f"{', since MURK_OFFLINE=1' if offline else ''}): "
             + ", ".join(f"{e.id} ({e.n_items} item{'s' if e.n_items != 1 else ''}"
                         f"{f'; served by {e.server} as {e.served_model}' if e.server else ''})" for e in chosen)]
    other = "models" if offline else "offline_models"
    if origin(other) != DEFAULT_FILE:
        o = origin(other)
        given = f"--config {other}=…" if o == COMMAND_LINE else f"{other} in {o}"
        if offline:
            notes.append(f"murk: {given} is not used: with MURK_OFFLINE=1 a run reads offline_models (local folders "
                         f"or murk's tiny checkpoints, no network); give the models as --config "
                         f"'offline_models=[…]', or run without MURK_OFFLINE=1 to read out models")
        else:
            notes.append(f"murk: {given} is not used: offline_models are read only with MURK_OFFLINE=1; this run "
                         f"reads models")
    return RunSettings(out, rel, root, models_key, chosen, notes)


def model_id_problem(model: str, cwd: str | os.PathLike | None = None) -> str | None:
    """Why ``model`` cannot be a model of a run, or None: a model is a hub id or an existing folder.

    Parameters
    ----------
    model : str
        A model id as a run setting gives it (``models``, ``offline_models``).
    cwd : path, optional
        The folder a relative path is taken from (Snakemake's working directory; default the current one).

    Returns
    -------
    str or None
        None for a Hugging Face hub id (``[org/]name``: letters, digits, ``-``, ``_``, ``.``, at most 96
        characters, neither ``--`` nor ``..``, the rule of ``huggingface_hub.utils.validate_repo_id``) or a path
        to an existing folder (used literally, whatever characters it holds: the workflow passes it to its stages
        as one argument that no shell parses); else the reason and the fix, in words.
    """
    text = str(model)
    if _HUB_ID.fullmatch(text) and len(text) <= 96 and "--" not in text and ".." not in text:
        return None
    folder = Path(os.path.expanduser(text))
    if not folder.is_absolute():
        folder = Path(cwd or os.getcwd()) / folder
    if folder.is_dir():
        return None
    return (f"neither a hub id ([org/]name of letters, digits, '-', '_' and '.') nor an existing folder ({folder} "
            f"is not one): give a hub id such as HuggingFaceTB/SmolVLM-256M-Instruct or the path of a checkpoint "
            f"folder")


def remote_job_problems(config_args: Sequence[str] | None, configfiles: Sequence[str | os.PathLike] = ()) -> list[str]:
    """The ``--config`` values and ``--configfile`` paths that a SLURM job would not receive literally.

    snakemake-executor-plugin-slurm (2.8) re-creates the command line of every job: each ``--config``
    text becomes Python's ``repr`` inside ``sbatch --wrap="…"``, which a shell reads when the job is submitted
    and again when it starts, and each ``--configfile`` path a shell-quoted word inside the same double quotes.
    A ``$``, a backtick, a backslash, a line break, or both kinds of quote in one text, would be expanded or
    altered by a shell
    (``$(…)`` would run), so such a run is refused before the first job; a ``--configfile`` carries any value
    literally, since the jobs read the file itself.

    Parameters
    ----------
    config_args : sequence of str, or None
        Snakemake's ``config_settings.config_args``: the ``--config`` texts as typed (``key=value``).
    configfiles : sequence of path
        Snakemake's ``config_settings.configfiles``.

    Returns
    -------
    list of str
        One line per refused value, naming it and the fix; empty when every value is carried literally.
    """
    out = []
    for arg in config_args or ():
        bad = sorted(set(_REMOTE_UNSAFE.findall(str(arg))) | ({"'", '"'} if "'" in arg and '"' in arg else set()))
        if bad:
            key = str(arg).split("=", 1)[0]
            shown = ", ".join("a line break" if c in "\n\r" else repr(c) for c in bad)
            out.append(f"--config {arg}: the value of {key} holds {shown}, which the SLURM executor would pass to "
                       f"its jobs through a shell: give {key} in a --configfile instead (the jobs read that file "
                       f"as data)")
    for f in configfiles or ():
        bad = sorted(set(_REMOTE_UNSAFE.findall(str(f)))) + (['"'] if '"' in str(f) else [])
        if bad:
            out.append(f"--configfile {f}: its path holds {', '.join(repr(c) for c in bad)}, which the SLURM "
                       f"executor would pass to its jobs through a shell: rename or move the file")
    return out


# ----------------------------------------------------------------------------- settings files, before Snakemake

def check_configfile(path: str | os.PathLike, shown: str | None = None) -> None:
    """Refuse a settings file that is not plain YAML data, in one line naming the file, the line and the fix.

    Snakemake reads each ``--configfile`` while it parses its command line, before
    the Snakefile (and so :func:`check_run_settings`) runs, and its loader refuses a
    Python tag (``!!python/object/apply:...``) with "make sure to not mix whitespace
    and tab indentation", naming neither the file nor the tag. The Makefile's
    targets (``make demo``, ``plan``, ``paper``, ``study``) run this check on the
    files named by ``--configfile`` first (``python -m murk.core.settings``). The file
    is read with ``yaml.safe_load``: nothing in it is constructed but YAML's
    strings, numbers, booleans, nulls, lists and mappings.

    Parameters
    ----------
    path : path
        The settings file.
    shown : str, optional
        The file as the user typed it (default ``path``).

    Raises
    ------
    SettingsError
        One line: a tag that asks for a Python object (or any tag YAML's safe
        loader does not know), or text that is not YAML, with its line. A file
        that cannot be read is left to Snakemake, which names it.
    """
    import yaml

    shown = str(path) if shown is None else shown
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # Snakemake says "Config file ... not found" / cannot decode it
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"--configfile {shown}" + (f", line {mark.line + 1}" if mark is not None else "")
        problem = " ".join(str(getattr(e, "problem", "") or e).split())
        tag = re.search(r"tag '?(?:tag:yaml\.org,2002:)?([^' ]+)'?", problem)
        if isinstance(e, yaml.constructor.ConstructorError) and tag:
            name = tag.group(1)
            name = f"!!{name}" if name.startswith("python/") else name
            raise SettingsError(f"{where}: the YAML tag {name} asks to build an object from the file, and a "
                                f"settings file is data (text, numbers, true/false, null, lists and mappings), "
                                f"nothing in it is built or run; fix: remove the tag and write the value itself "
                                f"(e.g. n_items: 4; {DEFAULT_FILE} lists every setting and its form)") from None
        raise SettingsError(f"{where}: not valid YAML ({problem}); fix: correct the file ({DEFAULT_FILE} shows "
                            f"the form of every setting)") from None


def configfiles_of(argv: Sequence[str]) -> list[str]:
    """The files a Snakemake command line names with ``--configfile`` / ``--configfiles`` (in order).

    Each option takes the words after it up to the next option (argparse's
    ``nargs="+"``, as Snakemake declares it), or its value after ``=``.
    """
    files: list[str] = []
    taking = False
    for a in argv:
        if a.startswith("-"):
            name, eq, value = a.partition("=")
            taking = name in ("--configfile", "--configfiles") and not eq
            if name in ("--configfile", "--configfiles") and eq:
                files.append(value)
        elif taking:
            files.append(a)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m murk.core.settings SNAKEMAKE-ARGS...``: check the ``--configfile`` files among them (:func:`check_configfile`).

    The Makefile runs it before Snakemake with the same arguments. Prints the
    refusal (one line) to stderr and returns 2, else returns 0 and prints nothing.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    for f in configfiles_of(args):
        try:
            check_configfile(f)
        except SettingsError as e:
            print(f"murk: {e}; nothing ran", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


