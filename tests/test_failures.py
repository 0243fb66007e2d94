"""``neuronsupport failures``: the causes read from real error texts, the groups, the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.cli import main
from pytest_neuronsupport.dataset.layout import run_dir
from pytest_neuronsupport.views.failures import (
    NO_REPRO,
    Cause,
    cause_of,
    group_failures,
    newest_pair,
    normalise_message,
    pair_failures,
)
from tests.results_for_tests import pair_of, result_row, write_results

# The texts as runs record them: ``Type: message`` of the exception (``RunFailure``), dynamo's
# and inductor's wrappers as torch 2.13 words them, and the endings ``classify.ending`` writes.
DYNAMO_TAIL = (
    '\n\nSet TORCH_LOGS="+dynamo" and TORCHDYNAMO_VERBOSE=1 for more information\n\n\n'
    "You can suppress this exception and fall back to eager by setting:\n"
    "    import torch._dynamo\n    torch._dynamo.config.suppress_errors = True\n"
)
LINEAR_ERROR = (
    "BackendCompilerFailed: backend='fails_on_linear_backend_for_tests' raised:\n"
    "NotImplementedError: test backend: no lowering for linear" + DYNAMO_TAIL
)
LINEAR_SITE = "backends_for_tests:fails_on_linear_backend_for_tests"
LINEAR_CONTEXT = "BackendCompilerFailed backend='fails_on_linear_backend_for_tests'"
LOWERING_ERROR = (
    "InductorError: LoweringException: AssertionError: expected size 4==8, stride 1==1 at dim=0\n"
    "  target: aten.convolution.default\n"
    "  args[0]: TensorBox(StorageBox(InputBuffer(name='primals_3', layout=FixedLayout('cpu', "
    "torch.float32, size=[1, 3, 224, 224], stride=[150528, 50176, 224, 1]))))\n"
    "  args[1]: TensorBox(StorageBox(InputBuffer(name='primals_1')))\n"
)
MISSING_LOWERING = (
    "InductorError: LoweringException: MissingOperatorWithoutDecomp: missing lowering\n"
    "  target: aten._weird_op.default\n  args[0]: TensorBox(...)\n"
    "  target: aten._weird_op.default\n  args[0]: TensorBox(...)\n"
)
GRAPH_BREAK = (
    "Unsupported: Data-dependent branching\n"
    "  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`).\n"
    "  Hint: Use `torch.cond` to express dynamic control flow.\n\n"
    "  Developer debug context: attempted to jump with TensorVariable()\n\n"
    'from user code:\n   File "/home/u/.venv/lib/python3.11/site-packages/transformers/models/'
    'llava/modeling_llava.py", line 312, in forward\n    if pixel_values.sum() > 0:\n'
)
OUR_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/src/pytest_neuronsupport/pipeline/steps.py", line 128, in test\n'
    "    tried = self._test(spec, row)\n"
    "KeyError: 'tokenizer_class'\n"
)


def _row(
    model_id: str = "org/model-7b", result: str = "FAIL(gen)", **values: Any
) -> dict[str, Any]:
    return {"model_id": model_id, "result": result, "error": None, **values}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param(
            _row(error=LINEAR_ERROR, error_site=LINEAR_SITE),
            Cause("NotImplementedError", "site", LINEAR_SITE, LINEAR_CONTEXT),
            id="backend-wrapped: the inner type, at the site",
        ),
        pytest.param(
            _row(
                error=LINEAR_ERROR,
                error_site=LINEAR_SITE,
                repro_py="# repro\n",
                repro_ops=["torch._C._nn.linear"],
                repro_ops_after=1,
            ),
            Cause("NotImplementedError", "op", "torch._C._nn.linear", LINEAR_CONTEXT),
            id="a repro of one op: that op, before the site",
        ),
        pytest.param(
            _row(
                error=LINEAR_ERROR,
                repro_py="# repro\n",
                repro_ops=["Tensor.view", "torch.matmul", "torch._C._nn.linear"],
            ),
            Cause("NotImplementedError", "op", "torch._C._nn.linear", LINEAR_CONTEXT),
            id="a repro of several ops: the last",
        ),
        pytest.param(
            _row(error=LINEAR_ERROR, error_site=LINEAR_SITE, repro_ops=["torch._C._nn.linear"]),
            Cause("NotImplementedError", "site", LINEAR_SITE, LINEAR_CONTEXT),
            id="ops without a repro_py do not count",
        ),
        pytest.param(
            _row(error=LOWERING_ERROR, error_site="torch._inductor.lowering:convolution"),
            Cause(
                "AssertionError",
                "op",
                "aten.convolution.default",
                "InductorError; LoweringException",
            ),
            id="inductor lowering: the target op",
        ),
        pytest.param(
            _row(error=MISSING_LOWERING),
            Cause(
                "MissingOperatorWithoutDecomp",
                "op",
                "aten._weird_op.default",
                "InductorError; LoweringException",
            ),
            id="inductor missing lowering",
        ),
        pytest.param(
            _row(error=GRAPH_BREAK, error_site="torch._dynamo.symbolic_convert:jump"),
            Cause("Unsupported", "message", "Data-dependent branching"),
            id="graph break under fullgraph: its reason, not dynamo's frame",
        ),
        pytest.param(
            _row(result="FAIL(other)", error="killed by SIGKILL during gen (out of memory?)"),
            Cause("killed by SIGKILL", "phase", "gen"),
            id="killed",
        ),
        pytest.param(
            _row(
                result="FAIL(other)",
                error="timed out after 600 s during compile\n--- output tail ---\nRuntimeError: x",
            ),
            Cause("timed out", "phase", "compile"),
            id="timed out: the tail does not count",
        ),
        pytest.param(
            _row(result="FAIL(other)", error="rank 1 of 2 was killed by SIGSEGV"),
            Cause("killed by SIGSEGV"),
            id="a rank killed",
        ),
        pytest.param(
            _row(
                result="FAIL(other)",
                error="exceeded the memory limit of 8 GB (resident 9.12 GB) during load",
            ),
            Cause("exceeded the memory limit", "phase", "load"),
            id="memory limit",
        ),
        pytest.param(
            _row(
                result="FAIL(other)",
                error="exited with status 1 during load: ImportError: cannot import name 'X' "
                "from 'transformers' (/venv/lib/transformers/__init__.py)\n--- output tail ---",
            ),
            Cause(
                "ImportError",
                "message",
                "cannot import name 'X' from 'transformers' (<path>)",
                "exited with status 1",
            ),
            id="exited, printing an exception: the exception",
        ),
        pytest.param(
            _row(result="FAIL(other)", error="exited with status 70 during compile"),
            Cause("exited with status 70", "phase", "compile"),
            id="exited silently",
        ),
        pytest.param(
            _row(
                result="FAIL(other)",
                error="the xdist worker running it died (node gw1 crashed)",
            ),
            Cause("xdist worker died"),
            id="xdist worker",
        ),
        pytest.param(
            _row(
                result="FAIL(other)",
                error=OUR_TRACEBACK,
                notes="pytest-neuronsupport could not run it: KeyError: 'tokenizer_class'",
            ),
            Cause("KeyError", "message", "'tokenizer_class'", "pytest-neuronsupport"),
            id="our own bug: the traceback's exception",
        ),
        pytest.param(
            _row(error="rank 1 of 4: RuntimeError: collective timed out after 1800000 ms"),
            Cause("RuntimeError", "message", "collective timed out after <n> ms"),
            id="a rank's exception",
        ),
        pytest.param(
            _row(
                result="FAIL(output)",
                cpu_match="N at token 3: cosine 0.412000 < 0.99 and distance 7.25",
            ),
            Cause("wrong output", "message", "N at token <n>: cosine <n> < <n> and distance <n>"),
            id="wrong output: the check's words",
        ),
        pytest.param(
            _row(
                result="FAIL(output)",
                cpu_match="N at token 3: distance 9.1",
                repro_py="# repro\n",
                repro_ops=["torch.nn.functional.silu"],
            ),
            Cause("wrong output", "op", "torch.nn.functional.silu"),
            id="wrong output with a repro: the op",
        ),
        pytest.param(
            _row(result="FAIL(output)", english="N"),
            Cause("wrong output", "message", "the judge: not English"),
            id="wrong output: the judge",
        ),
        pytest.param(
            _row(
                result="FAIL(load)",
                error="OSError: org/model-7b does not appear to have a file named config.json.",
                error_site="transformers.utils.hub:cached_files",
            ),
            Cause("OSError", "site", "transformers.utils.hub:cached_files"),
            id="load: the site",
        ),
        pytest.param(
            _row(error="torch._dynamo.exc.TorchRuntimeError: float32 conv2d failed"),
            Cause("TorchRuntimeError", "message", "float32 conv2d failed"),
            id="a dotted type: its name",
        ),
        pytest.param(
            _row(error="segmentation fault somewhere in libnrt.so"),
            Cause("error", "message", "segmentation fault somewhere in libnrt.so"),
            id="no exception type",
        ),
    ],
)
def test_the_cause_of_a_row(row: dict[str, Any], expected: Cause) -> None:
    cause = cause_of(row)
    assert (cause.exception, cause.where, cause.place, cause.context) == (
        expected.exception,
        expected.where,
        expected.place,
        expected.context,
    )
    assert cause.key == expected.key


def test_text_and_key_of_a_cause() -> None:
    cause = cause_of(_row(error=LINEAR_ERROR, error_site=LINEAR_SITE))
    assert cause.text == f"NotImplementedError in {LINEAR_SITE} (through {LINEAR_CONTEXT})"
    assert cause.key == f"NotImplementedError|site|{LINEAR_SITE}"
    bare = cause_of(_row(error=LINEAR_ERROR.split("\n", 1)[1], error_site=LINEAR_SITE))
    assert bare == cause and bare.text == f"NotImplementedError in {LINEAR_SITE}"  # no wrapper
    assert cause_of(_row(result="FAIL(other)", error="killed by SIGKILL")).text == (
        "killed by SIGKILL"
    )
    assert cause_of(_row(error="AssertionError: ")).text == "AssertionError"
    with pytest.raises(AttributeError):
        cause.place = "elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "RuntimeError: shape '[1, 32, 4096]' is invalid for input of size 131072",
            "RuntimeError: shape '[1, 8, 768]' is invalid for input of size 6144",
        ),
        (
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 1.50 GiB is free.",
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a "
            "total capacity of 79.19 GiB of which 12.25 MiB is free.",
        ),
        (
            "RuntimeError: neuronx-cc failed (70): [NCC_EVRF029] unsupported op at "
            "/tmp/neuroncc_compile_workdir/2f5a1c/model/graph.hlo",
            "RuntimeError: neuronx-cc failed (70): [NCC_EVRF029] unsupported op at "
            "/tmp/neuroncc_compile_workdir/99e0b7/model/graph.hlo",
        ),
        (
            "ValueError: <object at 0x7f3a2c1b9d60> is not a tensor",
            "ValueError: <object at 0x55d1e0a0c2f0> is not a tensor",
        ),
        (
            "OSError: {model} does not appear to have a file named config.json.",
            "OSError: {model} does not appear to have a file named config.json.",
        ),
        (
            "RuntimeError: cannot load '/cache/models--{dir}/snapshots/abc/model.safetensors'",
            "RuntimeError: cannot load '/cache/models--{dir}/snapshots/def/model.safetensors'",
        ),
    ],
)
def test_the_same_bug_in_two_models_has_one_cause(first: str, second: str) -> None:
    rows = [
        _row(model, error=text.format(model=model, dir=model.replace("/", "--")))
        for model, text in (("org/llama-3-8b", first), ("other/qwen2-0.5b", second))
    ]
    groups = group_failures(rows)
    assert len(groups) == 1, [g.cause.text for g in groups]
    assert [m.model_id for m in groups[0].models] == ["org/llama-3-8b", "other/qwen2-0.5b"]
    assert "<" in groups[0].cause.place  # something was normalised


def test_normalising_keeps_what_names_the_bug() -> None:
    text = "float32 conv2d of 3 channels in bf16 at cuda:0 for zoo:llama (llama, llamas)"
    assert normalise_message(text, "zoo:llama") == (
        "float32 conv2d of <n> channels in bf16 at cuda:<n> for <model> (<model>, llamas)"
    )
    assert normalise_message("TypeError: x\nsecond line") == "TypeError: x"
    assert normalise_message("a  b\tc", "") == "a b c"
    assert len(normalise_message("x" * 500)) == 200
    different = group_failures(
        [_row("a/one", error="KeyError: 'q_proj'"), _row("b/two", error="KeyError: 'k_proj'")]
    )
    assert [g.cause.place for g in different] == ["'k_proj'", "'q_proj'"]  # by cause text


def test_groups_most_models_first_with_the_smallest_repro() -> None:
    linear = {"error": LINEAR_ERROR, "error_site": LINEAR_SITE}
    rows = [
        _row(
            "zoo:gpt2",
            **linear,
            repro_py="# gpt2\n",
            repro_ops=["torch._C._nn.linear"] * 3,
            repro_ops_after=3,
        ),
        _row(
            "zoo:llama",
            **linear,
            repro_py="# llama\n",
            repro_ops=["torch._C._nn.linear"],
            repro_ops_after=1,
        ),
        _row("zoo:bert", **linear),  # the minifier ran out of time: joins the op's group
        _row("zoo:t5", result="FAIL(other)", error="killed by SIGSEGV during gen"),
        _row("zoo:vit", result="FAIL(other)", error="killed by SIGSEGV during gen"),
        _row("zoo:clip", result="FAIL(forward)", error="ZeroDivisionError: division by zero"),
        _row("zoo:ok", result="PASS", error=None),
        _row("zoo:big", result="EXCLUDED", error="too large"),
    ]
    groups = group_failures(rows)
    assert [(len(g.models), g.cause.text) for g in groups] == [
        (3, f"NotImplementedError at op torch._C._nn.linear (through {LINEAR_CONTEXT})"),
        (2, "killed by SIGSEGV during gen"),
        (1, "ZeroDivisionError: division by zero"),
    ]
    assert [m.model_id for m in groups[0].models] == ["zoo:bert", "zoo:gpt2", "zoo:llama"]
    assert [m.result for m in groups[1].models] == ["FAIL(other)", "FAIL(other)"]
    repro = groups[0].repro
    assert repro is not None and (repro.model_id, repro.ops, repro.path) == ("zoo:llama", 1, None)
    assert groups[1].repro is None and groups[2].repro is None
    json.dumps([g.as_json() for g in groups])  # plain data


def test_two_ops_at_one_site_are_not_merged() -> None:
    rows = [
        _row("a/x", error=LINEAR_ERROR, error_site=LINEAR_SITE, repro_py="#", repro_ops=["op.a"]),
        _row("b/x", error=LINEAR_ERROR, error_site=LINEAR_SITE, repro_py="#", repro_ops=["op.b"]),
        _row("c/x", error=LINEAR_ERROR, error_site=LINEAR_SITE),
    ]
    assert sorted(g.cause.where + " " + g.cause.place for g in group_failures(rows)) == [
        "op op.a",
        "op op.b",
        f"site {LINEAR_SITE}",
    ]


OLD, NEW = "inductor-2.9.0/transformers-5.24.0", "inductor-2.13.0/transformers-5.24.0"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two pairs (2.13.0 newer than 2.9.0, though not in text order); the newer breaks three
    models on linear (two with a repro, one written to disk) and one otherwise."""
    linear: dict[str, Any] = {
        "error": LINEAR_ERROR,
        "notes": LINEAR_ERROR.split("\n")[0],  # as the plugin records it
        "error_site": LINEAR_SITE,
        "compiler_version": "2.13.0",
    }
    rows = [
        result_row(
            "zoo:llama",
            "FAIL(gen)",
            **linear,
            repro_py="# llama repro\n",
            repro_ops_before=80,
            repro_ops_after=2,
            repro_ops=["Tensor.view", "torch._C._nn.linear"],
        ),
        result_row(
            "zoo:gpt2",
            "FAIL(forward)",
            **linear,
            repro_py="# gpt2 repro\n",
            repro_ops_after=1,
            repro_ops=["torch._C._nn.linear"],
        ),
        result_row("zoo:bert", "FAIL(gen)", **linear),
        result_row(
            "zoo:t5",
            "FAIL(other)",
            compiler_version="2.13.0",
            error="killed by SIGKILL during gen (out of memory?)",
        ),
        result_row("zoo:vit", "EXCLUDED", compiler_version="2.13.0", error=None),
        result_row("zoo:clip", compiler_version="2.13.0"),
        result_row("zoo:llama", compiler_version="2.9.0"),
        result_row("zoo:t5", "FAIL(load)", compiler_version="2.9.0"),
    ]
    path = write_results(tmp_path / "results", rows)
    repro = run_dir(path, pair_of(rows[1]), "zoo:gpt2") / "repro.py"
    repro.parent.mkdir(parents=True)
    repro.write_text("# gpt2 repro\n", encoding="utf-8")
    return path


def test_the_newest_pair_by_version(results: Path) -> None:
    assert newest_pair(results) == NEW + ".parquet"
    pair, groups = pair_failures(results, OLD)
    assert pair == OLD + ".parquet"
    assert [(g.cause.text, [m.model_id for m in g.models]) for g in groups] == [
        ("RuntimeError: <model> broke", ["zoo:t5"])
    ]


def test_failures_command_text(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["failures", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    repro = run_dir(results, NEW + ".parquet", "zoo:gpt2") / "repro.py"
    assert out.splitlines() == [
        f"4 failed model(s) of {NEW} in 2 group(s), most models first",
        "",
        f"3 models  NotImplementedError at op torch._C._nn.linear (through {LINEAR_CONTEXT})",
        "    zoo:bert   FAIL(gen)",
        "    zoo:gpt2   FAIL(forward)",
        "    zoo:llama  FAIL(gen)",
        f"  repro: {repro}  (zoo:gpt2, 1 op)",
        "",
        "1 model  killed by SIGKILL during gen",
        "    zoo:t5  FAIL(other)",
        f"  {NO_REPRO}",
    ]
    repro.unlink()  # the row still holds it
    assert main(["failures", "--results", str(results), "--pair", "data/" + NEW]) == 0
    assert "  repro: in the row of zoo:gpt2 (repro_py, 1 op); no repro.py here" in (
        capsys.readouterr().out.splitlines()
    )


def test_failures_command_json(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["failures", "--results", str(results), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert [(g["count"], g["where"], g["place"]) for g in groups] == [
        (3, "op", "torch._C._nn.linear"),
        (1, "phase", "gen"),
    ]
    first = groups[0]
    assert first["key"] == "NotImplementedError|op|torch._C._nn.linear"
    assert first["context"] == LINEAR_CONTEXT
    assert first["models"][1] == {
        "model_id": "zoo:gpt2",
        "result": "FAIL(forward)",
        "notes": "BackendCompilerFailed: backend='fails_on_linear_backend_for_tests' raised:",
        "broke_in": "",  # not bisected
        "release": "",
    }
    assert first["repro"] == {
        "model_id": "zoo:gpt2",
        "ops": 1,
        "path": str(run_dir(results, NEW + ".parquet", "zoo:gpt2") / "repro.py"),
    }
    assert groups[1]["repro"] is None


def test_failures_command_refuses_what_it_cannot_answer(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "--results", str(results), "--pair", "inductor-9.9"]) == 2
    err = capsys.readouterr().err
    assert "no pair 'inductor-9.9'" in err and f"pairs there: {NEW}, {OLD}" in err
    (tmp_path / "empty" / "data").mkdir(parents=True)
    assert main(["failures", "--results", str(tmp_path / "empty")]) == 2
    assert "no pair in" in capsys.readouterr().err
    passing = write_results(tmp_path / "passing", [result_row("zoo:llama")])
    assert main(["failures", "--results", str(passing)]) == 0
    assert capsys.readouterr().out == "no failures in inductor-2.13.0/transformers-5.24.0\n"
