"""The import layering of the packages. README.md's "Layout of the code" table is the rule: a package may import
the packages its row names and the standard library, nothing else, and never a package listed after it. Every
import of every .py file of every package is read with `ast` (nothing is imported or run) and checked against it;
so is the table itself (no upward or circular rule) and the public-entry-point rule under it. A row may name a
package inside another (`relayish_tools/cli/`): the outer one is then only a folder of such packages.

The checker is tried on small synthetic trees too, so that a test that can never fail is not mistaken for a
layering that holds."""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Layout of the code"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# "the tools use compiler/codegen through its package" (the sentence under the README's table)
PACKAGE_API_ONLY = {"compiler.codegen": ("relayish_tools.bench", "relayish_tools.cli")}


@dataclass(frozen=True)
class Rule:
    package: str  # dotted: "compiler", "relayish_tools.cli"
    allowed: frozenset  # project packages (dotted) and third-party top-level module names


def read_rules(readme: str) -> list[Rule]:
    """The table under SECTION, in its order (bottom layer first): `pkg/` in the first cell, the names it may
    import (comma-separated, project packages in backticks or not) in the last one."""
    if SECTION not in readme:
        raise ValueError(f"README has no section {SECTION!r}")
    rules = []
    for line in readme.split(SECTION, 1)[1].splitlines():
        if line.startswith("## ") or (rules and not line.startswith("|")):
            break  # the section, or the table, ended
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or not cells[0].startswith("`"):
            continue  # prose before the table, its header and its separator
        rules.append(Rule(cells[0].strip("`").rstrip("/").replace("/", "."), frozenset(NAME.findall(cells[-1]))))
    if not rules:
        raise ValueError(f"README's {SECTION!r} section has no table of packages")
    return rules


def folder(package: str) -> str:
    return package.replace(".", "/") + "/"


def table_errors(rules: list[Rule]) -> list[str]:
    """A rule that lets a package import itself, a package listed after it, or one listed twice."""
    errors, below = [], set()
    packages = [r.package for r in rules]
    for rule in rules:
        if packages.count(rule.package) > 1:
            errors.append(f"{folder(rule.package)} has more than one row")
        for name in sorted(rule.allowed & set(packages)):
            if name not in below:
                errors.append(f"{folder(rule.package)} may import {folder(name)}, which is not listed before it (an upward or "
                              "circular rule)")
        below.add(rule.package)
    return errors


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # absolute, dotted
    names: tuple  # names taken from it (from-imports), else ()


def imports_of(path: Path) -> list[Import]:
    """The absolute imports of one file, wherever they stand (module level or inside functions). Relative imports
    stay inside their package and are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append(Import(node.lineno, node.module, tuple(a.name for a in node.names)))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def owner(module: str, packages: set) -> str:
    """The project package a dotted module belongs to (the longest listed prefix), else its top-level name."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in packages:
            return ".".join(parts[:n])
    return parts[0]


def import_errors(imp: Import, package: str, rule: Rule, packages: set) -> list[str]:
    """What is wrong with one import of a file of `package`: a module the rule does not allow, a private module
    or name of another project package, or a module of a package used through its API only."""
    top = owner(imp.module, packages)
    if top == package or top == "__future__" or top in sys.stdlib_module_names:
        return []
    if top not in rule.allowed:
        return [f"imports {imp.module}, but {folder(package)} may import only {', '.join(sorted(rule.allowed)) or 'nothing'}"
                " (and the standard library)"]
    if top not in packages:
        return []
    errors = []
    private = [p for p in imp.module.split(".") if _private(p)] + [n for n in imp.names if _private(n)]
    if private:
        errors.append(f"imports private {', '.join(private)} of {imp.module}")
    for api, users in PACKAGE_API_ONLY.items():
        if package in users and imp.module.startswith(api + "."):
            errors.append(f"imports {imp.module}: {folder(package)} uses {api} through its package only")
    return errors


def package_dir(root: Path, package: str) -> Path:
    return root.joinpath(*package.split("."))


def packages_on_disk(root: Path, listed: set) -> set:
    """The top-level packages at root, except that a folder of listed packages (no row of its own, rows for
    packages inside it) counts as those: its own __init__.py must import nothing of the project."""
    found = set()
    for init in root.glob("*/__init__.py"):
        name = init.parent.name
        inner = {p.parent.name for p in init.parent.glob("*/__init__.py")}
        if name not in listed and any(f"{name}.{sub}" in listed for sub in inner):
            found |= {f"{name}.{sub}" for sub in inner}
        else:
            found.add(name)
    return found


def violations(root: Path) -> list[str]:
    """Every breach of README.md's layout rule in the tree at root, as 'path:line: what'."""
    rules = read_rules((root / "README.md").read_text(encoding="utf-8"))
    errors = [f"README.md: {e}" for e in table_errors(rules)]
    by_package = {r.package: r for r in rules}
    on_disk = packages_on_disk(root, set(by_package))
    errors += [f"{folder(name)}: a package the README's table does not list" for name in sorted(on_disk - set(by_package))]
    errors += [f"README.md: {folder(name)} is listed but is not a package here" for name in sorted(set(by_package) - on_disk)]
    for package in sorted(on_disk & set(by_package)):
        for path in sorted(package_dir(root, package).rglob("*.py")):
            for imp in imports_of(path):
                for what in import_errors(imp, package, by_package[package], set(by_package)):
                    errors.append(f"{path.relative_to(root)}:{imp.line}: {what}")
    return errors


# ---------------------------------------------------------------------------------------------- the repository

def test_readme_table_is_the_rule_and_layered():
    rules = read_rules((REPO / "README.md").read_text(encoding="utf-8"))
    assert [r.package for r in rules][:2] == ["runtime", "relayish"]
    assert {"compiler", "tuning", "relayish_tools.bench", "relayish_tools.cli", "models"} <= {r.package for r in rules}
    assert rules[0].allowed == {"numpy", "ml_dtypes"}, \
        "a deployed model needs neither onnx nor llvmlite: runtime/ uses numpy (and ml_dtypes for bfloat16 only)"
    assert table_errors(rules) == []


def test_every_import_keeps_the_layering():
    assert violations(REPO) == []


# ---------------------------------------------------------------------------------------------- the checker

README = """# x

## Layout of the code

Prose first.

| package | holds | may import |
|---|---|---|
| `runtime/` | the bottom | numpy |
| `compiler/` | the middle | `runtime`, llvmlite |
| `relayish_tools/bench/` | the top | `compiler`, `runtime` |

## Next section
"""


def make_tree(root: Path, files: dict, readme: str = README) -> Path:
    (root / "README.md").write_text(readme)
    for package in ("runtime", "compiler", "relayish_tools", "relayish_tools/bench"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_tree_that_keeps_the_rule_passes(tmp_path):
    make_tree(tmp_path, {
        "runtime/timing.py": "import os\nimport numpy as np\nfrom .aligned import x\n",
        "compiler/codegen/__init__.py": "from llvmlite import ir\nimport runtime\nfrom runtime.timing import t\n",
        "compiler/codegen/build.py": "def _helper():\n    pass\n",
        "relayish_tools/bench/peak.py": "from __future__ import annotations\nfrom compiler.codegen import build_library\n",
    })
    assert violations(tmp_path) == []


def test_forbidden_imports_are_caught(tmp_path):
    make_tree(tmp_path, {
        "runtime/module.py": "import numpy\n\ndef f():\n    from compiler import compile_model\n",  # upward
        "runtime/jit.py": "import llvmlite.binding\n",  # a third-party package runtime may not use
        "compiler/passes/fuse.py": "from relayish_tools.bench.peak import x\n",  # upward, from a subpackage
        "relayish_tools/bench/peak.py": "from compiler.codegen.build import _init_llvm\nfrom runtime import _private_dir\n",
    })
    found = violations(tmp_path)
    expected = [
        "relayish_tools/bench/peak.py:1: imports private _init_llvm of compiler.codegen.build",
        "relayish_tools/bench/peak.py:1: imports compiler.codegen.build: relayish_tools/bench/ uses compiler.codegen "
        "through its package only",
        "relayish_tools/bench/peak.py:2: imports private _private_dir of runtime",
        "compiler/passes/fuse.py:1: imports relayish_tools.bench.peak, but compiler/ may import only llvmlite, "
        "runtime (and the standard library)",
        "runtime/jit.py:1: imports llvmlite.binding, but runtime/ may import only numpy (and the standard library)",
        "runtime/module.py:4: imports compiler, but runtime/ may import only numpy (and the standard library)",
    ]
    assert sorted(found) == sorted(expected)


def test_an_upward_rule_or_an_unlisted_package_is_caught(tmp_path):
    readme = README.replace("| `runtime/` | the bottom | numpy |",
                            "| `runtime/` | the bottom | numpy, `relayish_tools.bench` |")
    make_tree(tmp_path, {"models/__init__.py": "", "relayish_tools/extra/__init__.py": ""}, readme)
    assert violations(tmp_path) == [
        "README.md: runtime/ may import relayish_tools/bench/, which is not listed before it (an upward or "
        "circular rule)",
        "models/: a package the README's table does not list",
        "relayish_tools/extra/: a package the README's table does not list"]


# ---------------------------------------------------------------------------------------------- import cycles

def module_graph(root: Path, packages) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in it: module level or inside functions; relative
    imports resolved). A package's __init__ is a facade of re-exports: importing a package is no edge, importing
    one of its modules is."""
    files = {".".join(p.relative_to(root).with_suffix("").parts): p for pkg in packages
             for p in package_dir(root, pkg).rglob("*.py")}
    modules = {m for m in files if not m.endswith(".__init__")}

    def resolve(base: str, name: str | None) -> str | None:
        if name and f"{base}.{name}" in modules:
            return f"{base}.{name}"
        return base if base in modules else None

    graph = {}
    for mod in modules:
        path, deps = files[mod], set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                deps |= {m for a in node.names if (m := resolve(a.name, None))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = mod.split(".")[:-node.level]
                    base = ".".join(parent + ([base] if base else []))
                deps |= {m for a in node.names if (m := resolve(base, a.name))}
        graph[mod] = deps - {mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    """No import cycle among the project's modules (a cycle makes import order matter and hides a missing seam:
    compiler/compile.py and compiler/specialize.py imported each other, the specializer now gets the compiler
    handed in)."""
    packages = [r.package for r in read_rules((REPO / "README.md").read_text(encoding="utf-8"))]
    assert cycles(module_graph(REPO, packages)) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    make_tree(tmp_path, {"pkg/__init__.py": "from .a import f\n", "pkg/a.py": "def f():\n    from .b import g\n",
                         "pkg/b.py": "from pkg import a\n", "pkg/c.py": "from pkg import b\n"}, "")
    assert cycles(module_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b"]]
