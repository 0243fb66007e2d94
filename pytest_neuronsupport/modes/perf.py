"""The performance mode (``--neuron-perf``): after a model's support run, one performance row
per configuration (:data:`~pytest_neuronsupport.dataset.perf.PERF`).

It renders one standalone ``perf.py`` per
configuration from :mod:`pytest_neuronsupport.runners.lib.perf`
(``<run_dir>/perf-<configuration>/perf.py``), run isolated on leased cores: one core, or one
per data-parallel replica. Its raw per-round timings become the row's figures through
:mod:`pytest_neuronsupport.runners.lib.measures`; a benchmark that fails, crashes or times out
gives a row saying so and no figures.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport import pricing
from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import DEVICE_FIELDS
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes.mode import Script, common_row, trains
from pytest_neuronsupport.peaks import documented as documented_peaks
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.modelrun import ScriptRun, run_script
from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan, render, sha256
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.runners.lib import measures
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.settings import Settings

#: The run-side module the benchmark scripts are made of (its entry and the script's).
PERF_MODULE = "pytest_neuronsupport.runners.lib.perf"
#: What each runner's models are benchmarked as; other runners are not benchmarked (yet).
KINDS = {"dense": "decoder", "seq2seq": "encoder-decoder", "encoder": "encoder"}
#: Throughput's unit and the cost's, by kind.
UNITS = {
    "encoder": ("inferences/s", "per 1M inferences"),
    "decoder": ("output tokens/s", "per 1M tokens"),
    "encoder-decoder": ("tokens/s", "per 1M tokens"),
}
#: What a benchmark's device and runtime say of its run (the rest of :data:`DEVICE_FIELDS`,
#: ``fullgraph`` and ``lnc``, are the sweep's and in every row already).
DEVICE_SAID = frozenset(f.name for f in DEVICE_FIELDS) - {"fullgraph", "lnc"}
#: The support results after which a model is benchmarked: it ran.
BENCHED = (Result.PASS, Result.FAIL_OUTPUT)
#: A figure is flagged ``wide_interval`` when its confidence interval is wider than this
#: fraction of the figure (docs/performance.md states it too).
WIDE_FRACTION = 0.1
#: The confidence intervals: their level, resamples of the bootstrap, and its fixed seed.
CI_LEVEL = 0.95
RESAMPLES = 1000
SEED = 0
#: The figures given an interval, by kind (:data:`FIGURE_STATISTICS`).
_EVERY_KIND = ("latency_ms", "throughput", "eager_latency_ms", "speedup_vs_eager")
CI_FIGURES = {
    "encoder": _EVERY_KIND,
    "decoder": (*_EVERY_KIND, "ttft_ms", "tpot_ms"),
    "encoder-decoder": (*_EVERY_KIND, "token_latency_ms"),
}
#: A figure of groups of rounds (each replica's, then eager's) of a configuration.
Statistic = Callable[[Sequence[Sequence[dict[str, Any]]], "Configuration"], float]


@dataclass(frozen=True)
class Configuration:
    """One configuration of a model's benchmark."""

    kind: str
    batch: int
    seq_len: int | None = None  # encoders
    input_len: int | None = None  # generation
    output_len: int | None = None
    replicas: int = 1

    @property
    def key(self) -> str:
        """``b16-s128-dp1`` or ``b1-i128-o128-dp1``."""
        shape = (
            f"s{self.seq_len}"
            if self.kind == "encoder"
            else f"i{self.input_len}-o{self.output_len}"
        )
        return f"b{self.batch}-{shape}-dp{self.replicas}"

    def columns(self) -> dict[str, Any]:
        total = (
            self.seq_len
            if self.kind == "encoder"
            else (self.input_len or 0) + (self.output_len or 0)
        )
        return {
            "configuration": self.key,
            "kind": self.kind,
            "batch": self.batch,
            "seq_len": total,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "dp_degree": self.replicas,
            "run_mode": "Data Parallel",
        }


def configurations(kind: str, spec: ModelSpec, s: Any, replicas: int) -> list[Configuration]:
    """The list entry's configurations, else the options': every batch with every sequence
    length (encoders) or input/output lengths (generation)."""
    batches = spec.perf_batch or s.perf_batch
    if kind == "encoder":
        return [
            Configuration(kind, b, seq_len=n, replicas=replicas)
            for b in batches
            for n in spec.perf_seq_len or s.perf_seq_len
        ]
    return [
        Configuration(kind, b, input_len=i, output_len=o, replicas=replicas)
        for b in batches
        for i, o in spec.perf_io or s.perf_io
    ]


@dataclass(frozen=True)
class BenchParams(RunParams):
    """A benchmark script's ``PARAMS``: the run's, and the configuration's."""

    kind: str = "decoder"
    batch: int = 1
    seq_len: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    rounds: int = 10
    min_seconds: float = 2.0
    max_rounds: int = 1000
    warmup: int = 2
    replicas: int = 1
    #: The machine's peaks measured earlier (None: the script measures them).
    peaks: dict[str, Any] | None = None


class Perf:
    """The performance mode (``--neuron-perf``): after a model's support run that ran it, one
    row per configuration."""

    name = "perf"
    table = PERF
    budgeted = False  # it follows the support run, which counted
    sized = True
    hooked = False

    def wanted(self, spec: ModelSpec, settings: Settings) -> bool:
        return settings.perf and not trains(spec, settings)

    def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
        """Benchmarked when its support run ran it (PASS, or FAIL(output)): the row this sweep
        made, or the one recorded when the model was not run again."""
        support = before.get(SUPPORT.name)
        if support is None:
            return False
        row = support.rows[0] if support.rows else None
        if support.unchanged:
            row = sweep.recorded(SUPPORT, spec.id)
        return row is not None and row.get("result") in BENCHED

    def base_row(self, sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
        s = sweep.settings
        cost = pricing.price(s.price_per_hour, s.instance)
        return {
            **common_row(sweep, spec),
            "configuration": "-",  # each configuration's row names its own
            "instance_type": s.instance,
            "price_per_hour": None if cost is None else cost[0],
            "price_source": None if cost is None else cost[1],
        }

    def script(
        self, sweep: Sweep, planned: Plan, base: dict[str, Any]
    ) -> Script | list[dict[str, Any]]:
        """Every configuration's ``perf.py`` is rendered in :meth:`run` (it always runs);
        runners without a benchmark, and sharded models, get a row saying so."""
        runner, s = planned.runner, sweep.settings
        assert runner is not None
        kind = KINDS.get(runner.name)
        if kind is None or planned.cores > 1:
            why = f"no benchmark for {runner.column}" if kind is None else "no benchmark on "
            why += "" if kind is None else f"{planned.cores} cores (tensor parallel) yet"
            fields = {"result": Result.EXCLUDED, "notes": why, "configuration": "-"}
            return [{**base, **fields, "runner": runner.column, "neuron_cores": planned.cores}]
        # one replica per leased core; leases are aligned powers of two
        replicas = 1 << (max(1, min(s.perf_replicas, s.device.core_count())).bit_length() - 1)
        configs = configurations(kind, planned.spec, s, replicas)
        return Script("", sweep.run_dir(planned.spec.id), state=configs)

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        rows = [{**base, **self.one(sweep, planned, config)} for config in script.state]
        return [{k: v for k, v in row.items() if k in PERF.docs} for row in rows]

    def one(self, sweep: Sweep, planned: Plan, config: Configuration) -> dict[str, Any]:
        """Render, run and read one configuration's benchmark: its row's fields."""
        s, runner, spec = sweep.settings, planned.runner, planned.spec
        assert runner is not None
        params = BenchParams(
            **sweep.run_fields(spec.id, planned.checkpoint, planned.revision, "perf"),
            kind=config.kind,
            batch=config.batch,
            seq_len=config.seq_len,
            input_len=config.input_len,
            output_len=config.output_len,
            rounds=s.perf_rounds,
            min_seconds=s.perf_min_seconds,
            max_rounds=s.perf_max_rounds,
            warmup=s.perf_warmup,
            replicas=config.replicas,
            peaks=peaks(s),
        )
        code = ScriptPlan(
            runner_module=PERF_MODULE,
            runner_entry="perf",
            entry="main_perf",
            entry_module=PERF_MODULE,
            ops_class=s.device.rank_ops if config.replicas > 1 else s.device.ops,
            runner_column=runner.column,
            imported_backend=":" in s.backend,
            packages=spec.packages,
            script_name="perf.py",
        )
        text = render(params, code, sweep.stack)
        folder = sweep.run_dir(spec.id) / f"perf-{config.key}"
        fields: dict[str, Any] = {
            **config.columns(),
            "runner": runner.column,
            "neuron_cores": planned.cores,
            "rounds": s.perf_rounds,
            "warmup_rounds": s.perf_warmup,
            "run_py": text,
            "run_py_sha256": sha256(text),
        }
        script = folder / "perf.py"
        outcome = execute(sweep, text, script, config.replicas, spec.packages, config.key)
        verdict = outcome.verdict
        # what the device's runtime said of the run (the operators on the CPU...), whatever
        fields.update({k: v for k, v in (verdict or {}).items() if k in DEVICE_SAID})
        if verdict is None or outcome.timed_out or outcome.reason or verdict["result"] != "PASS":
            ran = classify.ran(outcome)
            fields.update({k: ran.get(k) for k in ("result", "notes", "error", "wall_s")})
            return fields
        fields.update(figures(s, config, verdict, params.peaks))
        fields["wall_s"] = outcome.wall_s
        return fields


def peaks_path(s: Settings) -> Path:
    """Where this machine's measured peaks are kept, per device and dtype."""
    return s.cache / "peaks" / f"{s.device.name}-{s.dtype}.json"


def peaks(s: Settings) -> dict[str, Any] | None:
    """The documented peaks of the instance's cores (on Neuron), else those measured earlier
    on this machine, else None (the benchmark measures them)."""
    if s.device.name == "neuron":
        cores = getattr(s.device, "cores", None)  # the LNC neuron-ls reports
        table = documented_peaks(s.instance, s.dtype, cores().lnc if cores else None)
        if table is not None:
            return table
    try:
        value = json.loads(peaks_path(s).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def figures(
    s: Settings, config: Configuration, verdict: dict[str, Any], peaks: dict[str, Any] | None
) -> dict[str, Any]:
    """A passed benchmark's figures: timed, against eager, cost and roofline."""
    if peaks is None and isinstance(verdict.get("peaks"), dict):
        peaks = verdict["peaks"]
        peaks_path(s).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(peaks_path(s), json.dumps(peaks, sort_keys=True))
    kind, input_len = config.kind, config.input_len or 0
    fields: dict[str, Any] = {"result": Result.PASS, "notes": verdict.get("notes")}
    fields.update(measures.figures(kind, verdict["replicas"], config.batch, input_len))
    eager = measures.figures(kind, [verdict["rounds_eager"]], config.batch, input_len)
    fields.update(
        compile_s=verdict.get("compile_s"),
        warmup_s=verdict.get("warmup_s"),
        eager_latency_ms_p50=eager["latency_ms_p50"],
        eager_latency_ms_mean=eager["latency_ms_mean"],
        eager_latency_ms_stdev=eager["latency_ms_stdev"],
        eager_throughput=eager["throughput"],
        speedup_vs_eager=eager["latency_ms_mean"] / fields["latency_ms_mean"],
        eager_rounds=len(verdict["rounds_eager"]),
        peak_gb=verdict.get("peak_gb"),
        eager_peak_gb=verdict.get("eager_peak_gb"),
    )
    fields.update(intervals(kind, verdict["replicas"], verdict["rounds_eager"], config))
    fields["throughput_unit"], fields["cost_unit"] = UNITS[kind]
    cost = pricing.price(s.price_per_hour, s.instance)
    if cost is not None:
        fields["cost_per_million"] = measures.cost_per_million(cost[0], fields["throughput"])
    model = verdict.get("model") or {}
    fields.update(params=model.get("params"), weight_bytes=model.get("weight_bytes"))
    fields.update(measures.roofline(kind, {**config.columns(), **fields}, model, peaks))
    fields["timings"] = json.dumps(
        {"replicas": verdict["replicas"], "eager": verdict["rounds_eager"]}
    )
    ran_on = {k: verdict.get(k) for k in ("threads", "cpus")}
    fields["check"] = json.dumps({"model": model, "peaks": peaks, **ran_on}, sort_keys=True)
    return fields


def intervals(
    kind: str,
    replicas: Sequence[Sequence[dict[str, Any]]],
    eager: Sequence[dict[str, Any]],
    config: Configuration,
) -> dict[str, Any]:
    """Each figure's 95% bootstrap interval (``<figure>_ci_low``, ``<figure>_ci_high``), and
    ``wide_interval``: one of them wider than :data:`WIDE_FRACTION` of its figure."""
    groups = [*replicas, eager]
    chosen = {name: FIGURE_STATISTICS[name] for name in CI_FIGURES[kind]}
    out: dict[str, Any] = {"wide_interval": False}
    for name, (low, high) in bootstrap_intervals(groups, chosen, config).items():
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = low, high
        figure = chosen[name](groups, config)
        out["wide_interval"] |= high - low > WIDE_FRACTION * abs(figure)
    return out


def bootstrap_intervals(
    groups: Sequence[Sequence[dict[str, Any]]],
    chosen: Mapping[str, Statistic],
    config: Configuration,
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, tuple[float, float]]:
    """The percentile bootstrap interval of each statistic over ``groups`` of rounds (each
    replica's, then eager's): ``resamples`` times, every group resampled with replacement to
    its own size, apart from the others, with a fixed ``seed`` (the same rounds give the same
    intervals); the interval is the middle ``level`` of the statistic's values."""
    chooser = random.Random(seed)
    values: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(resamples):
        sample = [chooser.choices(group, k=len(group)) for group in groups]
        for name, statistic in chosen.items():
            values[name].append(statistic(sample, config))
    tail = (1 - level) / 2 * 100
    return {
        name: (measures.percentile(v, tail), measures.percentile(v, 100 - tail))
        for name, v in values.items()
    }


def _mean_ms(per_round: Callable[[dict[str, Any], Configuration], float]) -> Statistic:
    """The mean over the compiled rounds (every replica's) of a per-round figure, in ms."""

    def statistic(groups: Sequence[Sequence[dict[str, Any]]], config: Configuration) -> float:
        return 1e3 * statistics.fmean(per_round(r, config) for g in groups[:-1] for r in g)

    return statistic


def _eager_latency_ms(groups: Sequence[Sequence[dict[str, Any]]], config: Configuration) -> float:
    return 1e3 * statistics.fmean(r["latency_s"] for r in groups[-1])


def _made(r: dict[str, Any], config: Configuration) -> int:
    """What one round produced: inferences, output tokens, or input and output tokens."""
    if config.kind == "encoder":
        return config.batch
    extra = (config.input_len or 0) if config.kind == "encoder-decoder" else 0
    return config.batch * (extra + int(r["tokens"]))


def _throughput(groups: Sequence[Sequence[dict[str, Any]]], config: Configuration) -> float:
    """The replicas' throughputs summed (:func:`measures.figures`' ``throughput``)."""
    return sum(
        sum(_made(r, config) for r in g) / max(float(sum(r["latency_s"] for r in g)), 1e-12)
        for g in groups[:-1]
    )


_latency_ms = _mean_ms(lambda r, c: r["latency_s"])


def _speedup(groups: Sequence[Sequence[dict[str, Any]]], config: Configuration) -> float:
    return _eager_latency_ms(groups, config) / _latency_ms(groups, config)


#: Each figure given an interval, as a statistic of the rounds; the timed ones are the mean
#: over the rounds (``latency_ms`` is ``latency_ms_mean``'s interval).
FIGURE_STATISTICS: dict[str, Statistic] = {
    "latency_ms": _latency_ms,
    "ttft_ms": _mean_ms(lambda r, c: r["ttft_s"]),
    "tpot_ms": _mean_ms(lambda r, c: (r["latency_s"] - r["ttft_s"]) / max(1, r["tokens"] - 1)),
    "token_latency_ms": _mean_ms(lambda r, c: r["latency_s"] / ((c.input_len or 0) + r["tokens"])),
    "throughput": _throughput,
    "eager_latency_ms": _eager_latency_ms,
    "speedup_vs_eager": _speedup,
}


def execute(
    sweep: Sweep,
    text: str,
    script: Path,
    cores: int,
    needs: tuple[str, ...] = (),
    key: str = "",
) -> Outcome:
    """A benchmark script on the model's path, on ``cores`` leased cores
    (:func:`~pytest_neuronsupport.pipeline.modelrun.run_script`; ``key``: its configuration,
    for the status)."""
    return run_script(sweep, ScriptRun(text, script, cores, needs, step=f"perf {key}".strip()))
