"""Every runner through the plugin: seq2seq, multimodal, expert-parallel, several cores with
torch.distributed ranks (gloo on the CPU), chunked prefill, and the English judge."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from tests.judges_for_tests import judge_double
from tests.sweeping import SweepRunner

#: Real sweeps of real (tiny) models in subprocesses: seconds to minutes each.
pytestmark = pytest.mark.slow

BACKENDS = "backends_for_tests"
MISBEHAVING = f"{BACKENDS}:misbehaving_by_model_backend_for_tests"
PERTURBING = f"{BACKENDS}:perturbing_backend_for_tests"


def test_seq2seq_multimodal_and_expert_parallel_runners_pass_against_the_cpu(
    sweep: SweepRunner,
) -> None:
    done = sweep.run("zoo:t5", "zoo:bart", "zoo:llava", {"id": "zoo:mixtral", "runner": "dense_ep"})
    done.result.assert_outcomes(passed=4)
    runners = {m: r["runner"] for m, r in done.rows.items()}
    assert runners == {
        "zoo:t5": "run_seq2seq",
        "zoo:bart": "run_seq2seq",
        "zoo:llava": "run_multimodal",
        "zoo:mixtral": "run_dense_ep",
    }
    for row in done.rows.values():
        assert row["cpu_match"] == "Y" and row["neuron_cores"] == 1
        assert len(json.loads(row["check"])["tokens"]) == 32


def test_a_perturbed_compiler_fails_the_output_of_every_generating_runner(
    sweep: SweepRunner,
) -> None:
    models: list[str | dict[str, str]] = [
        "zoo:t5",
        "zoo:llava",
        {"id": "zoo:mixtral", "runner": "dense_ep"},
    ]
    done = sweep.run(*models, backend=PERTURBING)
    done.result.assert_outcomes(failed=3)
    for row in done.rows.values():
        assert row["result"] == "FAIL(output)", row["model_id"]
        assert row["cpu_match"].startswith("N at token "), row["cpu_match"]


def test_chunked_prefill_generates_the_cpus_tokens(sweep: SweepRunner) -> None:
    done = sweep.run("zoo:qwen3", args=["--neuron-prefill-chunk", "3"])
    row = done.row("zoo:qwen3")
    assert row["result"] == "PASS" and row["cpu_match"] == "Y"
    assert "'prefill_chunk': 3" in row["run_py"]


def test_a_decoder_is_sharded_over_two_ranks(sweep: SweepRunner) -> None:
    done = sweep.run({"id": "zoo:llama-2core", "cores": 2}, args=["--neuron-judge", "none"])
    done.result.assert_outcomes(passed=1)
    row = done.row("zoo:llama-2core")
    assert row["neuron_cores"] == 2 and row["runner"] == "run_dense"
    check = json.loads(row["check"])
    assert check["cpu_comparison"] == "the run used 2 cores"
    assert check["judge"] == "none configured: the output check could not run"
    assert row["english"] is None and row["cpu_match"] is None
    # one rank per core, and the same tokens as one process on the CPU
    single = sweep.run({"id": "zoo:llama-2core", "cores": 1}, args=["--neuron-rerun"])
    assert json.loads(single.row("zoo:llama-2core")["check"])["tokens"] == check["tokens"]


def test_the_2core_decoder_is_sized_to_two_cores_by_a_small_budget(sweep: SweepRunner) -> None:
    # its bf16 weights are 8.9 MB: with 5 MB a core it needs 2 cores
    done = sweep.run("zoo:llama-2core", args=["--neuron-core-memory", "0.005"])
    assert done.row("zoo:llama-2core")["neuron_cores"] == 2
    # an encoder runs on one core: too large for one, it is excluded, not sharded
    enc = sweep.run("zoo:bert", args=["--neuron-core-memory", "0.0001"])
    bert = enc.row("zoo:bert")
    assert bert["exclusion"] == "too-large" and "runs on one core" in bert["notes"]


def run_processes_of(script: Path) -> list[int]:
    """Processes still running this script (a run or one of its ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(script) in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(
    ("how", "timeout", "notes"),
    [
        # the crash ends the run long before the timeout, however busy the machine
        ("segfault", 900, "rank 1 of 2 was killed by SIGSEGV"),
        # ranks reach the hang in seconds when idle: 60 s leaves a wide margin under load
        ("hang", 60, "timed out after 60 s during gen"),
    ],
)
def test_a_rank_that_crashes_or_hangs_is_fail_other_and_leaves_no_process(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch, how: str, timeout: int, notes: str
) -> None:
    monkeypatch.setenv("NEURONSUPPORT_TEST_MISBEHAVIOUR", f"zoo:llama-2core@1={how}")
    done = sweep.run(
        {"id": "zoo:llama-2core", "cores": 2},
        backend=MISBEHAVING,
        args=["--neuron-timeout", str(timeout)],
    )
    done.result.assert_outcomes(failed=1)
    row = done.row("zoo:llama-2core")
    assert row["result"] == "FAIL(other)"
    assert row["notes"] == notes
    assert "test-only backend: about to" in row["error"]  # the ranks' output tail is kept
    script = next((sweep.results / "runs").glob("*/*/zoo--llama-2core/run.py"))
    deadline = time.monotonic() + 120  # killed at once; reaped in seconds even when busy
    while run_processes_of(script) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_processes_of(script) == []


def test_a_rank_that_raises_reports_its_phase(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = sweep.run(
        {"id": "zoo:llama-2core", "cores": 2},
        backend=f"{BACKENDS}:raising_at_run_time_backend_for_tests",
    )
    row = done.row("zoo:llama-2core")
    assert row["result"] == "FAIL(gen)"
    assert "test-only backend" in row["error"]


@pytest.mark.parametrize(
    ("answer", "english", "result"), [("Yes", "Y", "PASS"), ("No", "N", "FAIL(output)")]
)
def test_several_cores_are_judged_by_the_english_judge(
    sweep: SweepRunner, answer: str, english: str, result: str
) -> None:
    judge = judge_double(zoo.ensure_built("gpt2", sweep.cache), sweep.pytester.path, answer)
    done = sweep.run({"id": "zoo:llama-2core", "cores": 2}, args=["--neuron-judge", str(judge)])
    row = done.row("zoo:llama-2core")
    assert (row["english"], row["result"]) == (english, result)
    decision = json.loads(row["check"])["judge"]
    assert decision["english"] == english
    assert decision["prompt"].startswith("Is the following text fluent English?")
    assert "next-token logit for 'Yes'" in decision["rule"]
    assert (decision["yes_logit"] > decision["no_logit"]) is (english == "Y")
    assert str(judge) in row["run_py"]  # the judge is part of the test


def test_a_zoo_model_can_judge_and_its_word_is_the_verdict(sweep: SweepRunner) -> None:
    done = sweep.run({"id": "zoo:llama-2core", "cores": 2}, args=["--neuron-judge", "zoo:qwen3"])
    row = done.row("zoo:llama-2core")
    assert row["english"] in ("Y", "N")
    assert row["result"] == ("PASS" if row["english"] == "Y" else "FAIL(output)")


def test_a_several_core_run_py_alone_gives_the_same_verdict(
    sweep: SweepRunner, tmp_path: Path
) -> None:
    done = sweep.run({"id": "zoo:mixtral", "runner": "dense_ep", "cores": 2})
    row = done.row("zoo:mixtral")
    assert row["result"] == "PASS" and row["neuron_cores"] == 2
    params = next(
        ast.literal_eval(node.value)
        for node in ast.parse(row["run_py"]).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PARAMS"
    )
    assert params["cores"] == 2 and params["runner"] == "dense_ep"
    (tmp_path / "run.py").write_text(row["run_py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURONSUPPORT_")}
    proc = subprocess.run(
        [sys.executable, "run.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("[neuronsupport] verdict:"))
    verdict = json.loads(line.split(" ", 2)[2])
    assert verdict["result"] == row["result"]
    assert verdict["tokens"] == json.loads(row["check"])["tokens"]


def test_a_cpu_reference_that_is_not_reproducible_is_said_and_not_trusted(
    zoo_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process run of the generation runner with a test double for a nondeterministic
    model: its logits get fresh random noise on every call, so the CPU's two runs differ."""
    import torch
    import transformers

    from pytest_neuronsupport.runners.lib.device_ops import CpuOps
    from pytest_neuronsupport.runners.lib.generation import PROMPT, Generation, generate_and_check
    from pytest_neuronsupport.runners.lib.models import load_tokenizer, user_message

    class NondeterministicLlamaForTests(transformers.LlamaForCausalLM):  # type: ignore[no-untyped-call]
        def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            out = super().forward(*args, **kwargs)
            out.logits = out.logits + 100 * torch.randn_like(out.logits)
            return out

    monkeypatch.delenv("NEURONSUPPORT_REFERENCE", raising=False)
    params = {
        "model_id": "zoo:llama",
        "checkpoint": str(zoo.ensure_built("llama", zoo_cache)),
        "runner": "dense",
        "device": "cpu",
        "backend": "eager",
        "dtype": "float32",
        "fullgraph": False,
        "cores": 1,
        "revision": None,
    }
    tokenizer = load_tokenizer(params)
    gen = Generation(
        model_class=NondeterministicLlamaForTests,
        inputs=user_message(tokenizer, PROMPT),
        tokenizer=tokenizer,
    )
    verdict = generate_and_check(params, CpuOps(), gen)
    assert verdict["reference_reproducible"] is False
    assert verdict["result"] == "PASS"  # the check could not run: the model ran
    assert "cpu_match" not in verdict
    assert verdict["check"]["cpu_comparison"] == "the CPU reference is not reproducible"
