"""Reading a PDF back to check its layout: every table row present, nothing drawn over anything else.

Uses poppler's ``pdftotext -bbox`` and ``pdfinfo`` (poppler-utils).
"""

from __future__ import annotations

from html import unescape
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
        words = [(unescape(m.group(5)), *map(float, m.group(1, 2, 3, 4))) for m in re.finditer(
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
                cells = re.split(r"(?<!\\)\|", lines[j].strip())[1:-1]
                # a line break in a cell; a character a value escaped for Markdown (murk.report.markdown_text: \[, \:)
                # is the character itself in the PDF
                rows.append([re.sub(r"\\([^\w\s])", r"\1", re.sub(r"<br\s*/?>", " ", c)).strip() for c in cells])
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
    """Every row of every table of ``md`` is in the PDF (the first word of its first two cells,
    counted), nothing is drawn
    over anything else, every word lies on its page, and the pages are A4."""
    out = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    assert "(A4)" in out, out
    pages = pdf_words(pdf)
    text = [w[0] for _, _, words in pages for w in words]
    rows = table_rows(md)
    assert rows, "no tables found"
    need: dict[str, int] = {}
    for r in rows:  # the first word of each of the row's first two cells (code and emphasis marks dropped)
        for cell in r[:2]:
            words = cell.replace("`", "").replace("*", "").split()
            if words and not words[0].startswith(("$", "[", "\\")):
                need[words[0]] = need.get(words[0], 0) + 1
    short = {w: (n, text.count(w)) for w, n in need.items() if text.count(w) < n}
    assert not short, f"table rows missing from the PDF (label: rows, found): {short}"
    assert not overdrawn(pages), overdrawn(pages)[:10]
    for k, (width, height, words) in enumerate(pages, 1):
        off = [w for w in words if w[3] > width or w[4] > height]
        assert not off, f"page {k}: words beyond the page: {off[:5]}"


def check_rows_on_lines(pdf: Path, table_md: str, n_cells: int | None = None, min_gap_pt: float = 3.0) -> int:
    """Every body row of the pipe table ``table_md`` is found in the PDF as one line: the first words of
    its first ``n_cells`` cells (default all) side by side, left to right, at one height, each line
    matching one row only (a row drawn over another, or lost at a page end, is not found), and no two
    cells run together: on the row's line, the words of each cell end at least ``min_gap_pt`` points
    before the next cell's first word (a cell too wide for its column overflows into the next one, or
    fuses with it into one word, which is then not found). For tables whose cells start on the row's
    first line (the sweep tables, the crossings). Returns the number of rows found."""
    pages = pdf_words(pdf)
    lines = []
    for _, _, words in pages:
        for w in words:
            mid = (w[2] + w[4]) / 2
            for line in lines:
                if line[0] is words and abs(line[1] - mid) < 2.0:
                    line[2].append(w)
                    break
            else:
                lines.append((words, mid, [w]))
    boxes = [sorted(line[2], key=lambda w: w[1]) for line in lines]
    texts = [[w[0].replace("−", "-") for w in b] for b in boxes]  # Typst sets a leading hyphen as a minus
    rows = table_rows(table_md)
    assert rows, "no table rows"
    lost, fused = [], []
    used: set[int] = set()
    for r in rows:
        key = [c.replace("`", "").replace("*", "").split()[0] for c in r[:n_cells] if c.strip()]
        hit = next((k for k, t in enumerate(texts) if k not in used and _in_order(key, t)), None)
        if hit is None:
            lost.append(" | ".join(r[:n_cells]))
            continue
        used.add(hit)
        at = _in_order(key, texts[hit])
        for a, b in zip(at, at[1:]):  # the last word of a cell on this line, against the next cell's first
            gap = boxes[hit][b][1] - boxes[hit][b - 1][3]
            if gap < min_gap_pt:
                fused.append(f"{boxes[hit][b - 1][0]!r} {boxes[hit][b][0]!r} ({gap:.1f} pt)")
    assert not lost, f"{len(lost)} of {len(rows)} table rows not found as one line of the PDF: {lost[:10]}"
    assert not fused, f"{len(fused)} pairs of cells run together (gap below {min_gap_pt} pt): {fused[:10]}"
    return len(rows)


def _in_order(key: list[str], words: list[str]) -> list[int]:
    """Indices in ``words`` of the words of ``key``, matched left to right; [] if not all are found."""
    at, k = [], 0
    for i, w in enumerate(words):
        if k < len(key) and w == key[k]:
            at.append(i)
            k += 1
    return at if k == len(key) else []


def table_column_texts(pdf: Path, headers: list[str]) -> dict[str, str]:
    """The text of each column of the PDF table whose header row is the words ``headers`` (one word each,
    left to right, on one line): on every page where that header row appears, each word below it goes to
    the column whose header starts at or left of the word, in reading order (line by line), so that a
    column's text is its cells' texts one after the other, however each cell wraps. Words after the
    table's end in a column's range are appended (a check for a cell's text as a substring is unaffected).
    Hyphens are not rejoined; Typst does not hyphenate the verbatim (code) text of a table."""
    out = {h: [] for h in headers}
    for _, _, words in pdf_words(pdf):
        lines: list[tuple[float, list]] = []
        for w in sorted(words, key=lambda w: (w[2] + w[4]) / 2):
            mid = (w[2] + w[4]) / 2
            if lines and abs(lines[-1][0] - mid) < 2.0:
                lines[-1][1].append(w)
            else:
                lines.append((mid, [w]))
        lines = [(mid, sorted(ws, key=lambda w: w[1])) for mid, ws in lines]
        start, x0 = None, None
        for k, (_, ws) in enumerate(lines):
            texts = [w[0] for w in ws]
            if texts == headers:
                start, x0 = k, [w[1] for w in ws]
                break
        if start is None:
            continue
        for _, ws in lines[start + 1:]:
            for w in ws:
                col = max((j for j, x in enumerate(x0) if x <= w[1] + 0.5), default=None)
                if col is not None:
                    out[headers[col]].append(w[0])
    return {h: " ".join(ws) for h, ws in out.items()}
