"""Modes: the one loop every mode goes through (budget, plan, unchanged, the row validated once,
a bug of ours costing no row), which entries each built-in mode takes, and a mode of a user's
own that records rows in a table of its own without any change to the plugin."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport import devices, modes
from pytest_neuronsupport.dataset import tables
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes import ModeOutcome
from pytest_neuronsupport.modes.support import Support
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import installed_stack
from tests.modes_for_tests import (
    CONFTEST,
    PARAMS,
    BadRowModeForTests,
    ParamCountModeForTests,
    RaisingModeForTests,
)
from tests.sweeping import HERE, SweepRunner


def a_sweep(tmp_path: Path, cache: Path, **changes: object) -> Sweep:
    settings = Settings(
        lists=(),
        device=devices.resolve("cpu"),
        backend="aot_eager",
        dtype="float32",
        results=tmp_path / "results",
        cache=cache,
        timeout_s=600,
        workdir=tmp_path,
        leases=tmp_path / "leases",
        **changes,  # type: ignore[arg-type]
    )
    return Sweep(settings, Runners.builtin(), installed_stack(), sweep_id="test")


def spec(model_id: str = "zoo:bert", **fields: object) -> ModelSpec:
    return ModelSpec(id=model_id, source=Path("models.toml"), line=1, **fields)  # type: ignore[arg-type]


def test_a_mode_records_its_rows_validated_in_its_table(tmp_path: Path, zoo_cache: Path) -> None:
    outcome = modes.test(ParamCountModeForTests(), a_sweep(tmp_path, zoo_cache), spec())
    assert outcome.table == "params" and outcome.model_id == "zoo:bert" and outcome.ran
    (row,) = outcome.rows
    assert row["result"] == "PASS" and row["parameters"] > 0
    assert list(row)[: len(PARAMS.schema)] == PARAMS.schema.names  # validated: schema order
    assert isinstance(row["tested_at"], str)  # and in JSON form, as it travels and is journaled
    assert ModeOutcome.from_dict(outcome.to_dict()) == outcome


def test_exclusions_and_missing_checkpoints_are_decided_by_the_loop(
    tmp_path: Path, zoo_cache: Path
) -> None:
    sweep, mode = a_sweep(tmp_path, zoo_cache), ParamCountModeForTests()
    excluded = modes.test(mode, sweep, spec("org/q", exclusion="quantized", notes="4-bit"))
    assert [(r["result"], r["exclusion"], r["notes"]) for r in excluded.rows] == [
        ("EXCLUDED", "quantized", "4-bit")
    ]
    missing = modes.test(mode, sweep, spec("org/gone", path=str(tmp_path / "nowhere")))
    assert missing.rows[0]["result"] == "FAIL(load)"
    assert "config.json" in missing.rows[0]["error"]


def test_support_rows_name_the_checkpoints_architecture_excluded_ones_too(
    tmp_path: Path, zoo_cache: Path
) -> None:
    sweep = a_sweep(tmp_path, zoo_cache)

    def checkpoint(name: str, **config: object) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return str(folder)

    quantized = checkpoint(
        "q4",
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        quantization_config={"quant_method": "gptq"},
    )
    unknown = checkpoint("odd", architectures=["OddNetForWhatever"], model_type="oddnet")
    remote = checkpoint("remote", model_type="custom", auto_map={"AutoModel": "m.Custom"})
    found = {
        model_id: modes.test(Support(), sweep, spec(model_id, path=path)).rows[0]
        for model_id, path in (("org/q4", quantized), ("org/odd", unknown), ("org/r", remote))
    }
    found["org/ahead"] = modes.test(
        Support(), sweep, spec("org/ahead", exclusion="quantized")
    ).rows[0]
    shown = {
        m: (r["result"], r["exclusion"], r["architecture"], r["model_type"])
        for m, r in found.items()
    }
    assert shown == {
        "org/q4": ("EXCLUDED", "quantized", "LlamaForCausalLM", "llama"),
        "org/odd": ("EXCLUDED", "no-runner", "OddNetForWhatever", "oddnet"),
        "org/r": ("EXCLUDED", "trust-remote-code", None, "custom"),  # its config names no class
        "org/ahead": ("EXCLUDED", "quantized", None, None),  # decided ahead: no config read
    }
    # a table without the columns does not get them (no extra column from the plan)
    (params,) = modes.test(ParamCountModeForTests(), sweep, spec()).rows
    assert "architecture" not in params and "model_type" not in params


def test_an_unchanged_script_is_not_run_again_unless_rerun(tmp_path: Path, zoo_cache: Path) -> None:
    sweep, mode = a_sweep(tmp_path, zoo_cache), ParamCountModeForTests()
    tables.register(PARAMS)
    first = modes.test(mode, sweep, spec())
    target = sweep.settings.results / PARAMS.folder / sweep.pair
    target.parent.mkdir(parents=True)
    pq.write_table(_table(first.rows), target)
    again = modes.test(mode, sweep, spec())
    assert again.unchanged and not again.rows and "--neuron-rerun" in (again.reason or "")
    rerun = modes.test(mode, a_sweep(tmp_path, zoo_cache, rerun=True), spec())
    assert rerun.rows and not rerun.unchanged


def _table(rows: list[dict[str, object]]) -> object:
    from pytest_neuronsupport.dataset.table import row_from_json, rows_to_table

    return rows_to_table([row_from_json(r, PARAMS) for r in rows], PARAMS)


def test_the_limit_counts_runs_and_exclusions_cost_nothing(tmp_path: Path, zoo_cache: Path) -> None:
    class Budgeted(ParamCountModeForTests):
        budgeted = True

    sweep, mode = a_sweep(tmp_path, zoo_cache, limit=1), Budgeted()
    assert modes.test(mode, sweep, spec("zoo:bert")).rows
    assert modes.test(mode, sweep, spec("org/q", exclusion="quantized")).rows  # free
    stopped = modes.test(mode, sweep, spec("zoo:llama"))
    assert not stopped.rows and stopped.reason == "--neuron-limit 1 reached"


def test_a_recorded_model_is_unchanged_not_skipped_once_the_limit_is_reached(
    tmp_path: Path, zoo_cache: Path
) -> None:
    """As after a killed sweep whose count was left behind: the budget is spent, yet a model
    whose script is the one recorded says it is unchanged, not that the limit was reached."""

    class Budgeted(ParamCountModeForTests):
        budgeted = True

    tables.register(PARAMS)
    mode = Budgeted()
    first = modes.test(mode, a_sweep(tmp_path, zoo_cache, limit=1), spec())
    target = tmp_path / "results" / PARAMS.folder / a_sweep(tmp_path, zoo_cache).pair
    target.parent.mkdir(parents=True)
    pq.write_table(_table(first.rows), target)
    spent = a_sweep(tmp_path, zoo_cache, limit=1)  # the same sweep id: its count is 1 of 1
    assert spent.budget.exhausted()
    again = modes.test(mode, spent, spec())
    assert again.unchanged and (again.reason or "").startswith("unchanged since")
    other = modes.test(mode, spent, spec("zoo:llama"))
    assert other.reason == "--neuron-limit 1 reached"


def test_a_bug_in_a_mode_costs_the_model_nothing_but_its_verdict(
    tmp_path: Path, zoo_cache: Path
) -> None:
    (row,) = modes.test(RaisingModeForTests(), a_sweep(tmp_path, zoo_cache), spec()).rows
    assert row["result"] == "FAIL(other)" and "a bug in a mode" in row["notes"]
    assert "Traceback" in row["error"] and row["model_id"] == "zoo:bert"


def test_a_row_that_does_not_fit_its_table_keeps_what_names_the_model(
    tmp_path: Path, zoo_cache: Path
) -> None:
    (row,) = modes.test(BadRowModeForTests(), a_sweep(tmp_path, zoo_cache), spec()).rows
    assert row["result"] == "FAIL(other)" and "its row could not be recorded" in row["notes"]
    assert row["model_id"] == "zoo:bert" and row["run_py"].startswith("count the parameters")
    assert row["parameters"] is None
    assert row["run_py_sha256"] is None  # never "unchanged": the next sweep runs it again


@pytest.mark.parametrize(
    ("entry", "flags", "expected"),
    [
        ({}, {}, ["support"]),
        ({}, {"perf": True}, ["support", "perf"]),
        ({}, {"train": True}, ["train"]),
        ({"mode": "train"}, {}, ["train"]),
        ({"mode": "train"}, {"perf": True}, ["train"]),
    ],
)
def test_which_modes_test_an_entry(
    tmp_path: Path, entry: dict[str, str], flags: dict[str, bool], expected: list[str]
) -> None:
    settings = a_sweep(tmp_path, tmp_path, **flags).settings
    wanted = modes.modes_for(spec(**entry), modes.builtin_modes(), settings)
    assert [mode.name for mode in wanted] == expected


def test_a_benchmark_follows_only_a_support_run_that_ran_the_model(
    tmp_path: Path, zoo_cache: Path
) -> None:
    from pytest_neuronsupport.modes.perf import Perf

    sweep, bench = a_sweep(tmp_path, zoo_cache, perf=True), Perf()

    def support(result: str) -> dict[str, ModeOutcome]:
        row = {"model_id": "zoo:bert", "result": result}
        return {SUPPORT.name: ModeOutcome(SUPPORT.name, "zoo:bert", [row])}

    assert bench.ready(sweep, spec(), support("PASS"))
    assert bench.ready(sweep, spec(), support("FAIL(output)"))
    assert not bench.ready(sweep, spec(), support("FAIL(gen)"))
    assert not bench.ready(sweep, spec(), support("EXCLUDED"))
    assert not bench.ready(sweep, spec(), {})
    skipped = {SUPPORT.name: ModeOutcome(SUPPORT.name, "zoo:bert", reason="limit")}
    assert not bench.ready(sweep, spec(), skipped)
    assert modes.test(bench, sweep, spec(), support("FAIL(gen)")).rows == []


def test_an_entrys_modes_run_in_order_each_seeing_those_before(
    tmp_path: Path, zoo_cache: Path
) -> None:
    seen: list[list[str]] = []

    class Seeing(ParamCountModeForTests):
        name = "seeing"
        table = Table("seeing", "seeing", PARAMS.schema)

        def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
            seen.append(list(before))
            return "params" in before and bool(before["params"].rows)

    sweep = a_sweep(tmp_path, zoo_cache)
    outcomes = list(modes.test_entry([ParamCountModeForTests(), Seeing()], sweep, spec()))
    assert [o.table for o in outcomes] == ["params", "seeing"] and seen == [["params"]]
    assert [len(o.rows) for o in outcomes] == [1, 1]
    alone = list(modes.test_entry([Seeing()], sweep, spec()))  # nothing before it: not ready
    assert [(o.table, o.rows, o.ran) for o in alone] == [("seeing", [], True)]


def test_tables_of_users_must_not_clash() -> None:
    tables.register(PARAMS)
    tables.register(PARAMS)  # the same table again: fine
    with pytest.raises(ValueError, match="clashes"):
        tables.register(Table("params", "elsewhere", PARAMS.schema))
    with pytest.raises(ValueError, match="clashes"):
        tables.register(Table("other", SUPPORT.folder, PARAMS.schema))
    with pytest.raises(ValueError, match="cannot be its folder"):
        tables.register(Table("journals", "journal", PARAMS.schema))


@pytest.mark.slow
def test_a_users_mode_sweeps_into_its_own_table(sweep: SweepRunner) -> None:
    """The mode of tests/modes_for_tests.py, registered from a conftest: its rows go to
    ``<results>/params`` and never reach the support table's counts or file; a second sweep
    finds both tables unchanged."""
    shutil.copy(HERE / "modes_for_tests.py", sweep.path / "modes_for_tests.py")
    sweep.makeconftest(CONFTEST)
    done = sweep.run("zoo:bert", "zoo:gpt2", args=["-n", "2"])
    done.result.assert_outcomes(passed=2)
    assert sorted(done.rows) == ["zoo:bert", "zoo:gpt2"]
    assert "parameters" not in done.row("zoo:bert")
    params = {r["model_id"]: r for r in pq.read_table(sweep.results / "params").to_pylist()}
    assert sorted(params) == ["zoo:bert", "zoo:gpt2"]
    assert all(r["result"] == "PASS" and r["parameters"] > 1000 for r in params.values())
    output = done.result.stdout.str()
    assert "2 PASS" in output and "params: 2 PASS" in output
    again = sweep.run("zoo:bert", "zoo:gpt2")
    again.result.assert_outcomes(skipped=2)
    again.result.stdout.fnmatch_lines(["*2 unchanged (not run again)*", "params: *2 unchanged*"])
