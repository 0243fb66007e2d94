"""Rendering ``run.py``: the standalone script that is the test of one model.

A script is made of source text, never of imports of the plugin. Starting from three roots, the
runner's entry (``run``), the script's entry (``main``, or ``main_ranks`` on several cores) and the
run-side class of the device (``CpuOps``...), :mod:`.runcode` follows every name a definition
uses to where it is defined, through ``from pytest_neuronsupport.<module> import <name>`` (and,
for a runner of another package, ``from <its package>.<module> import <name>``), and the script
copies exactly the definitions the run uses. Top to bottom, a script holds:

1. a header of comments: the model, runner, device, the stack and a ``pip install`` line (with
   the packages the model needs beyond the stack, if any);
2. the runner module's docstring, which says what the run does;
3. the imports its code uses (standard library, torch, transformers), each once;
4. ``PARAMS``: the run's parameters, a literal of plain values;
5. the constants, in the order they are first used;
6. the runner's ``run`` (its steps in the order they run), then every function and class in the
   order it is first used (the docstrings of the runner's module and of ``run`` say what the run
   does; the others stay in the package);
7. ``if __name__ == "__main__": raise SystemExit(main(PARAMS, run, CpuOps))``: with
   ``judged(run)`` where an English judge decides when the CPU comparison does not run,
   ``minified(run)`` in the ``minify.py`` that shrinks a failing graph into ``repro.py``, and
   ``imported_backend(PARAMS)`` where the backend is an import path.

No file names or module names of the plugin appear in a script, so moving code between modules
does not change any script (nor, through its hash, make a model run again).

Untrusted text (model ids, paths, backend names) reaches the script only as data: inside the
``PARAMS`` literal (the ``repr`` of plain values, which ``ast.literal_eval`` reads back) and, in the
header comments, JSON-escaped so that it cannot end a comment line.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pytest_neuronsupport.pipeline.runcode import (
    FUTURE,
    INTERNAL,
    RenderError,
    Selection,
    load_module,
)
from pytest_neuronsupport.runners import Runner

#: Where the script's entries, the device classes, the judge and backend imports are defined.
ENTRY_MODULE = f"{INTERNAL}.runners.lib.entry"
DEVICE_OPS_MODULE = f"{INTERNAL}.runners.lib.device_ops"
JUDGE_MODULE = f"{INTERNAL}.runners.lib.judge"
MINIFY_MODULE = f"{INTERNAL}.runners.lib.minify"
BACKEND_MODULE = f"{INTERNAL}.runners.lib.backend"


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
    #: Generating runners on several cores: whether rank 0 holds the tokens against the CPU
    #: fp32 run (the host's memory holds the model in fp32). None on one core, where it always
    #: does, and left out of ``PARAMS`` there.
    cpu_reference: bool | None = None
    #: False where the host's memory cannot hold the model in float64: the CPU reference then
    #: has no float64 outputs and the checks fall back to fixed rules. None (left out of
    #: ``PARAMS``) where it can.
    fp64_reference: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for name in ("cpu_reference", "fp64_reference"):
            if values[name] is None:
                del values[name]
        return values


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
    #: Whether an English judge decides where the CPU comparison does not run
    #: (:func:`judge_needed`).
    judged: bool = False
    #: Whether the backend is an import path (``module:callable``) the script imports.
    imported_backend: bool = False
    #: Packages the run needs beyond the stack (the list entry's, and one a retry added): named
    #: on the header's ``pip install`` line, so the script's hash changes with them.
    packages: tuple[str, ...] = ()
    #: Whether the run is repeated under PyTorch's minifier (``minify.py``, not ``run.py``).
    minified: bool = False
    #: The script's file name, as its header tells how to run it (``train.py``: a training run).
    script_name: str = "run.py"
    #: Where :attr:`entry` is defined (a benchmark's entry is in its own module).
    entry_module: str = ENTRY_MODULE


def judge_needed(runner: Runner, judge: str | None, cpu_compared: bool) -> bool:
    """Whether a run's script holds the English judge: where it decides, when one is set.

    The judge decides a generating run's output where the CPU comparison does not run (the
    spec's "when the CPU run cannot complete"): on several cores when the host's memory cannot
    hold the model in fp32, which the sweep knows before the run (``cpu_compared`` false); or
    when the CPU run failed or did not reproduce itself, which is known only once the script
    has run: the support mode then runs it again with the judge
    (:func:`pytest_neuronsupport.modes.support.judged_again`). An encoder's check is its own (a
    reference that cannot run leaves it unchecked): never a judge."""
    return judge is not None and runner.generates and not cpu_compared


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
    on_top += sorted(set(plan.packages))
    lines = [
        "#!/usr/bin/env python3",
        f"# pytest-neuronsupport run, standalone: `python3 {plan.script_name}` prints the verdict,"
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
    """``PARAMS = {...}``: each value by ``repr`` (plain values only), in the order of
    :class:`RunParams`, short ones packed in lines of 100 columns, long ones (paths) last."""
    items = [f"{key!r}: {value!r}," for key, value in params.to_dict().items()]
    lines: list[str] = []
    for item in sorted(items, key=lambda item: len(item) > 40):  # stable: the order stays
        if lines and len(item) <= 40 and len(lines[-1]) + len(item) < 96:
            lines[-1] += f" {item}"
        else:
            lines.append(item)
    return "PARAMS = {\n" + "".join(f"    {line}\n" for line in lines) + "}"


def render(params: RunParams, plan: ScriptPlan, stack: Mapping[str, str | None]) -> str:
    """The complete text of ``run.py`` for one run."""
    # The plugin's run-side library and the runner's own package are copied into the script.
    script = Selection(tuple(dict.fromkeys([INTERNAL, plan.runner_module.split(".")[0]])))
    script._claim("PARAMS", ("script", "PARAMS"))
    script.add(plan.runner_module, plan.runner_entry)
    script.add(plan.entry_module, plan.entry)
    script.add(DEVICE_OPS_MODULE, plan.ops_class)
    run, entry = plan.runner_entry, (plan.runner_module, plan.runner_entry)
    if plan.judged:
        script.add(JUDGE_MODULE, "judged")
        run = f"judged({run})"
    if plan.minified:
        script.add(MINIFY_MODULE, "minified")
        run = f"minified({run})"
    params_name = "PARAMS"
    if plan.imported_backend:
        script.add(BACKEND_MODULE, "imported_backend")
        params_name = "imported_backend(PARAMS)"
    script.add_annotation_imports()
    script.keep_used_members()
    docstring = load_module(plan.runner_module, script.packages).docstring
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
