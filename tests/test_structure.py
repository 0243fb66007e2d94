"""The package's shape, read from its source with ``ast``: no function over 60 lines, no
module over 600, and no import circle.

A function's length runs from its ``def`` line to its last line, docstring and comments
included (decorators not). Nested functions and methods count on their own, and inside the
function that holds them. No module is left out.

An import is an arrow from the module that imports to the module imported, whether it stands
at the top or inside a function (a function-level import only defers a circle), under
``TYPE_CHECKING`` too; ``from pkg import name`` points at ``pkg.name`` where that is a module,
else at ``pkg``. A circle of arrows is a defect: a module never imports from one above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_neuronsupport

PACKAGE = Path(pytest_neuronsupport.__file__).parent
LONGEST = 60
"""The most lines a function of the package may have."""
LONGEST_MODULE = 600
"""The most lines a module of the package may have."""


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """``(name, def line, lines)`` of every function and method in ``source``, nested ones too."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_function_lengths_run_from_the_def_line_to_the_last_line() -> None:
    body = "".join(f"    x{n} = {n}\n" for n in range(59))
    source = f'@decorated\ndef long():\n    """Doc."""\n{body}\nasync def short():\n    pass\n'
    assert function_lengths(source) == [("long", 2, 61), ("short", 64, 2)]


def test_no_function_of_the_package_is_over_60_lines() -> None:
    too_long = [
        f"{path.relative_to(PACKAGE.parent).as_posix()}:{line} {name} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line, lines in function_lengths(path.read_text(encoding="utf-8"))
        if lines > LONGEST
    ]
    assert not too_long, f"split these into named steps (at most {LONGEST} lines each)"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(module: str, is_package: bool, source: str, known: set[str]) -> set[str]:
    """The package's modules that ``source`` (of ``module``) imports, anywhere in it."""
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
            targets = [name for name in names if name in known]
            if len(targets) < len(names):
                targets.append(base)
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {
        module: imported(module, path.name == "__init__.py", path.read_text("utf-8"), known)
        for module, path in paths.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_circles_are_found_through_function_level_imports() -> None:
    known = {"p", "p.a", "p.b", "p.c"}
    graph = {
        "p": set(),
        "p.a": imported("p.a", False, "from p.b import x\n", known),
        "p.b": imported("p.b", False, "def f():\n    from p import c\n", known),
        "p.c": imported("p.c", False, "from . import a\n", known),
    }
    assert graph["p.b"] == {"p.c"} and graph["p.c"] == {"p.a"}
    assert circles(graph) == [["p.a", "p.b", "p.c"]]
    graph["p.c"] = set()
    assert circles(graph) == []


def test_the_package_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_no_module_of_the_package_is_over_600_lines() -> None:
    too_long = {
        path.relative_to(PACKAGE.parent).as_posix(): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE
    }
    assert not too_long, f"split these into modules of one idea each: {too_long}"
