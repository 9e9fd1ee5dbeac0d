"""Reading a PDF back to check its layout: every table row present, nothing drawn over anything else.

Uses poppler's ``pdftotext -bbox`` and ``pdfinfo`` (poppler-utils).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def pdf_words(pdf: Path) -> list[tuple[float, float, list[tuple[str, float, float, float, float]]]]:
    """Each page's size and words with their boxes (pdftotext -bbox), in points:
    [(width, height, [(text, x0, y0, x1, y1), ...]), ...]."""
    html = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], check=True, capture_output=True,
                          text=True).stdout
    pages = []
    for page in html.split("<page ")[1:]:
        size = re.match(r'width="([\d.]+)" height="([\d.]+)"', page)
        words = [(m.group(5), *map(float, m.group(1, 2, 3, 4))) for m in re.finditer(
            r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>', page)]
        pages.append((float(size.group(1)), float(size.group(2)), words))
    return pages


def table_rows(md: str) -> list[list[str]]:
    """The body rows of every pipe table of a Markdown text, as cell lists."""
    rows = []
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", line.strip()):
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", lines[j].strip())[1:-1]])
                j += 1
    return rows


def overdrawn(pages) -> list[tuple[int, str, str]]:
    """Pairs of words drawn over each other on one page (what a table too long for its page looked
    like: its last rows stacked on one line)."""
    bad = []
    for k, (_, _, words) in enumerate(pages, 1):
        words = sorted(words, key=lambda w: w[2])
        for a, (ta, ax0, ay0, ax1, ay1) in enumerate(words):
            for tb, bx0, by0, bx1, by1 in words[a + 1:]:
                if by0 >= ay1:
                    break  # sorted by top edge: no later word reaches up to this one
                w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
                if w > 0 and h > 0 and w * h > 0.5 * min((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)):
                    bad.append((k, ta, tb))
    return bad


def check_pdf_keeps_every_table_row(pdf: Path, md: str) -> None:
    """Every row of every table of ``md`` is in the PDF (its first cell, counted), nothing is drawn
    over anything else, every word lies on its page, and the pages are A4."""
    out = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    assert "(A4)" in out, out
    pages = pdf_words(pdf)
    text = [w[0] for _, _, words in pages for w in words]
    rows = table_rows(md)
    assert rows, "no tables found"
    need: dict[str, int] = {}
    for r in rows:
        first = r[0].split()[0] if r[0].split() else ""
        if first and not first.startswith(("`", "*", "$", "[")):
            need[first] = need.get(first, 0) + 1
    short = {w: (n, text.count(w)) for w, n in need.items() if text.count(w) < n}
    assert not short, f"table rows missing from the PDF (label: rows, found): {short}"
    assert not overdrawn(pages), overdrawn(pages)[:10]
    for k, (width, height, words) in enumerate(pages, 1):
        off = [w for w in words if w[3] > width or w[4] > height]
        assert not off, f"page {k}: words beyond the page: {off[:5]}"
