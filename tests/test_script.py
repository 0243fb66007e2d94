"""Rendering run.py: standalone, parameters as data only, stable hash."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from pytest_neuronsupport import script
from pytest_neuronsupport.script import RunParams, render, sha256

STACK = {
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "library_version": "5.24.0",
    "accelerate": None,
    "python": "3.11.7",
    "neuronx_cc": None,
}
PARAMS = RunParams(
    model_id="acme/model",
    checkpoint="/ckpt",
    runner="dense",
    device="cpu",
    backend="inductor",
    dtype="float32",
    fullgraph=False,
)


def params_literal(text: str) -> object:
    module = ast.parse(text)
    for node in module.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PARAMS":
            return ast.literal_eval(node.value)
    raise AssertionError("no PARAMS")


@pytest.mark.parametrize("runner", ["dense", "encoder"])
def test_the_script_compiles_and_imports_nothing_of_the_plugin(runner: str) -> None:
    text = render(replace(PARAMS, runner=runner), STACK)
    tree = ast.parse(text)
    compile(text, "run.py", "exec")
    modules = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert not [m for m in modules if m.startswith("pytest_neuronsupport")]
    assert text.count("from __future__ import annotations") == 1
    assert text.rstrip().endswith("raise SystemExit(main(PARAMS, run))")
    assert params_literal(text) == replace(PARAMS, runner=runner).to_dict()


HOSTILE = 'x"\n"""\nimport os; os.system("echo pwned")  # \u2028 \\'


def test_untrusted_strings_stay_data() -> None:
    params = replace(
        PARAMS, model_id=HOSTILE, checkpoint=HOSTILE, backend=HOSTILE, revision=HOSTILE
    )
    text = render(params, STACK)
    assert params_literal(text) == params.to_dict()
    header = text.split("from __future__", 1)[0]
    assert all(line.startswith("#") for line in header.splitlines() if line)
    top_level_calls = [
        n for n in ast.parse(text).body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
    ]
    assert top_level_calls == []  # nothing runs at import but the __main__ guard


def test_the_header_lists_the_stack_and_the_packages_on_top() -> None:
    text = render(PARAMS, STACK)
    assert '# stack: python "3.11.7", torch "2.13.0", transformers "5.24.0"' in text
    assert '# pip install "transformers==5.24.0"' in text
    assert '# model: "acme/model"' in text


def test_the_hash_changes_with_the_test_and_only_with_it() -> None:
    first = sha256(render(PARAMS, STACK))
    assert first == sha256(render(PARAMS, dict(STACK)))
    assert first != sha256(render(replace(PARAMS, backend="aot_eager"), STACK))
    assert first != sha256(render(PARAMS, {**STACK, "transformers": "5.25.0"}))


def test_package_only_blocks_are_dropped() -> None:
    source = script.standalone_source("runners/dense.py")
    assert "script: drop" not in source
    assert "pytest_neuronsupport" not in source
    assert "def run(" in source
