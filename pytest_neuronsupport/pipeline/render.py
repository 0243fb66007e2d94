"""Rendering ``run.py``: the standalone script that is the test of one model.

A script is made of source text, never of imports of the plugin. Starting from three roots, the
runner's entry (``run``), the script's entry (``main``, or ``main_ranks`` on several cores) and the
run-side class of the device (``CpuOps``...), the renderer follows every name a definition uses to
where it is defined, through ``from pytest_neuronsupport.<module> import <name>`` (and, for a
runner of another package, ``from <its package>.<module> import <name>``), and copies exactly the
definitions the run uses. Top to bottom, a script holds:

1. a header of comments: the model, runner, device, the stack and a ``pip install`` line;
2. the runner module's docstring, which says what the run does;
3. the imports its code uses (standard library, torch, transformers), each once;
4. ``PARAMS``: the run's parameters, a literal of plain values;
5. the constants, in the order they are first used;
6. the runner's ``run`` (its steps in the order they run), then every function and class in the
   order it is first used (the docstrings of the runner's module and of ``run`` say what the run
   does; the others stay in the package);
7. ``if __name__ == "__main__": raise SystemExit(main(PARAMS, run, CpuOps))``: with
   ``judged(run)`` where an English judge decides when the CPU comparison does not run, and
   ``imported_backend(PARAMS)`` where the backend is an import path.

No file names or module names of the plugin appear in a script, so moving code between modules
does not change any script (nor, through its hash, make a model run again).

Untrusted text (model ids, paths, backend names) reaches the script only as data: inside the
``PARAMS`` literal (``pprint`` of plain values, which ``ast.literal_eval`` reads back) and, in the
header comments, JSON-escaped so that it cannot end a comment line.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib.util
import json
import re
import symtable
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: Modules whose definitions are copied into scripts (anything else is imported by the script).
INTERNAL = "pytest_neuronsupport"
#: Where the script's entries and the device classes are defined.
ENTRY_MODULE = f"{INTERNAL}.runners.lib.entry"
DEVICE_OPS_MODULE = f"{INTERNAL}.runners.lib.device_ops"
JUDGE_MODULE = f"{INTERNAL}.runners.lib.judge"
BACKEND_MODULE = f"{INTERNAL}.runners.lib.backend"
FUTURE = "from __future__ import annotations"
_BUILTINS = frozenset(dir(builtins))
_COMPREHENSIONS = frozenset({"listcomp", "dictcomp", "setcomp", "genexpr"})
#: Comments for tools (type checkers, linters, coverage), left out of scripts.
_TOOL_COMMENT = re.compile(r"\s*#\s*(?:type:\s*ignore|noqa|pragma:\s*no cover)\b[^#]*$")


class RenderError(Exception):
    """Run code that cannot become a standalone script; the message names module and name."""


@dataclass(frozen=True)
class RunParams:
    """Everything a run needs to know; becomes ``PARAMS`` in the script."""

    model_id: str
    checkpoint: str  # a local directory, or the Hub id
    runner: str  # "dense", "encoder", ...
    device: str
    backend: str
    dtype: str
    fullgraph: bool
    cores: int = 1
    revision: str | None = None
    #: Generating runners: prefill in chunks of this many tokens (None: one pass).
    prefill_chunk: int | None = None
    #: Generating runners: the English judge's checkpoint (None: no judge).
    judge: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ScriptPlan:
    """Which code a script is made of: where the runner's entry is, and the device's class."""

    runner_module: str
    #: The runner's function the script's entry calls: ``run``, or ``run_ranks`` on several cores.
    runner_entry: str
    #: ``main``, or ``main_ranks`` on several cores.
    entry: str
    ops_class: str
    #: The runner's name in the dataset card's spelling, for the header.
    runner_column: str
    #: Whether an English judge decides where the CPU comparison does not run.
    judged: bool = False
    #: Whether the backend is an import path (``module:callable``) the script imports.
    imported_backend: bool = False


# --- reading run code --------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Module:
    name: str
    #: The module docstring as written in the source (quotes included), if any.
    docstring: str | None
    definitions: Mapping[str, Definition]
    #: Bound name → (module, name) of a ``from pytest_neuronsupport... import`` line.
    internal: Mapping[str, tuple[str, str]]
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
    internal: dict[str, tuple[str, str]] = {}
    external: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and (
            node.level or _is_internal(node.module or "", packages)
        ):
            for alias in node.names:
                if node.level or (alias.asname and alias.asname != alias.name):
                    raise RenderError(
                        f"{name}, line {node.lineno}: run code imports the names it shares "
                        "absolutely and unrenamed (from package.module import name)"
                    )
                internal[alias.name] = (str(node.module), alias.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if isinstance(node, ast.Import) and _is_internal(alias.name, packages):
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
    return Module(
        name,
        docstring,
        definitions,
        internal,
        {k: tuple(dict.fromkeys(v)) for k, v in external.items()},
    )


def _is_internal(module: str, internal: tuple[str, ...]) -> bool:
    return any(module == top or module.startswith(top + ".") for top in internal)


def _import_text(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    rename = f" as {alias.asname}" if alias.asname else ""
    if isinstance(node, ast.Import):
        return f"import {alias.name}{rename}"
    return f"from {node.module} import {alias.name}{rename}"


def _definition(
    module: str, name: str, node: ast.stmt, lines: list[str], *, constant: bool
) -> Definition:
    decorators = getattr(node, "decorator_list", [])
    start = min([node.lineno, *(d.lineno for d in decorators)])
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
    return Definition(
        module=module,
        name=name,
        text=text.rstrip(),
        bare=bare.rstrip(),
        uses=tuple(dict.fromkeys(ordered)),
        eager=frozenset(eager),
        constant=constant,
        annotations=frozenset(_annotation_names(node)),
    )


def _annotation_names(node: ast.stmt) -> set[str]:
    found: set[str] = set()
    for inner in ast.walk(node):
        annotations: list[ast.expr | None] = []
        if isinstance(inner, ast.arg):
            annotations.append(inner.annotation)
        elif isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(inner.returns)
        elif isinstance(inner, ast.AnnAssign):
            annotations.append(inner.annotation)
        for annotation in filter(None, annotations):
            found.update(n.id for n in ast.walk(annotation) if isinstance(n, ast.Name))
    return found


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
            after = inner.body[1].lineno - start  # the blank line after a class docstring too
            cuts.append((begin, after - 1, []))
            continue
        blank = next((i for i, line in enumerate(doc) if not line.strip()), None)
        if blank is not None:
            quote = doc[0].strip()[:4].lstrip("rRbBuU")[:3]
            cuts.append((begin, end, [*doc[: blank - 1], doc[blank - 1] + quote]))
    for begin, end, kept in sorted(cuts, reverse=True):
        lines = [*lines[:begin], *kept, *lines[end + 1 :]]
    return lines


# --- choosing what a script holds ---------------------------------------------------------------


class _Script:
    """The definitions and imports one script needs, in the order they are written."""

    def __init__(self, internal: tuple[str, ...]) -> None:
        self.internal = internal
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
        parsed = load_module(module, self.internal)
        if name in parsed.definitions:
            return parsed.definitions[name]
        if name in parsed.internal:
            target = parsed.internal[name]
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
            parsed = load_module(definition.module, self.internal)
            for name in sorted(definition.annotations):
                if name in parsed.external and self._names.get(name, ("import", name)) == (
                    "import",
                    name,
                ):
                    self._resolve(definition.module, name, seen=())

    def _only_constants(self, definition: Definition) -> bool:
        for name in definition.eager:
            found = self._resolve(definition.module, name, seen=())
            if found is not None and not (found.constant and self._only_constants(found)):
                return False
        return True


# --- writing the script --------------------------------------------------------------------------


def _safe(value: object) -> str:
    """A value for a header comment: JSON, so a newline or quote cannot escape the comment."""
    return json.dumps(value, ensure_ascii=True)


def header(params: RunParams, plan: ScriptPlan, stack: Mapping[str, str | None]) -> str:
    present = {k: v for k, v in stack.items() if v and k != "library_version"}
    stack_words = ", ".join(f"{k} {_safe(v)}" for k, v in sorted(present.items()))
    on_top = [
        f"{dist}=={stack[key]}"
        for key, dist in (("transformers", "transformers"), ("accelerate", "accelerate"))
        if stack.get(key)
    ]
    lines = [
        "#!/usr/bin/env python3",
        "# pytest-neuronsupport run, standalone: `python3 run.py` prints the verdict,"
        " `--result F` writes it",
        f"# model: {_safe(params.model_id)}",
        f"# runner: {_safe(plan.runner_column)}  device: {_safe(params.device)}  "
        f"backend: {_safe(params.backend)}  dtype: {_safe(params.dtype)}  cores: {params.cores}",
        f"# stack: {stack_words}",
        f"# pip install {' '.join(json.dumps(p) for p in on_top) or '(nothing beyond the stack)'}",
    ]
    if params.model_id.startswith("zoo:"):
        lines.append(
            "# checkpoint: a pytest-neuronsupport tiny model; `neuronsupport zoo build` rebuilds"
            " it byte for byte"
        )
    return "\n".join(lines) + "\n"


def _import_lines(statements: list[str]) -> str:
    """Import statements sorted, standard library first, ``from`` imports merged per module."""
    plain: set[str] = set()
    names: dict[str, set[str]] = {}
    for statement in statements:
        if statement.startswith("import "):
            plain.add(statement)
        else:
            module, _, name = statement.removeprefix("from ").partition(" import ")
            names.setdefault(module, set()).add(name)
    groups: tuple[list[str], list[str]] = ([], [])
    for statement in sorted(plain):
        top = statement.split()[1].split(".")[0]
        groups[top not in sys.stdlib_module_names].append(statement)
    for module in sorted(names):
        line = f"from {module} import {', '.join(sorted(names[module]))}"
        if len(line) > 100:
            inner = "".join(f"    {n},\n" for n in sorted(names[module]))
            line = f"from {module} import (\n{inner})"
        groups[module.split(".")[0] not in sys.stdlib_module_names].append(line)
    return "\n\n".join("\n".join(group) for group in groups if group)


def params_literal(params: RunParams) -> str:
    """``PARAMS = {...}``: each value by ``repr`` (plain values only), wrapped at 100 columns."""
    lines, line = [], ""
    for key, value in sorted(params.to_dict().items()):
        item = f"{key!r}: {value!r},"
        if line and len(line) + len(item) > 94:
            lines.append(line)
            line = ""
        line = f"{line} {item}" if line else item
    return "PARAMS = {\n" + "".join(f"    {ln}\n" for ln in [*lines, line]) + "}"


def render(params: RunParams, plan: ScriptPlan, stack: Mapping[str, str | None]) -> str:
    """The complete text of ``run.py`` for one run."""
    # The plugin's run-side library and the runner's own package are copied into the script.
    script = _Script(tuple(dict.fromkeys([INTERNAL, plan.runner_module.split(".")[0]])))
    script._claim("PARAMS", ("script", "PARAMS"))
    script.add(plan.runner_module, plan.runner_entry)
    script.add(ENTRY_MODULE, plan.entry)
    script.add(DEVICE_OPS_MODULE, plan.ops_class)
    run, entry = plan.runner_entry, (plan.runner_module, plan.runner_entry)
    if plan.judged:
        script.add(JUDGE_MODULE, "judged")
        run = f"judged({run})"
    params_name = "PARAMS"
    if plan.imported_backend:
        script.add(BACKEND_MODULE, "imported_backend")
        params_name = "imported_backend(PARAMS)"
    script.add_annotation_imports()
    docstring = load_module(plan.runner_module, script.internal).docstring
    parts = [header(params, plan, stack)]
    if docstring:
        parts.append(docstring + "\n")
    parts.append(f"{FUTURE}\n")
    parts.append(_import_lines(list(script.imports)) + "\n")
    parts.append("\n".join([params_literal(params), *(d.text for d in script.constants)]))
    parts.extend(  # the run's own entry is documented; everything else, in the package
        f"\n{d.text if (d.module, d.name) == entry else d.bare}" for d in script.code
    )
    parts.append(
        '\nif __name__ == "__main__":\n'
        f"    raise SystemExit({plan.entry}({params_name}, {run}, {plan.ops_class}))\n"
    )
    text = "\n".join(parts)
    try:
        compile(text, "run.py", "exec")
    except SyntaxError as exc:  # pragma: no cover - a bug of the renderer
        raise RenderError(f"the rendered script does not compile: {exc}") from exc
    return text


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
