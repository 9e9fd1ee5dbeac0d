"""The README fits one screen, and the documentation's relative links lead somewhere (issue 40, item 5).

The README is the front door (at most 80 lines); the manual is ``docs/`` and the measurements are
``benchmarks/README.md``. Every relative link of these pages must name a file that exists and, where it
names a heading (``page.md#anchor``), a heading of that page (GitHub's anchors: lower case, punctuation
dropped, blanks as hyphens). Every page of ``docs/`` is reachable from the README.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 80
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading's text: lower case, punctuation but ``-`` and ``_`` dropped,
    each blank a hyphen (``"One stage by hand (papermill)"`` -> ``"one-stage-by-hand-papermill"``)."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of the headings of ``page`` (fenced code left out)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    """The relative link targets of ``page``, outside fenced code (web addresses left out)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken(page: Path) -> list[str]:
    """The links of ``page`` whose file or heading does not exist, as ``"target (why)"``."""
    out = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target} (no file {_shown(dest)})")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            out.append(f"{target} (no heading with anchor {frag!r} in {_shown(dest)})")
    return out


def test_readme_fits_one_screen():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines: move the detail into docs/ (at most {README_MAX_LINES})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_somewhere(page):
    assert broken(page) == []


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked] == []


def test_the_checks_notice_a_broken_link_and_a_missing_heading(tmp_path):
    """The seam: a page linking to a missing file and to a missing heading is caught, a good link is not."""
    (tmp_path / "a.md").write_text("# Top\n\n## One stage by hand (papermill)\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#one-stage-by-hand-papermill) [gone](c.md) [bad](a.md#not-a-heading) "
                    "[web](https://example.org/x.md)\n```text\n[in code](nowhere.md)\n```\n")
    found = broken(page)
    assert len(found) == 2 and found[0].startswith("c.md (no file") and found[1].startswith("a.md#not-a-heading")
    assert anchor("Beyond the spec: a deployable monitor, recalibration, risk–coverage") == \
        "beyond-the-spec-a-deployable-monitor-recalibration-riskcoverage"


#: a name of murk quoted in the pages: ``murk.results``, ``murk.report.SPEC_COUNTERPARTS``, ``python -m murk.report.paper``
MURK_NAME = re.compile(r"`(?:python -m )?(murk(?:\.[A-Za-z_]\w*)+)")


def unresolved(text: str) -> list[str]:
    """The ``murk.…`` names quoted in ``text`` that do not exist: the longest importable module, then attributes."""
    import importlib

    out = []
    for name in dict.fromkeys(MURK_NAME.findall(text)):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ImportError:
                continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                out.append(name)
                break
            obj = getattr(obj, attr)
    return out


def test_every_murk_name_the_pages_quote_exists():
    """A page that names a module or function of murk names one that exists: after a module moves or a function
    is made private, the page that still quotes the old name fails here (``murk.baseline`` in
    benchmarks/README.md did after the baseline engine moved to benchmarks/baseline.py)."""
    assert unresolved("`murk.results.aurc`, `python -m murk.report.paper`, `murk.core`") == []
    assert unresolved("`murk.metrics.aurc` and `murk.results.risk_coverage_curve`") == [
        "murk.metrics.aurc", "murk.results.risk_coverage_curve"]
    assert {str(p.relative_to(ROOT)): unresolved(p.read_text(encoding="utf-8")) for p in PAGES} == {
        str(p.relative_to(ROOT)): [] for p in PAGES}


def test_every_murk_name_the_code_quotes_exists():
    """The library's docstrings and comments, the notebooks, the Snakefile, the Makefile, the profiles and the data
    files name murk's modules and functions as they are (``:func:`murk.results.aurc```, "murk.readout's
    engine"): a name left behind by a move fails here (``murk.config.settings_table`` in murk.report's
    docstrings did after the config moved to murk.core)."""
    name = re.compile(r"(?<![\w./])(murk(?:\.[A-Za-z_]\w*)+)")
    files = [*sorted((ROOT / "lib" / "murk").rglob("*.py")), *sorted((ROOT / "notebooks").glob("*.py")),
             ROOT / "Snakefile", ROOT / "Makefile", *sorted((ROOT / "profiles").rglob("*.yaml")),
             *sorted((ROOT / "data").glob("*.yaml"))]
    assert files[0].suffix == ".py" and (ROOT / "Snakefile") in files
    found = {}
    for f in files:
        text = f.read_text(encoding="utf-8")
        gone = unresolved(" ".join(f"`{n}" for n in dict.fromkeys(name.findall(text))))
        if gone:
            found[str(f.relative_to(ROOT))] = gone
    assert found == {}
