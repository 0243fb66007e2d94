"""The package's shape, read from its source with ``ast``: no function over 60 lines.

A function's length runs from its ``def`` line to its last line, docstring and comments
included (decorators not). Nested functions and methods count on their own, and inside the
function that holds them. No module is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_neuronsupport

PACKAGE = Path(pytest_neuronsupport.__file__).parent
LONGEST = 60
"""The most lines a function of the package may have."""


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
