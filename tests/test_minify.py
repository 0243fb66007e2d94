"""The minimal reproducer: graphs recorded from a compiled run, shrunk by PyTorch's minifier, and
written as a standalone repro.py that fails the same way, with test backends that fail on one op
(tests/backends_for_tests.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_neuronsupport.runners.lib import minify as minify_module
from pytest_neuronsupport.runners.lib.minify import (
    GraphRecorder,
    backend_spelling,
    minified,
    minify,
    output_mismatch,
    repro_reproduces,
)
from pytest_neuronsupport.runners.lib.models import RunFailure, step
from pytest_neuronsupport.runners.lib.protocol import Result
from tests.backends_for_tests import (
    corrupts_silu_backend_for_tests,
    fails_on_linear_backend_for_tests,
    raising_at_run_time_backend_for_tests,
)

ROOT = Path(__file__).resolve().parents[1]  # where tests.backends_for_tests is importable
FAILS_ON_LINEAR = "tests.backends_for_tests:fails_on_linear_backend_for_tests"


class SmallModelForTests(torch.nn.Module):
    """A dozen ops: two linears, a silu, a static cache written in place."""

    cache: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
        self.register_buffer("cache", torch.zeros(2, 8))

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> Any:
        x = x * 2 + 1
        h = torch.nn.functional.silu(self.up(x)) * 2
        y = self.down(h).relu().softmax(-1)
        self.cache.index_copy_(0, index, y[:1])
        return y + self.cache.sum()


@pytest.fixture(autouse=True)
def dynamo_reset() -> Iterator[None]:
    """Each test compiles from scratch, and leaves no compiled code behind."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_run(backend: Any, dynamic: bool | None = None) -> None:
    """The small model compiled with ``backend`` and run once, as a run's forward would be."""
    model = torch.compile(SmallModelForTests(), backend=backend, fullgraph=True, dynamic=dynamic)
    with torch.no_grad():
        model(torch.randn(3, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([1]))


@pytest.fixture(scope="module")
def repros() -> dict[str, dict[str, Any]]:
    """minify's findings for the small model under each test backend: the error (the run's
    exception text under ``"raised"``) and the output mismatch."""
    recorder = GraphRecorder(fails_on_linear_backend_for_tests)
    with pytest.raises(Exception, match="no lowering for linear") as raised:
        compiled_run(recorder)
    assert recorder.failed is not None and recorder.failed[0] == 0
    assert type(raised.value).__name__ == "BackendCompilerFailed"  # dynamo's wrapper
    run_error = f"BackendCompilerFailed: {raised.value}"
    error = minify(recorder, "error", "float32", error=run_error, model="small")
    recorder = GraphRecorder(corrupts_silu_backend_for_tests)
    compiled_run(recorder)  # runs: the numbers are wrong
    output = minify(recorder, "output", "float32", model="small")
    return {"error": error, "output": output}


def test_a_backend_failing_on_one_op_gives_a_repro_of_that_op(
    repros: dict[str, dict[str, Any]],
) -> None:
    found = repros["error"]
    assert found["repro_ops_before"] == 12
    assert found["repro_ops"] == ["torch._C._nn.linear"] and found["repro_ops_after"] == 1
    raised = "NotImplementedError: test backend: no lowering for linear"
    assert found["repro_note"] == f"graph 1 of 1 minified from 12 ops to 1: {raised}"
    text = found["repro_py"]
    assert f"BACKEND = {FAILS_ON_LINEAR!r}" in text
    assert f"# reproduces: {json.dumps(raised)}" in text
    honest = text.replace(f"BACKEND = {FAILS_ON_LINEAR!r}", "BACKEND = 'eager'")
    assert honest != text and not repro_reproduces(honest, "NotImplementedError")


def test_a_backend_corrupting_one_op_gives_a_repro_that_shows_the_mismatch(
    repros: dict[str, dict[str, Any]],
) -> None:
    found = repros["output"]
    assert found["repro_ops"] == ["torch.nn.functional.silu"]
    assert "compiled differs from eager by" in found["repro_note"]
    backend = "BACKEND = 'tests.backends_for_tests:corrupts_silu_backend_for_tests'"
    honest = found["repro_py"].replace(backend, "BACKEND = 'aot_eager'")
    assert honest != found["repro_py"] and not repro_reproduces(honest, "AssertionError")


def test_each_repro_py_alone_fails_as_the_run_did(
    repros: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """``python3 repro.py`` (both at once: each imports torch and compiles, seconds)."""
    running = {}
    for kind in ("error", "output"):
        (tmp_path / kind).mkdir()
        script = tmp_path / kind / "repro.py"
        script.write_text(repros[kind]["repro_py"])
        running[kind] = subprocess.Popen(
            [sys.executable, str(script)], cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
    errors = {kind: process.communicate(timeout=300)[1] for kind, process in running.items()}
    assert running["error"].returncode == 1, errors["error"][-2000:]
    assert "NotImplementedError: test backend: no lowering for linear" in errors["error"]
    assert running["output"].returncode == 1, errors["output"][-2000:]
    last = errors["output"].splitlines()[-1]
    assert last.startswith("AssertionError: output 0: compiled differs from eager by")
    assert "tolerance" in last
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "error",
        "output",
        "repro.py",
        "repro.py",
    ]


def test_a_graph_with_dynamic_sizes_is_minified_with_the_sizes_it_ran_with() -> None:
    recorder = GraphRecorder(corrupts_silu_backend_for_tests)
    compiled_run(recorder, dynamic=True)
    assert any(type(x) is int for x in recorder.graphs[0][1])  # the size dynamo made a symbol
    found = minify(recorder, "output", "float32")
    assert found["repro_ops"] == ["torch.nn.functional.silu"]
    assert "did not reproduce" not in found["repro_note"]  # repro.py was run here, and failed


def test_inputs_too_large_to_embed_are_made_up_in_repro_py(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(minify_module, "REPRO_EMBED_BYTES", 0)
    recorder = GraphRecorder(fails_on_linear_backend_for_tests)
    with pytest.raises(Exception, match="no lowering for linear"):
        compiled_run(recorder)
    found = minify(recorder, "error", "float32")
    assert "\n# 3 input(s) too large to embed are made up\n" in found["repro_py"]
    assert "did not reproduce" not in found["repro_note"]  # repro.py was run here, and failed


def test_a_graph_that_raises_when_it_runs_is_the_one_minified() -> None:
    recorder = GraphRecorder(raising_at_run_time_backend_for_tests)
    with pytest.raises(RuntimeError, match="failed at run time"):
        compiled_run(recorder)
    assert recorder.failed is not None and isinstance(recorder.failed[1], RuntimeError)
    found = minify(recorder, "error", "float32")
    assert found["repro_ops_after"] <= 1  # any graph raises: nothing of it is needed
    assert found["repro_note"].startswith("graph 1 of 1 minified from 12 ops to ")


def test_the_recorder_clones_inputs_but_keeps_parameters_and_compiles_with_the_backend() -> None:
    recorder = GraphRecorder("eager")
    compiled_run(recorder)
    assert recorder.name == "eager" and len(recorder.graphs) == 1
    _, inputs, grad = recorder.graphs[0]
    assert grad is False
    parameters = [x for x in inputs if isinstance(x, torch.nn.Parameter)]
    assert len(parameters) == 4  # the model's own, by reference
    cache = next(x for x in inputs if x.shape == (2, 8))
    assert not cache.any()  # cloned before the graph wrote into the cache
    assert recorder.failed is None
    found = minify(recorder, "output", "float32")
    assert found == {
        "repro_note": "no repro: none of the 1 recorded graphs differs from eager alone"
    }


def test_a_backend_is_named_for_repro_py_by_its_import_path() -> None:
    assert backend_spelling("inductor") == "inductor"
    assert backend_spelling(fails_on_linear_backend_for_tests) == FAILS_ON_LINEAR
    assert backend_spelling(lambda gm, inputs: gm.forward) is None
    assert GraphRecorder(fails_on_linear_backend_for_tests, "mine:backend").name == "mine:backend"


def test_the_output_rule_scales_a_few_eps_of_the_dtype_by_the_largest_value() -> None:
    eager = (torch.tensor([1.0, -100.0]), torch.tensor([3]), None)
    near = (torch.tensor([1.0 + 1e-3, -100.0]), torch.tensor([3]), None)
    assert output_mismatch(eager, eager, "float32") is None
    assert output_mismatch(eager, near, "bfloat16") is None  # 32 * 2**-7 * 100
    problem = output_mismatch(eager, near, "float32")
    assert problem is not None and problem.startswith("output 0: compiled differs from eager by")
    assert "32 eps of float32 x max|eager| 100" in problem
    wrong = (torch.tensor([1.0, float("nan")]), torch.tensor([3]), None)
    assert "NaN" in str(output_mismatch(eager, wrong, "bfloat16"))
    other = (eager[0], torch.tensor([4]), None)
    assert (
        output_mismatch(eager, other, "float32") == "output 1: compiled integers differ from eager"
    )
    assert "shape" in str(output_mismatch(eager, (eager[0][:1], *eager[1:]), "float32"))


# --- minified(run): a runner entry wrapped ------------------------------------------------------


def params_for_tests(backend: Any) -> dict[str, Any]:
    return {"model_id": "zoo:small", "backend": backend, "dtype": "float32", "fullgraph": True}


def failing_entry_for_tests(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """A runner entry that compiles with the run's backend; what raises fails the run."""
    with step("gen", Result.FAIL_GEN):
        compiled_run(params["backend"])
    return {"result": Result.PASS}


def test_minified_turns_a_failed_run_into_its_verdict_with_a_repro() -> None:
    # the backend as run.py has it after imported_backend(PARAMS): a callable
    verdict = minified(failing_entry_for_tests)(
        params_for_tests(fails_on_linear_backend_for_tests), None
    )
    assert verdict["result"] == Result.FAIL_GEN
    assert verdict["error"].startswith("BackendCompilerFailed: backend=")
    assert "NotImplementedError: test backend: no lowering for linear" in verdict["error"]
    assert verdict["repro_ops"] == ["torch._C._nn.linear"]
    assert f"BACKEND = {FAILS_ON_LINEAR!r}" in verdict["repro_py"]
    assert '# model: "zoo:small"' in verdict["repro_py"]


def test_a_run_that_does_not_fail_is_returned_untouched_without_minifying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_minify(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("minify must not run")

    monkeypatch.setattr(minify_module, "minify", no_minify)
    verdict = minified(failing_entry_for_tests)(params_for_tests("eager"), None)
    assert verdict == {"result": Result.PASS}

    def failing_to_load(params: dict[str, Any], ops: Any) -> Any:
        raise RunFailure(Result.FAIL_LOAD, OSError("no checkpoint"))

    with pytest.raises(RunFailure):  # not the compiler's: the entry classifies it as before
        minified(failing_to_load)(params_for_tests("eager"), None)


def test_a_failure_no_graph_reproduces_is_said_and_the_verdict_kept() -> None:
    def failing_after_compiling(params: dict[str, Any], ops: Any) -> Any:
        with step("forward", Result.FAIL_FORWARD):
            compiled_run(params["backend"])
            raise ValueError("the model's own check failed")

    verdict = minified(failing_after_compiling)(params_for_tests("eager"), None)
    assert verdict == {
        "result": Result.FAIL_FORWARD,
        "error": "ValueError: the model's own check failed",
        "repro_note": "no repro: none of the 1 recorded graphs raises ValueError alone",
    }


def test_minified_renders_into_run_py_beside_every_other_entry() -> None:
    from pytest_neuronsupport.pipeline.runcode import INTERNAL, Selection

    script = Selection((INTERNAL,))
    script.add(f"{INTERNAL}.runners.dense", "run")
    script.add(f"{INTERNAL}.runners.lib.entry", "main")
    script.add(f"{INTERNAL}.runners.lib.device_ops", "CpuOps")
    script.add(f"{INTERNAL}.runners.lib.judge", "judged")
    script.add(f"{INTERNAL}.runners.lib.backend", "imported_backend")
    script.add(f"{INTERNAL}.runners.lib.minify", "minified")  # no name is defined twice
    names = {d.name for d in [*script.constants, *script.code]}
    assert {"minified", "GraphRecorder", "minify", "output_mismatch", "REPRO_TEMPLATE"} <= names


@pytest.mark.slow
def test_zoo_llama_under_a_backend_failing_on_linear_or_corrupting_silu_gets_a_tiny_repro(
    zoo_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dense runner in this process, as run.py runs it with --neuron-minify (seconds)."""
    from pytest_neuronsupport import zoo
    from pytest_neuronsupport.runners.dense import run
    from pytest_neuronsupport.runners.lib.device_ops import CpuOps
    from pytest_neuronsupport.runners.lib.entry import attempt

    monkeypatch.delenv("NEURONSUPPORT_REFERENCE", raising=False)
    params = {
        "model_id": "zoo:llama",
        "checkpoint": str(zoo.ensure_built("llama", zoo_cache)),
        "runner": "dense",
        "device": "cpu",
        "dtype": "float32",
        "fullgraph": True,
        "cores": 1,
        "revision": None,
    }
    failing = {**params, "backend": fails_on_linear_backend_for_tests}
    verdict = attempt(failing, minified(run), CpuOps)
    assert verdict["result"] == Result.FAIL_GEN
    assert verdict["repro_ops"] == ["torch._C._nn.linear"]
    assert verdict["repro_ops_before"] > 100
    assert verdict["repro_note"].startswith("graph 1 of 1 minified from ")
    assert verdict["repro_note"].endswith(
        " to 1: NotImplementedError: test backend: no lowering for linear"
    )
    corrupting = {**params, "backend": corrupts_silu_backend_for_tests}
    verdict = attempt(corrupting, minified(run), CpuOps)
    assert verdict["result"] == Result.FAIL_OUTPUT and verdict["cpu_match"].startswith("N ")
    assert verdict["repro_ops"] == ["torch.nn.functional.silu"]
    assert "did not reproduce" not in verdict["repro_note"]


def test_the_pipeline_keeps_the_verdict_whatever_the_minify_run_came_to(tmp_path: Path) -> None:
    from pytest_neuronsupport.pipeline import minify as step
    from pytest_neuronsupport.pipeline.isolate import Outcome

    fields = {"result": "FAIL(gen)", "notes": "NotImplementedError: x", "check": None}
    assert step.wanted(fields, 1) and not step.wanted(fields, 2)
    assert not step.wanted({"result": "FAIL(load)"}, 1)

    def outcome(verdict: dict[str, Any] | None, **kw: Any) -> Outcome:
        return Outcome(0, False, 1.0, verdict, "", timeout_s=30, **kw)

    found = {"result": "FAIL(gen)", "repro_py": "raise SystemExit(1)\n", "repro_ops_before": 9}
    found |= {"repro_ops_after": 1, "repro_ops": ["torch.relu"], "repro_note": "graph 1 of 1"}
    done = step.with_repro(fields, outcome(found), tmp_path)
    assert (tmp_path / "repro.py").read_text() == found["repro_py"]
    assert done["repro_ops"] == ["torch.relu"] and done["repro_ops_after"] == 1
    assert (done["result"], done["notes"]) == (fields["result"], fields["notes"])
    assert json.loads(done["check"]) == {"minify": "graph 1 of 1"}

    late = Outcome(None, True, 30.0, None, "", timeout_s=30)
    slow = step.with_repro(fields, late, tmp_path / "none")
    assert slow["notes"] == "NotImplementedError: x [the minifier did not finish in 30 s]"
    assert slow["result"] == "FAIL(gen)" and "repro_py" not in slow
    assert json.loads(slow["check"])["minify"] == "the minifier did not finish in 30 s"

    died = step.with_repro(fields, Outcome(-9, False, 2.0, None, "", timeout_s=30), tmp_path)
    assert json.loads(died["check"])["minify"].startswith("the minifier's run ended without")
    assert died["notes"] == fields["notes"]
