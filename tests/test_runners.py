"""Every runner through the plugin: seq2seq, multimodal, expert-parallel, several cores with
torch.distributed ranks (gloo on the CPU), chunked prefill, and the English judge.

Some tests read sweeps shared with other files (tests/shared_sweeps.py): the sweeps of ranks
that crash or hang are among ``timeouts``, started in the background with the ``support``
group's first sweep and read last, so that the hang's wait for its timeout overlaps the suite's
work."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.devices import CpuDevice
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV
from tests.judges_for_tests import judge_double
from tests.shared_sweeps import (
    PERTURBED,
    PERTURBED_RUNNERS,
    RAISING,
    RANK_FAULTS,
    SUPPORT,
    TWO_CORE_LLAMA,
    WAITING,
)
from tests.sweeping import SharedSweep, Sweep, SweepRunner

#: Real sweeps of real (tiny) models in subprocesses: seconds to minutes each.
pytestmark = pytest.mark.slow


@SUPPORT
def test_seq2seq_multimodal_and_expert_parallel_runners_pass_against_the_cpu(
    tiny_sweep: Sweep, plain_sweep: Sweep
) -> None:
    """t5, bart and llava as the tiny list has them; mixtral's experts on one core."""
    done = {m: (tiny_sweep, tiny_sweep.row(m)) for m in ("zoo:t5", "zoo:bart", "zoo:llava")}
    done["zoo:mixtral"] = (plain_sweep, plain_sweep.row("zoo:mixtral"))
    assert [swept.outcome(m) for m, (swept, _) in done.items()] == ["passed"] * 4
    runners = {m: row["runner"] for m, (_, row) in done.items()}
    assert runners == {
        "zoo:t5": "run_seq2seq",
        "zoo:bart": "run_seq2seq",
        "zoo:llava": "run_multimodal",
        "zoo:mixtral": "run_dense_ep",
    }
    for _, row in done.values():
        assert row["cpu_match"] == "Y" and row["neuron_cores"] == 1
        assert len(json.loads(row["check"])["tokens"]) == 32


@PERTURBED
def test_a_perturbed_compiler_fails_the_output_of_every_generating_runner(
    perturbed_sweep: Sweep,
) -> None:
    done = perturbed_sweep  # t5, llava, mixtral (experts, one core); and see test_sweep
    models = [m if isinstance(m, str) else m["id"] for m in PERTURBED_RUNNERS]
    assert [done.outcome(m) for m in models] == ["failed"] * 3
    for row in map(done.row, models):
        assert row["result"] == "FAIL(output)", row["model_id"]
        # "N at token i: ..." where the tokens differ, "N scores at tokens 0-k: ..." where the
        # scores are beyond the tolerance before any token does
        assert re.match(r"N (scores )?at tokens? \d", row["cpu_match"]), row["cpu_match"]


def test_chunked_prefill_generates_the_cpus_tokens(sweep: SweepRunner) -> None:
    done = sweep.run("zoo:qwen3", args=["--neuron-prefill-chunk", "3"])
    row = done.row("zoo:qwen3")
    assert row["result"] == "PASS" and row["cpu_match"] == "Y"
    assert "'prefill_chunk': 3" in row["run_py"]


@TWO_CORE_LLAMA
def test_a_decoder_is_sharded_over_two_ranks(two_core_llama: tuple[Sweep, Sweep]) -> None:
    done, single = two_core_llama
    assert done.outcome("zoo:llama-2core") == "passed"
    row = done.row("zoo:llama-2core")
    assert row["neuron_cores"] == 2 and row["runner"] == "run_dense"
    check = json.loads(row["check"])
    # this host holds the model in fp32: rank 0 holds the tokens against the CPU's
    assert "'cpu_reference': True" in row["run_py"]
    assert (row["cpu_match"], row["checked_by"], row["english"]) == ("Y", "cpu", None)
    assert check["rule"] == "tokens" and check["reference_tokens"] == check["tokens"]
    # one rank per core, and the same tokens as one process on the CPU
    assert json.loads(single.row("zoo:llama-2core")["check"])["tokens"] == check["tokens"]


@TWO_CORE_LLAMA
def test_the_2core_decoder_is_sized_to_two_cores_by_a_small_budget(
    two_core_llama: tuple[Sweep, Sweep],
) -> None:
    # its bf16 weights are 8.9 MB: with 5 MB a core it needs 2 cores (its list entry has none)
    done, _ = two_core_llama
    assert done.row("zoo:llama-2core")["neuron_cores"] == 2
    # (that an encoder too large for one core is excluded, not sharded: test_resilience's
    # test_a_model_is_sized_by_its_weights_and_excluded_above_the_cap)


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


@RAISING
def test_a_rank_that_raises_reports_its_phase(
    failing_backend_sweep: Callable[[str], Sweep],
) -> None:
    done = failing_backend_sweep("raising_at_run_time_backend_for_tests")  # see test_sweep
    row = done.row("zoo:llama-2core")
    assert row["result"] == "FAIL(gen)"
    assert "test-only backend" in row["error"]


CPU_RUN_FAILS = "backends_for_tests:cpu_run_fails_backend_for_tests"


def test_several_cores_are_judged_by_the_english_judge(sweep: SweepRunner) -> None:
    """Rank 0's CPU reference cannot load (a test double): the judge in run.py decides."""
    judge = judge_double(zoo.ensure_built("gpt2", sweep.cache), sweep.path, "Yes")
    done = sweep.run(
        {"id": "zoo:llama-2core", "cores": 2},
        backend=CPU_RUN_FAILS,
        args=["--neuron-judge", str(judge)],
    )
    row = done.row("zoo:llama-2core")
    assert (row["english"], row["result"], row["checked_by"]) == ("Y", "PASS", "judge")
    assert json.loads(row["check"])["cpu_comparison"].startswith("the CPU run failed: Memory")
    decision = json.loads(row["check"])["judge"]
    assert decision["english"] == "Y"
    assert decision["prompt"].startswith("Is the following text fluent English?")
    assert "next-token logit for 'Yes'" in decision["rule"]
    assert decision["yes_logit"] > decision["no_logit"]
    assert str(judge) in row["run_py"]  # the judge is part of the test


def test_one_core_runs_again_with_the_judge_when_its_cpu_run_fails(sweep: SweepRunner) -> None:
    """On one core run.py holds no judge; a run whose CPU reference cannot run (a test double:
    its load raises) runs again with the judge in its script, and the judge's No is the
    verdict. The judged script is the one recorded, and stands for the model: unchanged."""
    judge = judge_double(zoo.ensure_built("gpt2", sweep.cache), sweep.path, "No")
    args = ["--neuron-judge", str(judge)]
    done = sweep.run("zoo:llama", backend=CPU_RUN_FAILS, args=args)
    row = done.row("zoo:llama")
    assert (row["english"], row["result"], row["checked_by"]) == ("N", "FAIL(output)", "judge")
    assert row["notes"].startswith("run again with the judge (the CPU comparison did not run)")
    check = json.loads(row["check"])
    assert "MemoryError" in check["cpu_comparison"] and check["judge"]["english"] == "N"
    [written] = sweep.results.glob("runs/*/*/zoo--llama/run.py")
    assert written.read_text() == row["run_py"] and "def judge_english" in row["run_py"]
    again = sweep.run("zoo:llama", backend=CPU_RUN_FAILS, args=args)
    assert "1 unchanged (not run again)" in again.result.stdout.str()


def test_a_zoo_model_can_judge_and_its_word_is_the_verdict(sweep: SweepRunner) -> None:
    done = sweep.run("zoo:llama", backend=CPU_RUN_FAILS, args=["--neuron-judge", "zoo:qwen3"])
    row = done.row("zoo:llama")
    assert row["english"] in ("Y", "N") and row["checked_by"] == "judge"
    assert row["result"] == ("PASS" if row["english"] == "Y" else "FAIL(output)")


@SUPPORT
def test_a_several_core_run_py_alone_gives_the_same_verdict(
    tiny_sweep: Sweep, zoo_cache: Path, tmp_path: Path
) -> None:
    """Its compiles read the tiny sweep's inductor cache, with the sweep's compile threads
    (with others, inductor misses that cache: measured): the verdict is what is held here, not
    inductor compiling the experts again (a minute of CPU)."""
    row = tiny_sweep.row("zoo:mixtral")  # as the tiny list has it: experts on 2 cores
    assert row["result"] == "PASS" and row["neuron_cores"] == 2
    params = next(
        ast.literal_eval(node.value)
        for node in ast.parse(row["run_py"]).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PARAMS"
    )
    assert params["cores"] == 2 and params["runner"] == "dense_ep"
    (tmp_path / "run.py").write_text(row["run_py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURONSUPPORT_")}
    env.update(CpuDevice().run_env(zoo_cache))  # the sweep's compile cache, and its threads:
    env[COMPILE_THREADS_ENV] = str(row["neuron_cores"])  # one a leased core
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


@WAITING
@pytest.mark.parametrize("how", sorted(RANK_FAULTS))
def test_a_rank_that_crashes_or_hangs_is_fail_other_and_leaves_no_process(
    timeouts: dict[str, SharedSweep], how: str
) -> None:
    done = timeouts[f"rank-{how}"].wait()
    assert done.runner is not None
    done.result.assert_outcomes(failed=1)
    row = done.row("zoo:llama-2core")
    assert row["result"] == "FAIL(other)"
    assert row["notes"] == RANK_FAULTS[how][1]
    assert "test-only backend: about to" in row["error"]  # the ranks' output tail is kept
    if how == "hang":  # where: rank 1 in the backend's hang (its stack, innermost first)
        assert re.search(r"thread 0x[0-9a-f]+: _misbehave \(backends_for_tests\.py:", row["error"])
    script = next((done.runner.results / "runs").glob("*/*/zoo--llama-2core/run.py"))
    deadline = time.monotonic() + 120  # killed at once; reaped in seconds even when busy
    while run_processes_of(script) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_processes_of(script) == []
