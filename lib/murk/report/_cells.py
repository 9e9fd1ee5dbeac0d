"""The paper's source and the executed notebooks read: Quarto's shortcodes, cell options, cells by label.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["INLINE_RE", "INCLUDE_RE", "EMBED_RE", "cell_options", "notebook_cells", "notebook_identity"]


INLINE_RE = re.compile(r"`\{python\}\s*N\[\s*[\"']([^\"']+)[\"']\s*\]\s*`")
ANY_INLINE_RE = re.compile(r"`\{python\}[^`]*`")
INCLUDE_RE = re.compile(r"\{\{<\s*include\s+(\S+)\s*>\}\}")
#: Quarto's embed shortcode: ``{{< embed path.ipynb#label >}}`` (one label; options after it are ignored)
EMBED_RE = re.compile(r"\{\{<\s*embed\s+([^\s#>]+)#([A-Za-z0-9_-]+)[^>]*>\}\}")
CELL_RE = re.compile(r"^```\{python\}.*?^```\s*$", re.S | re.M)
FRONT_RE = re.compile(r"\A---\n(.*?)\n---\n", re.S)



def cell_options(source: str) -> dict[str, Any]:
    """Quarto cell options of a code cell: the leading ``#| key: value`` lines, parsed as YAML.

    >>> cell_options("#| label: fig-a\\n#| fig-cap: 'A, t2'\\nplot()")
    {'label': 'fig-a', 'fig-cap': 'A, t2'}
    """
    import yaml

    lines = []
    for line in source.splitlines():
        if not line.startswith("#|"):
            break
        lines.append(line[2:].removeprefix(" "))
    return (yaml.safe_load("\n".join(lines)) or {}) if lines else {}


def notebook_cells(path: str | os.PathLike) -> dict[str, Any]:
    """The labelled code cells of a notebook (``#| label: …``): label -> cell (nbformat).

    Raises
    ------
    FileNotFoundError
        If the notebook does not exist (the message names the stage that writes it).
    ValueError
        If two cells carry the same label.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"notebook {path} missing: run the pipeline (snakemake) so that the stage "
                                f"notebook notebooks/{path.stem}.py is executed into {path.parent}")
    nb = nbformat.read(path, as_version=4)
    cells: dict[str, Any] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        label = cell_options(cell.source).get("label")
        if label:
            if label in cells:
                raise ValueError(f"{path}: two cells are labelled {label!r}")
            cells[str(label)] = cell
    return cells


def notebook_identity(path: str | os.PathLike) -> dict[str, Any] | None:
    """The identities an executed stage notebook records (its cell labelled ``murk-identity``).

    Parameters
    ----------
    path : path
        An executed notebook (``outputs/notebooks/04_analyse.ipynb``, ``02_depth.ipynb``, ...).

    Returns
    -------
    dict or None
        The JSON output of that cell (:func:`murk.pipeline.identity_bundle`): ``run_id``
        and, for the analyse notebook, ``analysis_id`` and ``models``; None when the
        notebook has no such cell or output (written by an older murk, or the cell failed).

    Raises
    ------
    FileNotFoundError
        If the notebook does not exist.
    """
    from murk import core

    cell = notebook_cells(path).get(core.IDENTITY_LABEL)
    if cell is None:
        return None
    found = _outputs(cell, core.IDENTITY_MIME)
    return dict(found[0]) if found and isinstance(found[0], dict) else None



def _outputs(cell, mime: str) -> list[Any]:
    return [o["data"][mime] for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result") and mime in o.get("data", {})]

