"""Rendering run.py: standalone, only what the run uses, readable, parameters as data, stable."""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import json
import re
import subprocess
import symtable
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import runners as run_side
from pytest_neuronsupport.devices import DEVICES
from pytest_neuronsupport.options import BY_NAME, DEFAULT_JUDGE
from pytest_neuronsupport.pipeline.render import (
    RunParams,
    ScriptPlan,
    judge_needed,
    render,
    sha256,
)
from pytest_neuronsupport.pipeline.runcode import RenderError
from pytest_neuronsupport.runners import Runner, Runners

STACK = {
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "library_version": "5.24.0",
    "accelerate": None,
    "python": "3.11.7",
    "neuronx_cc": None,
}
PARAMS = RunParams(
    model_id="acme-research/roberta-base-squad2",  # long enough to take a line of its own
    checkpoint="/home/someone/.cache/pytest-neuronsupport/zoo/v1-transformers-5.24.0/roberta-qa",
    runner="dense",
    device="cpu",
    backend="inductor",
    dtype="float32",
    fullgraph=False,
)
RUNNERS = Runners.builtin()
#: A config that takes each of the encoder's entries.
HEADS: dict[str, dict[str, Any]] = {
    "run_masked_lm": {"architectures": ["BertForMaskedLM"]},
    "run_question_answering": {"architectures": ["RobertaForQuestionAnswering"]},
    "run_token_classification": {"architectures": ["DebertaV2ForTokenClassification"]},
    "run_sequence_classification": {"architectures": ["DistilBertForSequenceClassification"]},
    "run_score": {"architectures": ["BertForSequenceClassification"], "num_labels": 1},
    "run_hidden_states": {"architectures": ["BertModel"]},
}


def script(
    runner: str = "dense",
    device: str = "cpu",
    cores: int = 1,
    head: str | None = None,
    judge: str | None = None,
    params: RunParams = PARAMS,
) -> str:
    chosen, dev = RUNNERS.get(runner), DEVICES[device]
    entry = chosen.entry_for(HEADS[head] if head else {}, cores)
    assert head in (None, entry)
    plan = ScriptPlan(
        runner_module=chosen.module,
        runner_entry=entry,
        entry="main_ranks" if cores > 1 else "main",
        ops_class=dev.rank_ops if cores > 1 else dev.ops,
        runner_column=chosen.column,
        judged=judge is not None,
        imported_backend=":" in params.backend,
    )
    return render(
        replace(params, runner=runner, device=device, cores=cores, judge=judge), plan, STACK
    )


def every_script() -> list[tuple[str, str, int, str | None, str | None]]:
    cases: list[tuple[str, str, int, str | None, str | None]] = []
    for runner in RUNNERS.names():
        heads: list[str | None] = [*HEADS] if runner == "encoder" else [None]
        several = [1, 2] if RUNNERS.get(runner).shards else [1]
        for device in DEVICES:
            for cores in several:
                for head in heads:
                    judges = [None, "/judge"] if RUNNERS.get(runner).generates else [None]
                    cases.extend((runner, device, cores, head, j) for j in judges)
    return cases


def params_literal(text: str) -> object:
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PARAMS":
            return ast.literal_eval(node.value)
    raise AssertionError("no PARAMS")


def imported_modules(text: str) -> set[str]:
    return {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }


def undefined_and_unused(text: str) -> tuple[set[str], set[str]]:
    """Names the script reads but never defines (nor imports), and top-level definitions it
    never uses, by Python's own symbol tables."""
    top = symtable.symtable(text, "run.py", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    read: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            is_top = table.get_type() == "module"
            if symbol.is_referenced() and (is_top or symbol.is_global()):
                read.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    tree = ast.parse(text)
    definitions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)} | {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    used_elsewhere = set()
    for node in tree.body:
        own = {getattr(node, "name", None)} | {
            t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)
        }
        used_elsewhere |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - own
    return read - defined - set(dir(builtins)), definitions - used_elsewhere - {"PARAMS"}


@pytest.mark.parametrize(("runner", "device", "cores", "head", "judge"), every_script())
def test_every_script_is_standalone_and_holds_only_what_it_uses(
    runner: str, device: str, cores: int, head: str | None, judge: str | None
) -> None:
    text = script(runner, device, cores, head, judge)
    compile(text, "run.py", "exec")
    modules = imported_modules(text)
    assert not [m for m in modules if m.startswith("pytest_neuronsupport")]
    assert {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) <= {
        "torch",
        "transformers",
        "huggingface_hub",
        "PIL",
    }
    undefined, unused = undefined_and_unused(text)
    assert undefined == set() and unused == set()
    assert text.count("from __future__ import annotations") == 1
    docstrings = [n for n in ast.parse(text).body if isinstance(n, ast.Expr)]
    assert len(docstrings) == 1  # the runner module's, none of the library's modules
    assert "pytest_neuronsupport" not in text.replace("pytest-neuronsupport", "")
    assert not re.search(r"#\s*(?:type:\s*ignore|noqa|pragma|fmt:)", text)  # comments for tools
    # only this device's class, the rank launcher only on several cores, the judge if set
    others = {d.ops for d in DEVICES.values()} - {DEVICES[device].ops}
    assert not any(f"class {name}" in text for name in others)
    assert ("def launch_ranks" in text) is (cores > 1)
    assert ("def judge_english" in text) is (judge is not None)
    entry = "main_ranks" if cores > 1 else "main"
    assert text.rstrip().splitlines()[-1].strip().startswith(f"raise SystemExit({entry}(PARAMS, ")


def without_docstrings(node: ast.stmt) -> ast.stmt:
    """A statement without its docstrings (the script keeps one of them, cut)."""
    tree = copy.deepcopy(node)
    for inner in ast.walk(tree):
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = inner.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                inner.body = inner.body[1:] or [ast.Pass()]
    return tree


def as_written(node: ast.stmt, source: ast.stmt) -> bool:
    """Whether a definition of a script is the source's, docstrings aside; an enum may have
    left out members (the script keeps those it names)."""
    mine, theirs = without_docstrings(node), without_docstrings(source)
    if ast.dump(mine) == ast.dump(theirs):
        return True
    if not (isinstance(mine, ast.ClassDef) and isinstance(theirs, ast.ClassDef)):
        return False
    members = [ast.dump(statement) for statement in theirs.body]
    kept = [ast.dump(statement) for statement in mine.body]
    mine.body = theirs.body = []
    return ast.dump(mine) == ast.dump(theirs) and kept == [m for m in members if m in kept]


@functools.cache
def run_side_definitions() -> dict[str, list[ast.stmt]]:
    """Every top-level function and class of the run-side modules, by name."""
    found: dict[str, list[ast.stmt]] = {}
    for path in Path(run_side.__file__).parent.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return found


@pytest.mark.parametrize(("runner", "device", "cores", "head", "judge"), every_script())
def test_every_definition_is_copied_as_written(
    runner: str, device: str, cores: int, head: str | None, judge: str | None
) -> None:
    """The code of each function and class is the source's, docstrings aside (and an enum's
    members the script does not name): nothing else (a decorator, a line) is lost on the way."""
    text = script(runner, device, cores, head, judge)
    script_lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            code = "\n".join(script_lines[start - 1 : node.end_lineno])
            assert copied_as_written(code), node.name


@functools.cache
def copied_as_written(code: str) -> bool:
    """Whether one definition of a script (its code, decorators included) is a run-side
    module's as written. Cached: the scripts share most of their definitions."""
    [node] = ast.parse(code).body
    assert isinstance(node, ast.FunctionDef | ast.ClassDef)
    return any(as_written(node, source) for source in run_side_definitions()[node.name])


def test_an_enum_keeps_the_members_the_script_names() -> None:
    text = script("encoder", head="run_hidden_states")
    result = next(n for n in ast.parse(text).body if getattr(n, "name", "") == "Result")
    kept = {t.id for n in getattr(result, "body", []) for t in n.targets}
    named = {
        n.attr
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Result"
    }
    assert kept == named == {"PASS", "FAIL_LOAD", "FAIL_FORWARD", "FAIL_OUTPUT", "FAIL_OTHER"}


def lines(text: str) -> int:
    return len(text.splitlines())


#: A run.py as the default sweep writes it is a page: at most this many lines on one core, and
#: on several cores (the issue "One sweep, many tables"; 25 more for issue 36: the CPU reference's
#: key, which the run checks before it reuses a reference file, and the float64 check's rounding
#: bound and its words, how far off a failure is; 15 more for a Neuron script's device class,
#: which turns TorchNeuron's fallback execution off in the script itself and reports what
#: TorchNeuron says of the run, the operators it ran on the CPU and the graphs it compiled:
#: issue 35; 35 more for issue 38: the reference-only pass, which computes the CPU reference
#: before the device's run leases its cores, and the failure it tells that run; 5 more for the
#: reason a run computed a reference it was named a file for, ``reference_miss``; 10 more for a
#: library's warning shown, never raised, whatever the run's ``PYTHONWARNINGS``; 20 more for a
#: forked run's own thread pool, made before its threads, and its stacks written on request:
#: where a run that timed out hung; 7 more for issue 45: a graph break raised in the harness's
#: own code, its sharding's, is the harness's failure, FAIL(other), never the model's; 118 more
#: for issue 46: the eager run in a half dtype computed in float64 and rounded at each operation,
#: the same on every host, and what computed the reference, the CPU and oneDNN's ISA among it;
#: 3 more for a failing rank's own error named in the row's line, and where it was raised).
ONE_CORE, SEVERAL_CORES = 585, 713
#: What the English judge adds at most, where the support mode runs a script again with it
#: (its CPU run failed or did not reproduce itself) or a several-core run's host cannot hold
#: the model in fp32 (judge_needed).
JUDGE_MORE = 70
#: Models as a sweep names them: a zoo model (a folder of the cache, a header line of its own)
#: and a Hub model (pinned to the commit that ran).
MODELS = {
    "zoo": (
        "zoo:llama",
        "/home/someone/.cache/pytest-neuronsupport/zoo/v1-transformers-5.24.0/llama",
    ),
    "hub": ("acme-research/roberta-base-squad2", "acme-research/roberta-base-squad2"),
}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def default_script(
    runner: str,
    device: str,
    cores: int,
    head: str | None,
    model: str,
    judge: str | None,
    cpu_failed: bool = False,
) -> str:
    """The run.py a sweep with the default options writes (``--neuron-judge`` aside): the
    device's backend, dtype and fullgraph, the default prefill chunk, and the judge wherever
    :func:`judge_needed` says it decides (``cpu_failed``: the script run again when the CPU
    comparison did not run); on several cores, the CPU comparison too (this host holds the
    tiny models in fp32)."""
    chosen, dev = RUNNERS.get(runner), DEVICES[device]
    model_id, checkpoint = MODELS[model]
    judged = judge_needed(chosen, judge, cpu_compared=not cpu_failed)  # this host holds it
    params = RunParams(
        model_id=model_id,
        checkpoint=checkpoint,
        runner=runner,
        device=device,
        backend=dev.default_backend,
        dtype=dev.default_dtype,
        fullgraph=dev.fullgraph,
        cores=cores,
        revision=None if model == "zoo" else COMMIT,
        prefill_chunk=BY_NAME["prefill-chunk"].default if chosen.generates else None,
        judge=judge if judged else None,
        cpu_reference=True if chosen.generates and cores > 1 else None,
    )
    plan = ScriptPlan(
        runner_module=chosen.module,
        runner_entry=chosen.entry_for(HEADS[head] if head else {}, cores),
        entry="main_ranks" if cores > 1 else "main",
        ops_class=dev.rank_ops if cores > 1 else dev.ops,
        runner_column=chosen.column,
        judged=judged,
    )
    return render(params, plan, STACK)


@pytest.mark.parametrize(
    ("runner", "device", "cores", "head"),
    list(dict.fromkeys(case[:4] for case in every_script())),
)
def test_a_run_py_of_the_default_sweep_is_a_page(
    runner: str, device: str, cores: int, head: str | None
) -> None:
    assert BY_NAME["judge"].default == DEFAULT_JUDGE
    generates = RUNNERS.get(runner).generates
    budget = SEVERAL_CORES if cores > 1 else ONE_CORE
    for model in MODELS:
        text = default_script(runner, device, cores, head, model, DEFAULT_JUDGE)
        unjudged = default_script(runner, device, cores, head, model, None)  # --neuron-judge none
        assert text == unjudged and "def judge_english" not in text
        assert lines(text) <= budget, model
        again = default_script(runner, device, cores, head, model, DEFAULT_JUDGE, cpu_failed=True)
        assert ("def judge_english" in again) is generates
        assert lines(again) - lines(text) <= (JUDGE_MORE if generates else 0), model


def test_the_steps_come_first_and_in_the_order_they_run() -> None:
    text = script("encoder", head="run_masked_lm")
    order = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    assert order[:2] == ["run_masked_lm", "forward_and_check"]
    steps = (
        ast.get_source_segment(
            text,
            next(n for n in ast.parse(text).body if getattr(n, "name", "") == "forward_and_check"),
        )
        or ""
    )
    marks = [steps.index(f'"{phase}"') for phase in ("load", "forward", "reference")]
    assert marks == sorted(marks)
    assert steps.index("compile_forward") < steps.index("= forward(") < steps.index("head.check")


HOSTILE = 'x"\n"""\nimport os; os.system("echo pwned")  # \u2028 \\'


def test_untrusted_strings_stay_data() -> None:
    params = replace(
        PARAMS, model_id=HOSTILE, checkpoint=HOSTILE, backend=HOSTILE, revision=HOSTILE
    )
    text = script(params=params)
    assert params_literal(text) == params.to_dict()
    header = text.split('"""', 1)[0]
    assert all(line.startswith("#") for line in header.splitlines() if line)
    top_level_calls = [
        n for n in ast.parse(text).body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
    ]
    assert top_level_calls == []  # nothing runs at import but the __main__ guard


def test_the_header_lists_the_stack_and_the_packages_on_top() -> None:
    text = script()
    assert '# stack: python "3.11.7", torch "2.13.0", transformers "5.24.0"' in text
    assert '# pip install "transformers==5.24.0"' in text
    assert '# model: "acme-research/roberta-base-squad2"' in text
    assert '# runner: "run_dense"' in text


def test_the_hash_changes_with_the_test_and_only_with_it() -> None:
    first = sha256(script())
    assert first == sha256(script())  # byte-stable
    assert first != sha256(script(params=replace(PARAMS, backend="aot_eager")))
    assert first != sha256(script(device="cuda"))


LIBRARY = """
import os


def double(x):
    return 2 * x


def announce(text):
    print(text, os.getpid() > 0)
"""
RUNNER = '''
"""A test double runner: prints twice a number."""

from {package}.{helpers} import announce, double


def run(params, ops):
    announce(double(params["cores"]))
    return {{"result": "PASS"}}
'''


def make_package(root: Path, package: str, helpers: str) -> None:
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    (root / package / f"{helpers}.py").write_text(LIBRARY)
    (root / package / "runner.py").write_text(RUNNER.format(package=package, helpers=helpers))


def test_moving_code_around_does_not_change_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two packages with the same run code laid out in other modules render the same script:
    no module name, file name or layout of the code shows in it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    make_package(tmp_path, "layout_one", "helpers")
    make_package(tmp_path, "layout_two", "shared_code")
    texts = [
        render(PARAMS, ScriptPlan(f"{p}.runner", "run", "main", "CpuOps", "run_echo"), STACK)
        for p in ("layout_one", "layout_two")
    ]
    assert texts[0] == texts[1]
    assert "def double" in texts[0] and "layout_" not in texts[0]


ENUM_RUNNER = """
from enum import Enum


class Colour(Enum):
    RED = 1
    GREEN = 2
    BLUE = 3


def run(params, ops):
    return {{"result": {use}}}
"""


@pytest.mark.parametrize(
    ("use", "kept"),
    [("Colour.GREEN", ["GREEN"]), ("[c.name for c in Colour]", ["RED", "GREEN", "BLUE"])],
)
def test_an_enum_used_otherwise_than_by_its_members_is_copied_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use: str, kept: list[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "enum_runner.py").write_text(ENUM_RUNNER.format(use=use))
    text = render(PARAMS, ScriptPlan("enum_runner", "run", "main", "CpuOps", "run_enum"), STACK)
    colour = next(n for n in ast.parse(text).body if getattr(n, "name", "") == "Colour")
    assert [t.id for n in getattr(colour, "body", []) for t in n.targets] == kept


def test_run_code_that_cannot_be_made_standalone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_runner.py").write_text(
        textwrap.dedent(
            """
            def run(params, ops):
                return helper_nobody_defines(params)
            """
        )
    )
    plan = ScriptPlan("broken_runner", "run", "main", "CpuOps", "run_broken")
    with pytest.raises(RenderError, match="'helper_nobody_defines' is used but neither defined"):
        render(PARAMS, plan, STACK)


def test_a_runner_declaration_is_read_without_importing_its_module() -> None:
    """The built-in declarations the plugin reads from source are the ones the modules make."""
    import importlib

    for runner in RUNNERS.by_name.values():
        module = importlib.import_module(runner.module)
        declared: Runner = module.RUNNER
        assert declared == replace(runner, module="")
        for entry in {runner.entry, *(e for _, e in runner.entries)}:
            assert callable(getattr(module, entry)), (runner.name, entry)
        if runner.shards:
            assert callable(getattr(module, runner.ranks_entry)), runner.name


def test_the_plugin_side_imports_neither_torch_nor_transformers() -> None:
    """Collection, the session and the pipeline run in every xdist worker: they read the run
    side's declarations and share its standard-library modules, never import its torch code."""
    code = (
        "import json, sys\n"
        "from pytest_neuronsupport import session, plugin, cli\n"
        "from pytest_neuronsupport.modellist import default_lists, parse\n"
        "from pytest_neuronsupport.runners import Runners\n"
        "parse(default_lists()[0], Runners.builtin())\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
