"""Run code as definitions: the modules ``run.py`` is made of, read as source, and the set of
definitions one run uses, in the order a reader meets them.

Nothing here imports the run code (it imports torch). A module is parsed into its top-level
definitions (functions, classes, assignments) and its imports; for each definition, the
module-level names it uses (by Python's own symbol tables) and those it needs when the statement
itself runs (a base class, a decorator, a default value). :class:`Selection` starts from a few
roots and follows names, through ``from <package>.<module> import <name>`` of the packages it
copies from, to their definitions: breadth-first from each root, what a statement needs when it
runs before it, the constants apart.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import re
import symtable
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

#: The plugin's package: its run-side modules are copied into scripts, never imported.
INTERNAL = "pytest_neuronsupport"
FUTURE = "from __future__ import annotations"
_BUILTINS = frozenset(dir(builtins))
_COMPREHENSIONS = frozenset({"listcomp", "dictcomp", "setcomp", "genexpr"})
#: Comments for tools (type checkers, linters, coverage, the formatter), left out of scripts.
_TOOL_COMMENT = re.compile(
    r"(?:\s*#\s*(?:type:\s*ignore|noqa|pragma:\s*no cover|fmt:\s*(?:skip|off|on))\b[^#]*)+$"
)


class RenderError(Exception):
    """Run code that cannot become a standalone script; the message names module and name."""


@dataclass(frozen=True)
class Definition:
    """One top-level statement of a module that defines a name."""

    module: str
    name: str
    #: Its source, each docstring cut to its first paragraph...
    text: str
    #: ...and without docstrings.
    bare: str
    #: The module-level names it uses, in order of first appearance.
    uses: tuple[str, ...]
    #: Those it needs when the statement itself runs (bases, decorators, defaults, values).
    eager: frozenset[str]
    constant: bool
    #: Names in its type annotations (never evaluated: imported only if they are imports).
    annotations: frozenset[str] = frozenset()
    #: ``(name, attribute)`` of each ``name.attribute`` it reads...
    attributes: frozenset[tuple[str, str]] = frozenset()
    #: ...and the names it reads otherwise (a call, a loop over it, a value), annotations aside.
    whole: frozenset[str] = frozenset()
    #: An enum's members (each ``NAME = value`` on a line of its own); a script keeps those it
    #: names (:meth:`Selection.keep_used_members`).
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Module:
    name: str
    #: The module docstring as written in the source (quotes included), if any.
    docstring: str | None
    definitions: Mapping[str, Definition]
    #: Bound name → (module, name), for the imports from the packages copied into scripts.
    copied: Mapping[str, tuple[str, str]]
    #: Bound name → the import statements (normalised text) that bind it.
    external: Mapping[str, tuple[str, ...]]


def module_source(name: str) -> str:
    """The source text of an importable module, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise RenderError(f"cannot find run code module {name!r}: {exc}") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise RenderError(f"run code module {name!r} has no Python source file")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


def load_module(name: str, packages: tuple[str, ...] = (INTERNAL,)) -> Module:
    """A module's definitions and imports; those of ``packages`` are followed into scripts."""
    return _parse(name, module_source(name), packages)


@functools.lru_cache(maxsize=128)
def _parse(name: str, source: str, packages: tuple[str, ...]) -> Module:
    tree = ast.parse(source)
    lines = source.splitlines()
    first = tree.body[0] if tree.body else None
    docstring = None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str) and first.end_lineno is not None:
            docstring = "\n".join(lines[first.lineno - 1 : first.end_lineno])
    definitions: dict[str, Definition] = {}
    copied: dict[str, tuple[str, str]] = {}
    external: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and (
            node.level or _copied_from(node.module or "", packages)
        ):
            for alias in node.names:
                if node.level or (alias.asname and alias.asname != alias.name):
                    raise RenderError(
                        f"{name}, line {node.lineno}: run code imports the names it shares "
                        "absolutely and unrenamed (from package.module import name)"
                    )
                copied[alias.name] = (str(node.module), alias.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if isinstance(node, ast.Import) and _copied_from(alias.name, packages):
                    raise RenderError(f"{name}, line {node.lineno}: 'import {alias.name}'")
                bound = alias.asname or alias.name.split(".")[0]
                external.setdefault(bound, []).append(_import_text(node, alias))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions[node.name] = _definition(name, node.name, node, lines, constant=False)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    definitions[target.id] = _definition(
                        name, target.id, node, lines, constant=True
                    )
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and _is_enum(node, external):
            definitions[node.name] = replace(definitions[node.name], members=_members(node))
    return Module(
        name,
        docstring,
        definitions,
        copied,
        {k: tuple(dict.fromkeys(v)) for k, v in external.items()},
    )


def _is_enum(node: ast.ClassDef, external: Mapping[str, list[str]]) -> bool:
    """Whether a base of the class is imported from :mod:`enum`."""
    roots = [ast.unparse(base).split(".")[0] for base in node.bases]
    return any(
        statement.startswith(("from enum ", "import enum"))
        for root in roots
        for statement in external.get(root, [])
    )


def _members(node: ast.ClassDef) -> tuple[str, ...]:
    """The members of an enum whose body is members only (after its docstring), each on a line
    of its own; else none (the class is copied whole)."""
    body = node.body[1:] if _docstring_node(node) else node.body
    members = []
    for statement in body:
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and statement.lineno == statement.end_lineno
        ):
            return ()
        members.append(statement.targets[0].id)
    return tuple(members)


def _docstring_node(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    first = node.body[0]
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )


def _copied_from(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == top or module.startswith(top + ".") for top in packages)


def _import_text(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    rename = f" as {alias.asname}" if alias.asname else ""
    if isinstance(node, ast.Import):
        return f"import {alias.name}{rename}"
    return f"from {node.module} import {alias.name}{rename}"


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return list(getattr(node, "decorator_list", []))


def _definition(
    module: str, name: str, node: ast.stmt, lines: list[str], *, constant: bool
) -> Definition:
    start = min([node.lineno, *(d.lineno for d in _decorators(node))])
    assert node.end_lineno is not None
    source = lines[start - 1 : node.end_lineno]
    text, bare = (
        "\n".join(_TOOL_COMMENT.sub("", line) for line in _docstrings(node, source, start, keep=k))
        for k in (True, False)
    )
    table = symtable.symtable(f"{FUTURE}\n{text}\n", f"{module}.{name}", "exec")
    uses: set[str] = set()
    eager: set[str] = set()
    _global_references(table, uses, eager, eager_scope=True)
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in uses]
    ordered = [n.id for n in sorted(names, key=lambda n: (n.lineno, n.col_offset))]
    annotations = _annotation_nodes(node)
    in_annotations = {id(n) for a in annotations for n in ast.walk(a)}
    under_attribute = {
        id(n.value): (n.value.id, n.attr)
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in uses
    }
    return Definition(
        module=module,
        name=name,
        text=text.rstrip(),
        bare=bare.rstrip(),
        uses=tuple(dict.fromkeys(ordered)),
        eager=frozenset(eager),
        constant=constant,
        annotations=frozenset(
            n.id for a in annotations for n in ast.walk(a) if isinstance(n, ast.Name)
        ),
        attributes=frozenset(under_attribute.values()),
        whole=frozenset(
            n.id for n in names if id(n) not in under_attribute and id(n) not in in_annotations
        ),
    )


def _annotation_nodes(node: ast.stmt) -> list[ast.expr]:
    found: list[ast.expr | None] = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.arg):
            found.append(inner.annotation)
        elif isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(inner.returns)
        elif isinstance(inner, ast.AnnAssign):
            found.append(inner.annotation)
    return [a for a in found if a is not None]


def _global_references(
    table: symtable.SymbolTable, uses: set[str], eager: set[str], *, eager_scope: bool
) -> None:
    """Names ``table`` and its children read from the module; ``eager``: those read when the
    statement runs (module level, class bodies, comprehensions run there)."""
    top = table.get_type() == "module"
    for symbol in table.get_symbols():
        if not symbol.is_referenced():
            continue
        if (top and not symbol.is_assigned()) or (not top and symbol.is_global()):
            uses.add(symbol.get_name())
            if eager_scope:
                eager.add(symbol.get_name())
    for child in table.get_children():
        runs_now = child.get_type() == "class" or child.get_name() in _COMPREHENSIONS
        _global_references(child, uses, eager, eager_scope=eager_scope and runs_now)


def _docstrings(node: ast.stmt, lines: list[str], start: int, *, keep: bool) -> list[str]:
    """The statement's lines with each docstring in it cut to its first paragraph (``keep``) or
    left out (where that leaves a body)."""
    cuts: list[tuple[int, int, list[str]]] = []
    for inner in ast.walk(node):
        if not isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first = inner.body[0]
        if not (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and first.end_lineno is not None
        ):
            continue
        begin, end = first.lineno - start, first.end_lineno - start
        doc = lines[begin : end + 1]
        if not keep and len(inner.body) > 1:
            following = inner.body[1]  # from its decorators on, if it has any
            begins = min([following.lineno, *(d.lineno for d in _decorators(following))])
            after = begins - start  # the blank line after a class docstring too
            cuts.append((begin, after - 1, []))
            continue
        blank = next((i for i, line in enumerate(doc) if not line.strip()), None)
        if blank is not None:
            quote = doc[0].strip()[:4].lstrip("rRbBuU")[:3]
            cuts.append((begin, end, [*doc[: blank - 1], doc[blank - 1] + quote]))
    for begin, end, kept in sorted(cuts, reverse=True):
        lines = [*lines[:begin], *kept, *lines[end + 1 :]]
    return lines


def _without_members(text: str, unused: set[str]) -> str:
    """A class's text without the lines that assign ``unused`` in its body."""
    lines = text.splitlines()
    kept = [
        line
        for line in lines[1:]
        if not (line[:1].isspace() and line.split("=")[0].strip() in unused)
    ]
    return "\n".join([lines[0], *kept])


class Selection:
    """The definitions and imports one script needs, in the order they are written."""

    def __init__(self, packages: tuple[str, ...]) -> None:
        #: The packages whose definitions are copied (anything else is imported).
        self.packages = packages
        self.constants: list[Definition] = []
        self.code: list[Definition] = []
        self.imports: dict[str, None] = {}
        self._done: set[tuple[str, str]] = set()
        self._names: dict[str, tuple[str, str]] = {}
        self._queue: deque[tuple[str, str]] = deque()

    def add(self, module: str, name: str) -> None:
        """Add what ``name`` means in ``module`` and everything it uses: first the names it uses
        itself, then the names those use, and so on (a reader meets the steps before the
        details)."""
        self._queue = deque([(module, name)])
        while self._queue:
            found = self._resolve(*self._queue.popleft(), seen=())
            if found is not None:
                self._add_definition(found)

    def _resolve(self, module: str, name: str, seen: tuple[str, ...]) -> Definition | None:
        parsed = load_module(module, self.packages)
        if name in parsed.definitions:
            return parsed.definitions[name]
        if name in parsed.copied:
            target = parsed.copied[name]
            if f"{target[0]}:{target[1]}" in seen:
                raise RenderError(f"{module}: {name!r} is imported in a circle")
            return self._resolve(*target, seen=(*seen, f"{module}:{name}"))
        if name in parsed.external:
            self._claim(name, ("import", name))
            for statement in parsed.external[name]:
                self.imports[statement] = None
            return None
        if name in _BUILTINS:
            return None
        raise RenderError(f"{module}: {name!r} is used but neither defined nor imported there")

    def _claim(self, name: str, owner: tuple[str, str]) -> None:
        if self._names.setdefault(name, owner) != owner:
            raise RenderError(
                f"two definitions of {name!r} in one script: "
                f"{':'.join(self._names[name])} and {':'.join(owner)}"
            )

    def _add_definition(self, definition: Definition) -> None:
        key = (definition.module, definition.name)
        if key in self._done:
            return
        self._done.add(key)
        self._claim(definition.name, key)
        for name in sorted(definition.eager):  # what must exist before the statement runs
            found = self._resolve(definition.module, name, seen=())
            if found is not None:
                self._add_definition(found)
        if definition.constant and self._only_constants(definition):
            self.constants.append(definition)
        else:
            self.code.append(definition)
        self._queue.extend((definition.module, name) for name in definition.uses)

    def add_annotation_imports(self) -> None:
        """Import what the kept definitions' annotations name, where that is an import (a
        reader, or a type checker, then finds every name)."""
        for definition in [*self.constants, *self.code]:
            parsed = load_module(definition.module, self.packages)
            for name in sorted(definition.annotations):
                owner = self._names.get(name)  # a definition of the script may share the name
                if name in parsed.external and (owner is None or owner[0] == "import"):
                    self._resolve(definition.module, name, seen=())

    def keep_used_members(self) -> None:
        """Leave out of each enum the members no definition of the script names, unless the
        script uses the enum otherwise than by ``Enum.MEMBER`` (a loop over it, a call)."""
        everything = [*self.constants, *self.code]
        for index, definition in enumerate(self.code):
            if not definition.members or any(definition.name in d.whole for d in everything):
                continue
            used = {a for d in everything for n, a in d.attributes if n == definition.name}
            unused = set(definition.members) - used
            if used and unused:
                self.code[index] = replace(
                    definition,
                    text=_without_members(definition.text, unused),
                    bare=_without_members(definition.bare, unused),
                )

    def _only_constants(self, definition: Definition) -> bool:
        for name in definition.eager:
            found = self._resolve(definition.module, name, seen=())
            if found is not None and not (found.constant and self._only_constants(found)):
                return False
        return True
