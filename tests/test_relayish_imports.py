"""The import graph inside relayish/ is acyclic, and every import of a relayish module sits at the top of a file.

Read from the source with ast (nothing is imported), so a cycle fails here even when Python's import order
happens to tolerate it. A function-level import of a sibling module is how cycles hide; none is allowed.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent


def module_files(package: str) -> dict[str, Path]:
    """{dotted module name: file} of every module of a package (a package's own name maps to its __init__.py)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node, here: str, is_package: bool) -> list[str]:
    """Dotted names an Import/ImportFrom node may bring in: for `from X import a`, X then X.a (a module or not)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = here if is_package else here.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    target = ".".join(p for p in (base if node.level else "", node.module or "") if p)
    return [target] + [f"{target}.{a.name}" for a in node.names]


def import_graph(package: str) -> tuple[nx.DiGraph, list[str]]:
    """(edges module -> module of the package it imports, anywhere in the file; 'file:line module' of each import
    of a package module that is not at the top level of its file)."""
    files = module_files(package)
    graph, nested = nx.DiGraph(), []
    graph.add_nodes_from(files)
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [n for n in _imported(node, name, path.name == "__init__.py") if n in files]
            if isinstance(node, ast.ImportFrom) and len(names) > 1:
                names = names[1:]  # `from X import a, b` of modules a, b: the edges go to X.a, X.b
            targets = names
            graph.add_edges_from((name, t) for t in targets if t != name)
            if targets and id(node) not in top:
                nested.append(f"{path.relative_to(ROOT)}:{node.lineno} {', '.join(targets)}")
    return graph, nested


def test_relayish_has_no_import_cycle():
    graph, _ = import_graph("relayish")
    assert graph.number_of_edges() > 10  # the walk sees the imports at all
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles in relayish/: {[' -> '.join(c + c[:1]) for c in cycles]}"


def test_relayish_imports_its_modules_at_the_top():
    _, nested = import_graph("relayish")
    assert not nested, f"function-level imports of relayish modules (they hide cycles): {nested}"


def test_import_graph_sees_cycles_and_nested_imports(tmp_path, monkeypatch):
    """The check itself: a two-module cycle through a function-level import is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph, nested = import_graph("pkg")
    assert list(nx.simple_cycles(graph)) and nested == ["pkg/b.py:2 pkg.a"]
