"""The training mode (``--neuron-train``, or ``mode = "train"`` in a list entry): does the model
train, and the largest batch that fits, native and compiled; one row per model and ``seq_len``
in ``<results>/train`` (:data:`~pytest_neuronsupport.dataset.train.TRAIN`). Its scripts are
rendered from :mod:`pytest_neuronsupport.runners.lib.train`:

1. ``train.py``, the correctness check: one eager CPU fp32 step against one compiled step on
   the device; its verdict is PASS, FAIL(output), FAIL(train) or FAIL(load);
2. the batch search, eager (``native``) then ``compiled``, one script and one isolated run per
   trial (``<mode>-<batch>/train.py``): double the batch until a trial runs out of memory, then
   bisect between the last batch that fit and the first that did not (Lightning's batch-size
   finder), capped at ``--neuron-train-max-batch``. A trial that fails for another reason
   stops the search: FAIL(train).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.modellist import DEFAULT_SEQ_LEN, ModelSpec
from pytest_neuronsupport.modes.mode import Script, common_row, trains
from pytest_neuronsupport.pipeline import classify, packages
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.modelrun import ScriptRun, run_script
from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan, render
from pytest_neuronsupport.pipeline.sweep import RUN_ENV, Sweep
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV
from pytest_neuronsupport.runners.lib.protocol import Result, first_line
from pytest_neuronsupport.settings import Settings

#: The run-side module the training scripts are made of, and its entry.
TRAIN_MODULE = "pytest_neuronsupport.runners.lib.train"
#: Samples in the correctness check's batch; timed steps of a search trial (after one warm-up).
CHECK_BATCH = 2
TIMED_STEPS = 2
#: The two batch searches, in order: eager, then compiled.
SEARCHES = ("native", "compiled")
#: What a training run's environment sets unless the user's says otherwise: no tokenizer
#: thread pool nor compile workers (threads and processes map address space under the cap).
TRIAL_ENV = {**RUN_ENV, COMPILE_THREADS_ENV: "1"}


@dataclass(frozen=True)
class TrainParams(RunParams):
    """A training script's ``PARAMS``: the run's, and the trial's."""

    trial: str = "check"  # "check" or "search"
    mode: str = "compiled"  # "native" (eager) or "compiled"
    batch: int = CHECK_BATCH
    seq_len: int = DEFAULT_SEQ_LEN
    check_batch: int = CHECK_BATCH
    steps: int = TIMED_STEPS
    #: The memory a search trial may use beyond what it had mapped when it started (the CPU's
    #: cap, an address-space limit); None: the device's own memory.
    memory_gb: float | None = None
    #: The search's cap (``--neuron-train-max-batch``): in the script, so that its hash, which
    #: decides whether a model is tested again, changes with it.
    max_batch: int = 256


class TrialFailed(Exception):
    """A trial failed for another reason than memory: the search stops there."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(fields.get("notes"))
        self.fields = fields


@dataclass
class BatchSearch:
    """What a batch search found."""

    #: The largest batch that fit (0: not even one sample).
    batch: int
    #: The batch the search stopped at: the smallest that did not fit (None: capped).
    failed: int | None
    capped: bool
    #: ``(batch, fits)`` in the order tried.
    trials: list[tuple[int, bool]] = field(default_factory=list)
    #: The batch the search started from (1: doubling from 1).
    start: int = 1


def find_batch(fits: Callable[[int], bool], max_batch: int, start: int = 1) -> BatchSearch:
    """The largest batch for which ``fits`` holds, at most ``max_batch``: double from 1 until
    it fails, then bisect between the last success and the first failure (Lightning's
    batch-size finder).

    From a ``start`` above 1 (a guess: the compiled search starts from the native batch), the
    search tries it first, then gallops: up by 1, 2, 4... while the batches fit, or down by 1,
    2, 4... until one fits, then bisects. For a ``fits`` that holds up to some batch and not
    beyond, the answer is the same as from 1, in fewer trials when the guess is close. Either
    way the batch found fit and the one above it (``failed``) did not, each in a trial of its
    own, and no batch is tried twice.

    ``fits`` raises for a failure that is not a lack of memory; that stops the search."""
    trials: list[tuple[int, bool]] = []

    def attempt(batch: int) -> bool:
        ok = fits(batch)
        trials.append((batch, ok))
        return ok

    start = max(1, min(start, max_batch))
    low, high, step = 0, None, 1
    if start == 1 or attempt(start):
        low = 0 if start == 1 else start
        while low < max_batch:  # up: doubling from 1, or by 1, 2, 4... from the guess
            batch = min(low + step if start > 1 else max(1, 2 * low), max_batch)
            if not attempt(batch):
                high = batch
                break
            low, step = batch, 2 * step
    else:
        high = start
        while high > 1:  # down from the guess, by 1, 2, 4...: the first batch that fits
            batch = max(high - step, 1)
            if attempt(batch):
                low = batch
                break
            high, step = batch, 2 * step
    while high is not None and high - low > 1:
        middle = (low + high) // 2
        if attempt(middle):
            low = middle
        else:
            high = middle
    return BatchSearch(low, high, high is None, trials, start)


def precision(dtype: str) -> str:
    """How the step computes: ``fp32``, or autocast over fp32 weights (``bf16-autocast``)."""
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    return short if dtype == "float32" else f"{short}-autocast"


class Train:
    """The training mode (see the module's docstring)."""

    name = "train"
    table = TRAIN
    budgeted = True
    sized = False  # one core: the batch search finds what fits
    hooked = False

    def wanted(self, spec: ModelSpec, settings: Settings) -> bool:
        return trains(spec, settings)

    def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
        return True

    def base_row(self, sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
        s = sweep.settings
        return {
            **common_row(sweep, spec),
            "neuron_cores": 1,
            "seq_len": spec.seq_len or DEFAULT_SEQ_LEN,
            "precision": precision(s.dtype),
            "max_batch": s.train_max_batch,
            "memory_cap_gb": memory_gb(s) or s.core_capacity_gb,
        }

    def script(self, sweep: Sweep, planned: Plan, base: dict[str, Any]) -> Script:
        """The correctness check's ``train.py``: what decides whether the model is unchanged
        (the trials' scripts differ from it only by their mode and batch, and the cap and
        ``max_batch`` are in its ``PARAMS``), keyed by the model and ``seq_len``."""
        spec, seq_len = planned.spec, base["seq_len"]
        params = train_params(sweep, spec, planned.checkpoint, planned.revision, seq_len)
        folder = layout.train_dir(sweep.settings.results, sweep.pair, spec.id, seq_len)
        started = datetime.now(UTC)
        text = render_script(sweep, params, spec)
        return Script(text, folder / "train.py", key=(spec.id, seq_len), state=(params, started))

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Check, then search the batch natively and compiled: the model's training row."""
        params, started = script.state
        fields = check(sweep, script.text, script.path, planned.spec.packages)
        fields.update(run_py=script.text, run_py_sha256=script.sha256)
        if fields["result"] in (Result.PASS, Result.FAIL_OUTPUT):
            try:
                for how in SEARCHES:
                    folder = script.path.parent
                    fields.update(search(sweep, params, planned.spec, folder, how, fields))
            except TrialFailed as failed:
                fields.update(failed.fields)
        if fields.get("batch_native") and fields.get("batch_compiled") is not None:
            fields["batch_ratio"] = fields["batch_compiled"] / fields["batch_native"]
        fields["wall_s"] = round((datetime.now(UTC) - started).total_seconds(), 3)
        return [{**base, **fields}]


def memory_gb(s: Settings) -> float | None:
    """The search's memory cap: the core's memory (``--neuron-core-memory``, else the
    device's), where the device's training ops hold a trial to it (the CPU: an address-space
    limit; Neuron: TorchNeuron's allocator's peak); None: the device's own memory (CUDA)."""
    return s.core_capacity_gb if s.device.caps_training_memory else None


def train_params(
    sweep: Sweep, spec: ModelSpec, checkpoint: str, revision: str | None, seq_len: int
) -> TrainParams:
    s = sweep.settings
    return TrainParams(
        **sweep.run_fields(spec.id, checkpoint, revision, "train"),
        seq_len=seq_len,
        memory_gb=memory_gb(s),
        max_batch=s.train_max_batch,
    )


def render_script(sweep: Sweep, params: TrainParams, spec: ModelSpec) -> str:
    s = sweep.settings
    code = ScriptPlan(
        runner_module=TRAIN_MODULE,
        runner_entry="train",
        entry="main",
        ops_class=s.device.train_ops,
        runner_column="train",
        imported_backend=":" in s.backend,
        packages=spec.packages,
        script_name="train.py",
    )
    return render(params, code, sweep.stack)


def check(sweep: Sweep, text: str, run_py: Path, needs: tuple[str, ...] = ()) -> dict[str, Any]:
    """The correctness check's row fields: its verdict's numbers, or how it ended (a package
    its list entry needs that cannot be installed: FAIL(load))."""
    try:
        outcome = execute(sweep, text, run_py, needs=needs)
    except packages.PackageError as exc:
        return classify.not_installed(exc)
    fields = classify.ran(outcome)
    details = json_object(fields.get("check"))
    for name in ("objective", "loss_ref", "loss", "grad_norm_ref", "grad_norm"):
        fields[name] = details.get(name)
    fields["param_error"] = details.get("param_error")
    fields["tolerance"] = details.get("tolerance")
    fields["check"] = json_dumps({**details, "check_s": outcome.wall_s})
    return fields


def search(
    sweep: Sweep,
    base: TrainParams,
    spec: ModelSpec,
    folder: Path,
    mode: str,
    row: dict[str, Any],
) -> dict[str, Any]:
    """One mode's batch search: its row fields (``batch_<mode>``...)."""
    verdicts: dict[int, dict[str, Any]] = {}
    walls: dict[int, float] = {}

    def fits(batch: int) -> bool:
        params = TrainParams(**{**base.to_dict(), "trial": "search", "mode": mode, "batch": batch})
        text = render_script(sweep, params, spec)
        script = folder / f"{mode}-{batch}" / "train.py"
        outcome = execute(sweep, text, script, f"{mode} b{batch}", spec.packages)
        verdict, walls[batch] = outcome.verdict, outcome.wall_s
        if outcome.reason and verdict is None:  # the watcher's memory limit
            verdicts[batch] = {"fits": False, "out_of_memory": outcome.reason}
            return False
        if verdict is None or verdict.get("result") != Result.PASS or outcome.timed_out:
            fields = classify.ran(outcome)  # FAIL(train), or how the run ended
            why = fields.get("notes") or first_line(fields.get("error"))
            notes = f"{mode} batch {batch}: {why}"
            raise TrialFailed({**fields, "notes": notes, "check": row.get("check")})
        verdicts[batch] = verdict
        return bool(verdict.get("fits"))

    # the compiled search starts from the native batch (most models fit about as many)
    start = (row.get("batch_native") or 1) if mode == "compiled" else 1
    found = find_batch(fits, sweep.settings.train_max_batch, start)
    best = verdicts.get(found.batch, {})
    details = json_object(row.get("check"))
    details[f"search_{mode}"] = {
        # each trial: its batch, whether it fit, the seconds its run took
        "trials": [[batch, ok, walls.get(batch)] for batch, ok in found.trials],
        "start": found.start,
        "failed_at": found.failed,
        "out_of_memory": (verdicts.get(found.failed or 0) or {}).get("out_of_memory"),
    }
    row["check"] = json_dumps(details)
    return {
        f"batch_{mode}": found.batch,
        f"batch_{mode}_capped": found.capped,
        f"samples_per_s_{mode}": best.get("samples_per_s"),
        f"peak_gb_{mode}": best.get("peak_gb"),
        "check": row["check"],
    }


def execute(
    sweep: Sweep, text: str, run_py: Path, what: str = "check", needs: tuple[str, ...] = ()
) -> Outcome:
    """A training script on the model's path, on one leased core, with the packages its list
    entry needs (:func:`~pytest_neuronsupport.pipeline.modelrun.run_script`; ``what``: the
    trial, for the status)."""
    run = ScriptRun(text, run_py, 1, needs, defaults=TRIAL_ENV, step=f"train {what}")
    return run_script(sweep, run)


def json_object(text: object) -> dict[str, Any]:
    """The JSON object of a ``check`` column (empty when there is none)."""
    if not isinstance(text, str):
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def json_dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, default=str)
