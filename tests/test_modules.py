"""The rooms of ``lib/murk``: no import circle, no module reaching into another's private names (issue 23).

The imports are read with :mod:`ast` from the source, so function-level imports
count as much as module-level ones, and every form is followed: ``import murk.x``,
``import murk.x as y``, ``from murk import x`` / ``from murk import x as _y``,
``from murk.x import name`` and relative imports. A private name is one that starts
with a single underscore (``_name``; dunders such as ``__version__`` are public).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "murk"
LIB = Path(__file__).resolve().parents[1] / "lib" / PACKAGE


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(lib: Path) -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in sorted(lib.glob("*.py"))}


def _target(node: ast.ImportFrom, here: str) -> str | None:
    """The murk module an ``ImportFrom`` reads from: ``""`` for the package itself, None outside murk."""
    if node.level:  # relative: "from . import x" / "from .x import y" inside the package
        return node.module or ""
    if node.module == PACKAGE:
        return ""
    if node.module and node.module.startswith(PACKAGE + "."):
        return node.module[len(PACKAGE) + 1:].split(".")[0]
    return None


def import_graph(mods: dict[str, ast.Module]) -> tuple[dict[str, set[str]], list[str]]:
    """(edges module -> murk modules it imports, the private-name uses ``"<module>:<line>: <what>"``)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    bad: list[str] = []
    for here, tree in mods.items():
        aliases: dict[str, str] = {}  # local name -> murk module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == PACKAGE and len(parts) > 1 and parts[1] in mods:
                        edges[here].add(parts[1])
                        if a.asname:
                            aliases[a.asname] = parts[1]
            elif isinstance(node, ast.ImportFrom):
                src = _target(node, here)
                if src is None:
                    continue
                if src:  # from murk.x import name
                    if src in mods:
                        edges[here].add(src)
                    for a in node.names:
                        if _private(a.name):
                            bad.append(f"{here}:{node.lineno}: from murk.{src} import {a.name}")
                else:  # from murk import x [as y]
                    for a in node.names:
                        if a.name in mods:
                            edges[here].add(a.name)
                            aliases[a.asname or a.name] = a.name
                        elif _private(a.name):
                            bad.append(f"{here}:{node.lineno}: from murk import {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != here and _private(node.attr)):
                bad.append(f"{here}:{node.lineno}: {node.value.id}.{node.attr} (murk.{aliases[node.value.id]})")
        edges[here].discard(here)
    return edges, bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


# --------------------------------------------------------------------------- the checker itself


def _parse(sources: dict[str, str]) -> dict[str, ast.Module]:
    return {k: ast.parse(v) for k, v in sources.items()}


def test_checker_sees_every_import_form():
    mods = _parse({
        "a": "def f():\n    from murk import b as _b\n    return _b._secret()\n",
        "b": "import murk.c\n",
        "c": "from murk.a import _hidden, shown\n",
        "d": "from murk import c\nx = c._z\nimport murk.a as aa\ny = aa._w\n",
        "e": "from . import d\n__all__ = [d.__name__]\n",
    })
    edges, bad = import_graph(mods)
    assert edges == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"c", "a"}, "e": {"d"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert sorted(b.split(": ", 1)[1] for b in bad) == [
        "_b._secret (murk.b)", "aa._w (murk.a)", "c._z (murk.c)", "from murk.a import _hidden"]


def test_checker_allows_own_private_names_and_public_aliases():
    mods = _parse({
        "a": "from murk import b\n_x = 1\ny = b.public\n",
        "b": "from murk.c import public as _public\n",
        "c": "public = 2\n",
    })
    edges, bad = import_graph(mods)
    assert bad == [] and cycles(edges) == []
    assert edges == {"a": {"b"}, "b": {"c"}, "c": set()}


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def murk_graph():
    mods = _modules(LIB)
    assert {"readout", "engine", "analysis", "physics"} <= set(mods)  # the right folder
    return import_graph(mods)


def test_no_import_circle_in_murk(murk_graph):
    edges, _ = murk_graph
    assert cycles(edges) == [], "import circles in lib/murk (constants shared by two modules belong in the lower one)"


def test_no_module_uses_another_modules_private_names(murk_graph):
    _, bad = murk_graph
    assert bad == [], "private names used across lib/murk modules:\n" + "\n".join(bad)
