"""The layers of ``lib/murk``: imports point only down the data flow, no circle, no reach into private names (issues 23, 40).

``murk`` is a package of subpackages, one per layer of the data flow, listed in
:data:`LAYERS` from the bottom up. A module may import its own layer and the layers
below it, never one above. Another layer is reached through its public face (its
``__init__``, or a public module such as ``murk.report.paper``), never through a
private implementation module (``murk.core._paths``) or a private name; and a
subpackage's ``__init__`` (or a module's ``__all__``) re-exports only its own
layer's names, never a sibling subpackage's.

The imports are read with :mod:`ast` from the source, so function-level imports
count as much as module-level ones, and every form is followed: ``import murk.x.y``,
``import murk.x as y``, ``from murk import x`` / ``from murk import x as _y``,
``from murk.x import name``, ``from murk.x import _module`` and relative imports. A
private name is one that starts with a single underscore (``_name``; dunders such as
``__version__`` are public).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "murk"
LIB = Path(__file__).resolve().parents[1] / "lib" / PACKAGE

#: the layers of the data flow, bottom up: COCO files -> select -> depth -> read-out -> cube -> analyse -> paper,
#: run by the pipeline. A layer may import the layers before it in this list, never one after it.
LAYERS = ["core", "scene", "protocol", "offline", "readout", "results", "monitor", "report", "pipeline"]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(lib: Path) -> dict[str, ast.Module]:
    """Every module of the package by its dotted name under ``murk``: ``""`` (the package), ``"core"`` (a
    subpackage's ``__init__``), ``"core._paths"``."""
    out = {}
    for p in sorted(lib.rglob("*.py")):
        parts = list(p.relative_to(lib).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    return out


def _package_of(name: str, mods) -> str:
    """The package a module's relative imports start from: the module itself for a package ``__init__``."""
    is_pkg = name == "" or any(m.startswith(name + ".") for m in mods)
    return name if is_pkg else name.rpartition(".")[0]


def _target(node: ast.ImportFrom, here: str, mods) -> str | None:
    """The murk module an ``ImportFrom`` reads from (dotted, under murk; ``""`` for murk itself), None outside."""
    if node.level:
        base = _package_of(here, mods).split(".") if _package_of(here, mods) else []
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))
    if node.module == PACKAGE:
        return ""
    if node.module and node.module.startswith(PACKAGE + "."):
        return node.module[len(PACKAGE) + 1:]
    return None


def import_graph(mods: dict[str, ast.Module]) -> tuple[dict[str, set[str]], list[str], dict[str, set[str]]]:
    """(edges module -> murk modules it imports, the private-name uses ``"<module>:<line>: <what>"``,
    the names each module imports from each murk module it reads from: ``{"a -> b": {names}}``)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    bad: list[str] = []
    names: dict[str, set[str]] = {}

    def same_package(a: str, b: str) -> bool:
        return _package_of(a, mods) == _package_of(b, mods) or b == _package_of(a, mods)

    for here, tree in mods.items():
        aliases: dict[str, str] = {}  # local name -> murk module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == PACKAGE and len(parts) > 1:
                        mod = ".".join(parts[1:])
                        if mod in mods:
                            edges[here].add(mod)
                            if a.asname:
                                aliases[a.asname] = mod
                            if any(_private(p) for p in parts[1:]) and not same_package(here, mod):
                                bad.append(f"{here}:{node.lineno}: import {a.name}")
            elif isinstance(node, ast.ImportFrom):
                src = _target(node, here, mods)
                if src is None:
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}" if src else a.name
                    if sub in mods:  # from murk.core import _paths: a module
                        edges[here].add(sub)
                        aliases[a.asname or a.name] = sub
                        if _private(a.name) and not same_package(here, sub):
                            bad.append(f"{here}:{node.lineno}: from {PACKAGE}{'.' + src if src else ''} import {a.name}")
                        continue
                    if src in mods:
                        edges[here].add(src)
                        names.setdefault(f"{here} -> {src}", set()).add(a.name)
                    if (_private(a.name) or any(_private(p) for p in src.split("."))) and not same_package(here, src):
                        bad.append(f"{here}:{node.lineno}: from {PACKAGE}.{src} import {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != here and _private(node.attr)
                    and not same_package(here, aliases[node.value.id])):
                bad.append(f"{here}:{node.lineno}: {node.value.id}.{node.attr} (murk.{aliases[node.value.id]})")
        edges[here].discard(here)
    return edges, bad, names


def layer_of(module: str) -> str:
    return module.split(".")[0]


def upward_imports(edges: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Every import of a module of a later layer (or of a module in no layer): ``"a -> b"``."""
    rank = {name: k for k, name in enumerate(layers)}
    out = []
    for here, targets in sorted(edges.items()):
        if not here:  # murk/__init__: the package index
            continue
        for t in sorted(targets):
            if not t or layer_of(t) not in rank or layer_of(here) not in rank:
                out.append(f"{here} -> {t or 'murk'} (not in a layer)")
            elif rank[layer_of(t)] > rank[layer_of(here)]:
                out.append(f"{here} -> {t} ({layer_of(here)} is below {layer_of(t)})")
    return out


def _all_names(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def sibling_reexports(mods: dict[str, ast.Module]) -> list[str]:
    """Names a module hands on that belong to another layer: a subpackage's ``__init__`` importing from
    another subpackage, or a module listing in its ``__all__`` a name it imported from another layer."""
    out = []
    for here, tree in mods.items():
        if not here:
            continue
        own = layer_of(here)
        is_init = "." not in here
        exported = set(_all_names(tree) or ())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            src = _target(node, here, mods)
            if src is None or layer_of(src) == own:
                continue
            for a in node.names:
                local = a.asname or a.name
                if is_init:
                    out.append(f"murk.{here}:{node.lineno} re-exports {local} from murk.{src}")
                elif local in exported:
                    out.append(f"murk.{here}:{node.lineno} lists {local} (from murk.{src}) in its __all__")
    return out


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


def _implementation_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Circles among the implementation modules: a package's ``__init__`` (which imports all of its modules)
    stands for the module that defines each name, so an edge to it is an edge to the layer's modules that
    do not themselves import the importer."""
    impl = {m: {t for t in ts if "." in t} for m, ts in edges.items() if "." in m}
    return cycles(impl)


# --------------------------------------------------------------------------- the checker itself


def _parse(sources: dict[str, str]) -> dict[str, ast.Module]:
    return {k: ast.parse(v) for k, v in sources.items()}


def test_checker_sees_every_import_form():
    mods = _parse({
        "a": "", "a._x": "def f():\n    from murk import b as _b\n    return _b._secret()\n",
        "b": "", "b._y": "import murk.c._z\n",
        "c": "", "c._z": "from murk.a._x import shown\nfrom murk.a import _hidden\n",
        "d": "", "d._w": "from murk.c import _z\nx = _z.q\nimport murk.a as aa\ny = aa._w\n",
        "e": "", "e._v": "from . import _u\nfrom ._u import t\n", "e._u": "t = 1\n",
    })
    edges, bad, _ = import_graph(mods)
    assert edges["a._x"] == {"b"} and edges["b._y"] == {"c._z"} and edges["c._z"] == {"a._x", "a"}
    assert edges["d._w"] == {"c._z", "a"} and edges["e._v"] == {"e._u"}
    assert sorted(b.split(": ", 1)[1] for b in bad) == [
        "_b._secret (murk.b)", "aa._w (murk.a)", "from murk.a import _hidden", "from murk.a._x import shown",
        "from murk.c import _z", "import murk.c._z"]


def test_checker_allows_own_private_modules_and_public_faces():
    mods = _parse({
        "lo": "from murk.lo._k import public\n", "lo._k": "public = 2\n_own = 3\n",
        "hi": "from murk.hi._m import x\n", "hi._m": "from murk.hi import _n\nfrom murk import lo\nx = lo.public\n",
        "hi._n": "from murk.hi._m import x as _x\n",
    })
    edges, bad, _ = import_graph(mods)
    assert bad == []
    assert upward_imports(edges, ["lo", "hi"]) == []
    assert sibling_reexports(mods) == []


def test_checker_refuses_an_upward_import():
    mods = _parse({"lo": "", "lo._k": "def f():\n    from murk.hi import x\n    return x\n",
                   "hi": "", "hi._m": "from murk import lo\n"})
    edges, _, _ = import_graph(mods)
    assert upward_imports(edges, ["lo", "hi"]) == ["lo._k -> hi (lo is below hi)"]
    assert upward_imports(edges, ["hi", "lo"]) == ["hi._m -> lo (hi is below lo)"]
    assert upward_imports(edges, ["lo"]) == ["hi._m -> lo (not in a layer)", "lo._k -> hi (not in a layer)"]


def test_checker_refuses_a_reexport_of_a_sibling_layer():
    mods = _parse({"lo": "from murk.lo._k import public\n", "lo._k": "public = 2\n",
                   "hi": "from murk.hi._m import mine\nfrom murk.lo import public\n",
                   "hi._m": "from murk.lo import public\n__all__ = ['mine', 'public']\nmine = public\n"})
    assert sibling_reexports(mods) == ["murk.hi:2 re-exports public from murk.lo",
                                       "murk.hi._m:1 lists public (from murk.lo) in its __all__"]


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def murk_modules():
    mods = _modules(LIB)
    assert {"readout", "readout._engine", "results._analysis", "scene._physics"} <= set(mods)  # the right folder
    return mods


@pytest.fixture(scope="module")
def murk_graph(murk_modules):
    return import_graph(murk_modules)


def test_every_module_is_in_a_layer(murk_modules):
    stray = sorted(m for m in murk_modules if m and layer_of(m) not in LAYERS)
    assert stray == [], f"modules of lib/murk outside the layers {LAYERS}: {stray} (move them into a layer)"
    assert sorted({layer_of(m) for m in murk_modules if m}) == sorted(LAYERS), "a layer without its subpackage"


def test_imports_point_down_the_layers(murk_graph):
    edges, _, _ = murk_graph
    up = upward_imports(edges, LAYERS)
    assert up == [], ("imports against the data flow (layers, bottom up: " + " < ".join(LAYERS)
                      + "; move the shared thing down):\n" + "\n".join(up))


def test_no_layer_reexports_another_layers_names(murk_modules):
    found = sibling_reexports(murk_modules)
    assert found == [], "names handed on from another layer (import them where they are defined):\n" + "\n".join(found)


def test_no_import_circle_in_murk(murk_graph):
    edges, _, _ = murk_graph
    assert _implementation_cycles(edges) == [], "import circles in lib/murk (a constant shared by two modules " \
                                                "belongs in the lower one)"


def test_no_module_uses_another_layers_private_names(murk_graph):
    _, bad, _ = murk_graph
    assert bad == [], "private names or modules used across the layers of lib/murk:\n" + "\n".join(bad)


#: the most lines a module of lib/murk may have (issue 40: "no library module over about 900 lines"): a longer
#: module holds more than one concept; split it into private modules of its layer, one concept each
MAX_MODULE_LINES = 900


def long_modules(lib: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """The modules under ``lib`` with more than ``limit`` lines: ``"<path>: <lines> lines"``, longest first."""
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(lib.parent).as_posix())
             for p in sorted(lib.rglob("*.py"))]
    return [f"{path}: {n} lines" for n, path in sorted(sizes, reverse=True) if n > limit]


def test_checker_finds_a_module_over_the_limit(tmp_path):
    pkg = tmp_path / "murk" / "layer"
    pkg.mkdir(parents=True)
    (pkg / "_short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path / "murk") == []
    (pkg / "_long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path / "murk") == [f"murk/layer/_long.py: {MAX_MODULE_LINES + 1} lines"]


def test_no_module_is_over_the_size_limit():
    found = long_modules(LIB)
    assert found == [], (f"modules of lib/murk over {MAX_MODULE_LINES} lines (split each into private modules of its "
                         "layer, one concept each):\n" + "\n".join(found))


def test_the_package_index_names_every_layer():
    doc = ast.get_docstring(ast.parse((LIB / "__init__.py").read_text(encoding="utf-8"))) or ""
    missing = [name for name in LAYERS if f"murk.{name}" not in doc]
    assert missing == [], f"murk/__init__.py's index does not name {missing}"


def faces_read(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Every name read through a layer's face: ``(line, layer, name)`` for ``from murk.<layer> import name`` and
    ``<layer>.name`` where ``from murk import <layer> [as alias]`` bound it."""
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PACKAGE:
                aliases.update({a.asname or a.name: a.name for a in node.names if a.name in LAYERS})
            elif node.module.count(".") == 1 and node.module.split(".")[1] in LAYERS:
                out += [(node.lineno, node.module.split(".")[1], a.name) for a in node.names]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            out.append((node.lineno, aliases[node.value.id], node.attr))
    return out


def test_checker_reads_the_names_taken_through_a_face():
    tree = ast.parse("from murk import core, scene as s\nfrom murk.report import fmt\nx = core.bar, s.CONDITIONS\n")
    assert sorted(faces_read(tree)) == [(2, "report", "fmt"), (3, "core", "bar"), (3, "scene", "CONDITIONS")]


def test_every_name_read_through_a_face_is_there():
    """A layer's face has every name the library and the stage notebooks read through it (a name missing from
    its ``__init__`` fails only when the line runs, e.g. in the read-out stage of an offline demo)."""
    import importlib
    import importlib.util

    files = sorted(LIB.rglob("*.py")) + sorted((LIB.parents[1] / "notebooks").glob("*.py"))
    missing = []
    for path in files:
        for line, layer, name in faces_read(ast.parse(path.read_text(encoding="utf-8"))):
            face = importlib.import_module(f"{PACKAGE}.{layer}")
            if not hasattr(face, name) and importlib.util.find_spec(f"{PACKAGE}.{layer}.{name}") is None:
                missing.append(f"{path.relative_to(LIB.parents[1])}:{line}: murk.{layer}.{name}")
    assert missing == [], "names read through a layer's face that it does not export:\n" + "\n".join(missing)
