"""Tests of pytest_neuronsupport.dataset: schema, rows, extra columns, journals, merges, crash
safety (real files, real subprocesses killed with SIGKILL, no mocks)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport.dataset.durable import atomic_write, data_lock
from pytest_neuronsupport.dataset.files import (
    UnreadableResultsError,
    find_row,
    forget_cached,
    read_dataset,
    read_table,
    upgrade_file,
)
from pytest_neuronsupport.dataset.journal import Journal, JournalWarning, read_journal
from pytest_neuronsupport.dataset.layout import (
    check_relpath,
    data_files,
    pair_dirname,
    pair_path,
    pair_relpath,
    run_dir,
    run_dirname,
)
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.support import (
    COLUMNS,
    FP64_COLUMNS,
    PHASE_COLUMNS,
    REFERENCE_HOST_COLUMNS,
    SCHEMA,
    SUPPORT,
)
from pytest_neuronsupport.dataset.table import (
    DEVICE_NAMES,
    row_from_json,
    row_to_json,
    rows_to_table,
    validate_row,
)
from pytest_neuronsupport.runners.lib.protocol import Result

PAIR = "inductor-2.13.0/transformers-5.24.0.parquet"
NEURON_PAIR = "neuronxcc-2.21.33363.0/transformers-5.24.0.parquet"
T0 = dt.datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)

EXPECTED_COLUMNS = (
    "model_id",
    "library",
    "neuron_cores",
    "runner",
    "selection_rank",
    "task",
    "revision",
    "result",
    "notes",
    "exclusion",
    "error",
    "cpu_match",
    "english",
    "wall_s",
    "hbm_peak_gb",
    "hbm_capacity_gb",
    "neuronx_cc",
    "library_version",
    "transformers",
    "accelerate",
    "torch_neuronx",
    "torch",
    "nki",
    "python",
    "neuron_driver",
    "tested_at",
    "run_py",
    "device",
    "backend",
    "compiler",
    "compiler_version",
    "dtype",
    "run_py_sha256",
    "reference_reproducible",
    "first_divergence",
    "divergence_margin",
    "near_tie_tolerance",
    "check",
    "error_site",
    "graph_count",
    "graph_breaks",
    "graph_break_reasons",
    "repro_py",
    "repro_ops_before",
    "repro_ops_after",
    "repro_ops",
    "checked_by",
    "architecture",
    "model_type",
    "load_s",
    "compile_s",
    "generate_s",
    "forward_s",
    "reference_s",
    "graphs_cached",
    "graphs_compiled",
    "compiled",
    "cpu_ops",
    "fallback_execution",
    "backend_compile_s",
    "fp64_error_device",
    "fp64_error_eager",
    "fp64_tolerance",
    "core_s",
    "download_s",
    "compile_cache",
    "fullgraph",
    "lnc",
    "reference_cpu",
    "reference_isa",
    "reference_threads",
    "reference_torch",
    "reference_onednn",
)

# One line of a journal written by the previous version (results.Journal.append of a Row),
# copied literally from its output.
OLD_JOURNAL_LINE = (
    b'{"pair":"inductor-2.13.0/transformers-5.24.0.parquet","row":{"model_id":"zoo:old-journal",'
    b'"library":null,"neuron_cores":1,"runner":null,"selection_rank":null,"task":null,'
    b'"revision":null,"result":"FAIL(gen)","notes":null,"exclusion":null,'
    b'"error":"RuntimeError: boom \\u2603","cpu_match":null,"english":null,"wall_s":1.5,'
    b'"hbm_peak_gb":null,"hbm_capacity_gb":null,"neuronx_cc":null,"library_version":null,'
    b'"transformers":null,"accelerate":null,"torch_neuronx":null,"torch":null,"nki":null,'
    b'"python":null,"neuron_driver":null,"tested_at":"2025-06-01T12:30:00+00:00","run_py":null,'
    b'"device":"cpu","backend":null,"compiler":null,"compiler_version":null,"dtype":null,'
    b'"run_py_sha256":null,"reference_reproducible":false,"first_divergence":null,'
    b'"divergence_margin":null,"near_tie_tolerance":null,"check":"{\\"tokens\\": [1, 2]}"}}\n'
)


def row(model_id: str, result: str = "PASS", minutes: int = 0, **values: object) -> dict[str, Any]:
    """A row tested ``minutes`` after T0."""
    return validate_row(
        {
            "model_id": model_id,
            "result": result,
            "tested_at": T0 + dt.timedelta(minutes=minutes),
            **values,
        },
        SUPPORT,
    )


def full_row() -> dict[str, Any]:
    """A row with every column set, unicode and a long run script."""
    run_py = "".join(f"# line {i}: résumé — 模型 ✓\nx_{i} = {i} * 2\n" for i in range(3000))
    return validate_row(
        {
            "model_id": "zoo:llama-ünïcode/模型",
            "library": "transformers",
            "neuron_cores": 2,
            "runner": "causal_lm",
            "selection_rank": 17,
            "task": "text-generation",
            "revision": "0123456789abcdef0123456789abcdef01234567",
            "result": Result.FAIL_OUTPUT,
            "notes": "note with\nnewline and \u2028 line separator",
            "exclusion": "",
            "error": "RuntimeError: boom ☃\nTraceback ...",
            "cpu_match": "3/4 tokens",
            "english": "The cat sat on the mat — ça va?",
            "wall_s": 12.5,
            "hbm_peak_gb": 3.25,
            "hbm_capacity_gb": 96.0,
            "neuronx_cc": "2.21.33363.0",
            "library_version": "5.24.0",
            "transformers": "5.24.0",
            "accelerate": "1.2.0",
            "torch_neuronx": "2.9.0.2.11",
            "torch": "2.13.0",
            "nki": "0.1.0",
            "python": "3.11.7",
            "neuron_driver": "2.24.7.0",
            "tested_at": dt.datetime(
                2025, 6, 1, 14, 0, 0, 654321, tzinfo=dt.timezone(dt.timedelta(hours=2))
            ),
            "run_py": run_py,
            "device": "neuron",
            "backend": "neuron",
            "compiler": "neuronxcc",
            "compiler_version": "2.21.33363.0",
            "dtype": "bfloat16",
            "run_py_sha256": "ab" * 32,
            "reference_reproducible": True,
            "first_divergence": 7,
            "divergence_margin": 0.015625,
            "near_tie_tolerance": 1e-3,
            "check": json.dumps({"margin": 0.015625, "tokens": [1, 2, 3], "label": "ü"}),
        },
        SUPPORT,
    )


def append_rows(
    results: Path, entries: list[tuple[str, dict[str, Any]]], session_id: str | None = None
) -> Path:
    with Journal(results, session_id=session_id) as journal:
        for pair, entry in entries:
            journal.append(pair, entry)
        return journal.path


def ids(table: pa.Table) -> list[str]:
    return sorted(table.column("model_id").to_pylist())


def column_by_model(table: pa.Table, name: str) -> dict[str, object]:
    return dict(
        zip(table.column("model_id").to_pylist(), table.column(name).to_pylist(), strict=True)
    )


# --------------------------------------------------------------------------------------------
# schema, rows, paths
# --------------------------------------------------------------------------------------------


def test_schema_columns_in_order_with_metadata() -> None:
    assert COLUMNS == EXPECTED_COLUMNS
    assert tuple(SCHEMA.names) == COLUMNS
    assert SCHEMA.metadata == {b"neuronsupport_schema": b"1"}
    assert SCHEMA.field("tested_at").type == pa.timestamp("us", tz="UTC")
    assert SCHEMA.field("neuron_cores").type == pa.int32()
    assert SCHEMA.field("first_divergence").type == pa.int32()
    assert SCHEMA.field("reference_reproducible").type == pa.bool_()
    assert SCHEMA.field("divergence_margin").type == pa.float64()
    assert all(f.nullable for f in SCHEMA)
    assert DEVICE_NAMES == ("neuron", "cuda", "cpu")
    assert tuple(Result) == (
        "PASS",
        "FAIL(load)",
        "FAIL(gen)",
        "FAIL(forward)",
        "FAIL(train)",
        "FAIL(output)",
        "FAIL(other)",
        "EXCLUDED",
    )
    for result in Result:  # enum members and plain strings alike, stored as plain str
        for given in (result, result.value):
            stored = validate_row({"model_id": "m", "result": given}, SUPPORT)["result"]
            assert stored == result.value and type(stored) is str


@pytest.mark.parametrize(
    "make",
    [full_row, lambda: validate_row({"model_id": "zoo:tiny", "result": "EXCLUDED"}, SUPPORT)],
)
def test_row_round_trip_through_dict_and_json(make: Callable[[], dict[str, Any]]) -> None:
    original = make()
    assert tuple(original) == COLUMNS
    data = row_to_json(original, SUPPORT)
    assert tuple(data) == COLUMNS
    text = json.dumps(data)
    back = row_from_json(json.loads(text), SUPPORT)
    assert back == original
    assert (
        validate_row(original, SUPPORT) == original
        and validate_row(original, SUPPORT) is not original
    )
    if original["tested_at"] is not None:
        assert data["tested_at"] == "2025-06-01T12:00:00.654321+00:00"
        assert back["tested_at"].utcoffset() == dt.timedelta(0)
        assert type(back["result"]) is str
    else:
        assert data["tested_at"] is None
        assert all(data[name] is None for name in COLUMNS if name not in ("model_id", "result"))


def test_validate_row_accepts_datetime_and_z_suffix() -> None:
    from_string = validate_row(
        {"model_id": "m", "result": "PASS", "tested_at": "2025-06-01T12:00:00Z"}, SUPPORT
    )
    from_offset = validate_row(
        {"model_id": "m", "result": "PASS", "tested_at": "2025-06-01T14:00:00+02:00"}, SUPPORT
    )
    from_datetime = validate_row(
        {
            "model_id": "m",
            "result": "PASS",
            "tested_at": dt.datetime(2025, 6, 1, 12, tzinfo=dt.UTC),
        },
        SUPPORT,
    )
    assert from_string == from_datetime == from_offset
    assert from_offset["tested_at"].tzinfo == dt.UTC
    wall = validate_row({"model_id": "m", "result": "PASS", "wall_s": 3}, SUPPORT)["wall_s"]
    assert wall == 3.0 and type(wall) is float
    given = {"model_id": "m", "result": "PASS", "wall_s": 3}
    validate_row(given, SUPPORT)
    assert given == {"model_id": "m", "result": "PASS", "wall_s": 3}  # not changed in place


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model_id": "m"}, "row m: missing required column(s): result"),
        ({"result": "PASS"}, "row: missing required column(s): model_id"),
        ({"model_id": "", "result": "PASS"}, "row: model_id must be a non-empty string"),
        ({"model_id": 3, "result": "PASS"}, "row: model_id must be a str, got int"),
        ({"model_id": "m", "result": "OK"}, "row m: result must be one of"),
        ({"model_id": "m", "result": "PASS", "tested_at": dt.datetime(2025, 1, 1)}, "timezone"),
        ({"model_id": "m", "result": "PASS", "tested_at": "2025-01-01T00:00"}, "timezone"),
        ({"model_id": "m", "result": "PASS", "tested_at": "yesterday"}, "row m: tested_at is not"),
        ({"model_id": "m", "result": "PASS", "tested_at": 0}, "must be a datetime"),
        ({"model_id": "m", "result": "PASS", "neuron_cores": 2**31}, "row m: neuron_cores does"),
        ({"model_id": "m", "result": "PASS", "neuron_cores": True}, "must be an int, got bool"),
        ({"model_id": "m", "result": "PASS", "neuron_cores": 1.0}, "must be an int, got float"),
        ({"model_id": "m", "result": "PASS", "wall_s": False}, "wall_s must be a float"),
        ({"model_id": "m", "result": "PASS", "wall_s": "1"}, "wall_s must be a float"),
        ({"model_id": "m", "result": "PASS", "notes": 1}, "row m: notes must be a str, got int"),
        ({"model_id": "m", "result": "PASS", "reference_reproducible": 1}, "must be a bool"),
        ({"model_id": "m", "result": "PASS", "device": "tpu"}, "row m: device must be one of"),
        ({"model_id": "m", "result": "PASS", "check": "[1, 2]"}, "row m: check must be the text"),
        ({"model_id": "m", "result": "PASS", "check": "{"}, "row m: check is not JSON"),
    ],
)
def test_validate_row_rejects_bad_input(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        validate_row(values, SUPPORT)
    assert str(raised.value).startswith("row")
    assert message in str(raised.value)


def test_row_from_json_rejects_a_non_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        row_from_json(["model_id", "m"], SUPPORT)


def test_pair_names_are_sanitised(tmp_path: Path) -> None:
    assert pair_dirname("inductor", "2.13.0") == "inductor-2.13.0"
    assert pair_dirname("tests.backends:perturb", "2.13.0") == "tests.backends_perturb-2.13.0"
    assert pair_dirname("a b/c", "1+cu121") == "a_b_c-1+cu121"
    assert pair_dirname(".hidden", "1") == "-hidden-1"
    assert pair_relpath("neuronxcc", "2.21.33363.0", "transformers", "5.24.0") == NEURON_PAIR
    assert (
        pair_relpath("inductor", "2.13.0", "_private", "1") == "inductor-2.13.0/-private-1.parquet"
    )
    assert pair_path(tmp_path, "inductor", "2.13.0", "transformers", "5.24.0") == (
        tmp_path / "data" / PAIR
    )
    with pytest.raises(ValueError):
        pair_dirname("", "1")
    assert check_relpath(PAIR) == PAIR
    for bad in ("../escape.parquet", "a-1/b-1", "a-1/.b-1.parquet", "a-1/b/c-1.parquet", "x"):
        with pytest.raises(ValueError, match="invalid pair path"):
            check_relpath(bad)
    with Journal(tmp_path) as journal, pytest.raises(ValueError, match="invalid pair path"):
        journal.append("../escape.parquet", row("m"))


def test_run_folders(tmp_path: Path) -> None:
    assert run_dirname("zoo:llama") == "zoo--llama"
    assert run_dirname("org/Model-1.5_b") == "org--Model-1.5_b"
    assert run_dirname("a b+c") == "a--b--c"
    assert run_dir(tmp_path / "results", PAIR, "zoo:llama") == (
        tmp_path / "results" / "runs" / "inductor-2.13.0" / "transformers-5.24.0" / "zoo--llama"
    )
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError, match="run folder"):
            run_dirname(bad)
    with pytest.raises(ValueError, match="invalid pair path"):
        run_dir(tmp_path, "../x.parquet", "zoo:llama")


def test_data_files_skip_hidden_names(tmp_path: Path) -> None:
    assert data_files(tmp_path) == []
    folder = tmp_path / "data" / "inductor-2.13.0"
    folder.mkdir(parents=True)
    for name in ("b-1.parquet", "a-1.parquet", ".a-1.parquet.lock", "_meta.parquet", "x.txt"):
        (folder / name).write_bytes(b"")
    (tmp_path / "data" / "_hidden").mkdir()
    (tmp_path / "data" / "_hidden" / "c-1.parquet").write_bytes(b"")
    assert data_files(tmp_path) == [folder / "a-1.parquet", folder / "b-1.parquet"]


def test_row_round_trip_through_parquet(tmp_path: Path) -> None:
    rich = full_row()
    bare = validate_row({"model_id": "zoo:bare", "result": "FAIL(load)"}, SUPPORT)
    append_rows(tmp_path, [(NEURON_PAIR, rich), (NEURON_PAIR, bare)])
    report = merge_journals(tmp_path)
    target = tmp_path / "data" / NEURON_PAIR
    assert report.written == {target: 2}
    assert report.ok
    assert find_row(tmp_path, NEURON_PAIR, rich["model_id"]) == rich
    assert find_row(tmp_path, NEURON_PAIR, bare["model_id"]) == bare
    assert find_row(tmp_path, NEURON_PAIR, "zoo:absent") is None
    assert find_row(tmp_path, PAIR, rich["model_id"]) is None
    with pytest.raises(ValueError, match="invalid pair path"):
        find_row(tmp_path, "nope", "zoo:bare")
    stored = pq.read_schema(target)
    assert stored.names == list(COLUMNS)
    assert stored.metadata is not None and stored.metadata[b"neuronsupport_schema"] == b"1"
    table = read_table(target)
    assert table.schema.equals(SCHEMA, check_metadata=True)
    bare_dict = next(r for r in table.to_pylist() if r["model_id"] == "zoo:bare")
    assert [name for name, value in bare_dict.items() if value is not None] == [
        "model_id",
        "result",
    ]


def test_find_row_caches_each_file_version(tmp_path: Path) -> None:
    append_rows(tmp_path, [(PAIR, row("zoo:a", "FAIL(gen)"))])
    merge_journals(tmp_path)
    target = tmp_path / "data" / PAIR
    first = find_row(tmp_path, PAIR, "zoo:a")
    assert first is not None and first["result"] == "FAIL(gen)"

    # same inode, size and mtime: the cached read answers, without reading the damaged bytes
    before = target.stat()
    with target.open("r+b") as file:
        file.write(b"\0" * before.st_size)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert find_row(tmp_path, PAIR, "zoo:a") == first
    forget_cached(target)
    assert find_row(tmp_path, PAIR, "zoo:a") is None  # read again: unreadable

    # a merge rewrites the file and a later find_row sees the new version
    target.unlink()
    append_rows(tmp_path, [(PAIR, row("zoo:a", "PASS", minutes=1))])
    merge_journals(tmp_path)
    again = find_row(tmp_path, PAIR, "zoo:a")
    assert again is not None and again["result"] == "PASS"
    append_rows(tmp_path, [(PAIR, row("zoo:a", "FAIL(load)", minutes=2))])
    merge_journals(tmp_path)
    latest = find_row(tmp_path, PAIR, "zoo:a")
    assert latest is not None and latest["result"] == "FAIL(load)"


# --------------------------------------------------------------------------------------------
# merging
# --------------------------------------------------------------------------------------------


def test_merge_replaces_keeps_and_splits_pairs(tmp_path: Path) -> None:
    first = append_rows(
        tmp_path,
        [
            (PAIR, row("zoo:llama", "FAIL(gen)", error="first")),
            (PAIR, row("zoo:bert")),
            (PAIR, row("zoo:t5", "FAIL(load)")),
            (NEURON_PAIR, row("zoo:llama", "FAIL(forward)")),
        ],
    )
    report = merge_journals(tmp_path)
    assert report.journals_merged == [first]
    assert not first.exists() and not first.with_suffix(".lock").exists()

    append_rows(
        tmp_path,
        [
            (PAIR, row("zoo:llama", "FAIL(output)", minutes=5, error="second")),
            (PAIR, row("zoo:llama", "PASS", minutes=6)),  # later append in one journal wins
            (PAIR, row("zoo:gpt2", minutes=5)),
        ],
    )
    report = merge_journals(tmp_path)
    assert report.written == {tmp_path / "data" / PAIR: 2}

    inductor = read_table(tmp_path / "data" / PAIR)
    assert ids(inductor) == ["zoo:bert", "zoo:gpt2", "zoo:llama", "zoo:t5"]
    llama = find_row(tmp_path, PAIR, "zoo:llama")
    assert llama is not None and llama["result"] == "PASS" and llama["error"] is None
    assert ids(read_table(tmp_path / "data" / NEURON_PAIR)) == ["zoo:llama"]

    df = pd.read_parquet(tmp_path / "data")
    llama_rows = df[df.model_id == "zoo:llama"]
    assert sorted(llama_rows.result) == ["FAIL(forward)", "PASS"]
    assert len(df) == 5
    assert list(df.columns) == list(COLUMNS)
    assert read_dataset(tmp_path).num_rows == 5


def test_between_journals_the_later_tested_at_wins(tmp_path: Path) -> None:
    # the newer run sits in the journal written first; an older run recovered later must not win
    append_rows(tmp_path, [(PAIR, row("zoo:a", "PASS", minutes=10))], session_id="s1")
    append_rows(tmp_path, [(PAIR, row("zoo:a", "FAIL(gen)", minutes=1))], session_id="s2")
    merge_journals(tmp_path)
    found = find_row(tmp_path, PAIR, "zoo:a")
    assert found is not None and found["result"] == "PASS"

    # same against a row already in the parquet file (late recovery of a dead journal)
    append_rows(tmp_path, [(PAIR, row("zoo:a", "FAIL(load)", minutes=2))])
    merge_journals(tmp_path)
    found = find_row(tmp_path, PAIR, "zoo:a")
    assert found is not None and found["result"] == "PASS"
    assert not list((tmp_path / "journal").glob("*.jsonl"))


def test_duplicated_models_in_a_foreign_file_keep_the_latest(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    target.parent.mkdir(parents=True)
    foreign = rows_to_table(
        [
            row("zoo:a", "FAIL(gen)", minutes=3),
            row("zoo:a", "PASS", minutes=1),
            row("zoo:b", "FAIL(load)", minutes=1),
            row("zoo:b", "PASS", minutes=2),
        ],
        SUPPORT,
    )
    pq.write_table(foreign, target)
    found = find_row(tmp_path, PAIR, "zoo:a")
    assert found is not None and found["result"] == "FAIL(gen)"
    append_rows(tmp_path, [(NEURON_PAIR, row("zoo:c")), (PAIR, row("zoo:c"))])
    merge_journals(tmp_path)
    table = read_table(target)
    assert ids(table) == ["zoo:a", "zoo:b", "zoo:c"]
    assert column_by_model(table, "result") == {
        "zoo:a": "FAIL(gen)",
        "zoo:b": "PASS",
        "zoo:c": "PASS",
    }


def test_merging_the_same_journal_twice_is_idempotent(tmp_path: Path) -> None:
    journal = append_rows(
        tmp_path, [(PAIR, row(f"zoo:m{i}", minutes=i, extra_rank=i)) for i in range(20)]
    )
    saved = tmp_path / "saved.jsonl"
    shutil.copy(journal, saved)
    merge_journals(tmp_path)
    once = read_table(tmp_path / "data" / PAIR, keep_extra=True)
    shutil.copy(saved, journal)  # as if the merge was killed before deleting the journal
    merge_journals(tmp_path)
    twice = read_table(tmp_path / "data" / PAIR, keep_extra=True)
    assert twice.equals(once)
    assert once.num_rows == 20


def test_temp_files_are_ignored_by_readers_and_cleaned_up(tmp_path: Path) -> None:
    append_rows(tmp_path, [(PAIR, row("zoo:a"))])
    merge_journals(tmp_path)
    folder = (tmp_path / "data" / PAIR).parent
    stale = folder / f".transformers-5.24.0.parquet.{secrets.token_hex(8)}.tmp"
    stale.write_bytes(b"half a parquet file")
    other = folder / f".other-1.parquet.{secrets.token_hex(8)}.tmp"
    other.write_bytes(b"PAR1 torn")
    assert len(pd.read_parquet(tmp_path / "data")) == 1
    assert read_dataset(tmp_path).num_rows == 1
    merge_journals(tmp_path)  # nothing to merge: still sweeps temps of files not being written
    assert not stale.exists() and not other.exists()
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".lock")] == [
        "transformers-5.24.0.parquet"
    ]


def test_temp_files_of_a_file_being_written_are_left_to_its_writer(tmp_path: Path) -> None:
    append_rows(tmp_path, [(PAIR, row("zoo:a"))])
    merge_journals(tmp_path)
    target = tmp_path / "data" / PAIR
    temp = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    temp.write_bytes(b"being written")
    with data_lock(target):
        merge_journals(tmp_path)  # nothing to merge for this file: the sweep skips it
        assert temp.exists()
    merge_journals(tmp_path)
    assert not temp.exists()


def test_atomic_write_leaves_no_temp_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "t.parquet"
    atomic_write(target, rows_to_table([row("zoo:a")], SUPPORT))
    assert read_table(target).column("model_id").to_pylist() == ["zoo:a"]
    # the temp file is written and fsynced, then replacing fails: a directory is in the way
    blocked = tmp_path / "blocked.parquet"
    blocked.mkdir()
    (blocked / "inside").write_bytes(b"")
    with pytest.raises(OSError):
        atomic_write(blocked, rows_to_table([row("zoo:b")], SUPPORT))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked.parquet", "t.parquet"]


# --------------------------------------------------------------------------------------------
# extra columns
# --------------------------------------------------------------------------------------------


def test_extra_columns_survive_journal_merge_and_parquet(tmp_path: Path) -> None:
    extras: dict[str, Any] = {"zz_flag": True, "attempts": 3, "score": 0.25, "host_name": "trn1-ü"}
    with_extras = row("zoo:extra", **extras)
    assert list(with_extras)[: len(COLUMNS)] == list(COLUMNS)
    assert list(with_extras)[len(COLUMNS) :] == sorted(extras)  # extras sorted, after the schema
    journal = append_rows(tmp_path, [(PAIR, with_extras), (PAIR, row("zoo:plain"))])
    line = json.loads(journal.read_text().splitlines()[0])
    assert line["pair"] == PAIR
    assert line["row"]["host_name"] == "trn1-ü" and line["row"]["attempts"] == 3
    assert read_journal(journal)[0] == (PAIR, with_extras)

    report = merge_journals(tmp_path)
    assert report.ok and report.written == {tmp_path / "data" / PAIR: 2}
    target = tmp_path / "data" / PAIR
    stored = pq.read_schema(target)
    assert stored.names == [*COLUMNS, "attempts", "host_name", "score", "zz_flag"]
    assert [stored.field(name).type for name in ("attempts", "host_name", "score", "zz_flag")] == [
        pa.int64(),
        pa.string(),
        pa.float64(),
        pa.bool_(),
    ]

    df = pd.read_parquet(tmp_path / "data")
    extra_row = df[df.model_id == "zoo:extra"].iloc[0]
    assert extra_row.attempts == 3 and extra_row.host_name == "trn1-ü"
    assert extra_row.score == 0.25 and bool(extra_row.zz_flag) is True
    plain_row = df[df.model_id == "zoo:plain"].iloc[0]
    assert pd.isna(plain_row.attempts) and pd.isna(plain_row.host_name)

    kept = read_dataset(tmp_path, keep_extra=True)
    assert kept.column_names == [*COLUMNS, "attempts", "host_name", "score", "zz_flag"]
    assert column_by_model(kept, "score") == {"zoo:extra": 0.25, "zoo:plain": None}
    assert read_dataset(tmp_path).schema.equals(SCHEMA, check_metadata=True)
    assert read_table(target).column_names == list(COLUMNS)

    found = find_row(tmp_path, PAIR, "zoo:extra")
    assert found == with_extras
    plain = find_row(tmp_path, PAIR, "zoo:plain")
    assert plain is not None and plain["attempts"] is None and plain["host_name"] is None

    # a later merge without the extras keeps them for the rows that have them
    append_rows(tmp_path, [(PAIR, row("zoo:later", minutes=1))])
    merge_journals(tmp_path)
    again = read_table(target, keep_extra=True)
    assert again.column_names == [*COLUMNS, "attempts", "host_name", "score", "zz_flag"]
    assert column_by_model(again, "host_name") == {
        "zoo:extra": "trn1-ü",
        "zoo:later": None,
        "zoo:plain": None,
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("bad-name", 1, "'bad-name': the name must match"),
        ("1st", 1, "'1st': the name must match"),
        ("", 1, "'': the name must match"),
        (7, 1, "7: the name must match"),
        ("tags", ["a"], "'tags' must be None, str, bool, int or float, got list"),
        ("meta", {"a": 1}, "'meta' must be None, str, bool, int or float, got dict"),
        ("blob", b"x", "'blob' must be None, str, bool, int or float, got bytes"),
        ("when", T0, "'when' must be None, str, bool, int or float, got datetime"),
        ("huge", 2**63, "'huge' does not fit in int64"),
    ],
)
def test_bad_extra_column_is_refused_naming_model_and_key(
    tmp_path: Path, key: object, value: object, message: str
) -> None:
    bad: dict[Any, object] = {"model_id": "zoo:hooked", "result": "PASS", key: value}
    with pytest.raises(ValueError) as raised:
        validate_row(bad, SUPPORT)
    assert str(raised.value).startswith(f"row zoo:hooked: extra column {message}")
    with Journal(tmp_path) as journal:
        with pytest.raises(ValueError, match="row zoo:hooked: extra column"):
            journal.append(PAIR, bad)
        assert journal.path.read_bytes() == b""  # nothing written


def test_extra_values_are_normalised() -> None:
    class Colour(str):
        pass

    valid = validate_row(
        {
            "model_id": "m",
            "result": Result.PASS,
            "colour": Colour("red"),
            "outcome": Result.EXCLUDED,
            "nothing": None,
            "_private": 1,
        },
        SUPPORT,
    )
    assert list(valid)[len(COLUMNS) :] == ["_private", "colour", "nothing", "outcome"]
    assert type(valid["colour"]) is str and valid["colour"] == "red"
    assert type(valid["outcome"]) is str and valid["outcome"] == "EXCLUDED"
    assert valid["nothing"] is None


def test_rows_to_table_infers_extra_types() -> None:
    rows = [
        row("zoo:a", b=True, i=1, f=1, s="x", mixed=1, none=None, big=2**53 + 1),
        row("zoo:b", b=False, i=2, f=2.5, s=None, mixed="two", none=None, big=0.5),
        row("zoo:c", b=None, i=None, f=None, s="z", mixed=True),
    ]
    table = rows_to_table(rows, SUPPORT)
    assert table.schema.metadata == SCHEMA.metadata
    assert table.column_names == [*COLUMNS, "b", "big", "f", "i", "mixed", "none", "s"]
    types = {name: table.schema.field(name).type for name in table.column_names[len(COLUMNS) :]}
    assert types == {
        "b": pa.bool_(),
        "big": pa.string(),  # 2**53 + 1 is not exact as a float: text, nothing lost
        "f": pa.float64(),
        "i": pa.int64(),
        "mixed": pa.string(),
        "none": pa.string(),
        "s": pa.string(),
    }
    assert table.column("f").to_pylist() == [1.0, 2.5, None]
    assert table.column("mixed").to_pylist() == ["1", "two", "True"]
    assert table.column("big").to_pylist() == [str(2**53 + 1), "0.5", None]
    assert table.column("none").to_pylist() == [None, None, None]
    assert rows_to_table([], SUPPORT).schema.equals(SCHEMA, check_metadata=True)
    with pytest.raises(ValueError, match="row zoo:x: missing"):
        rows_to_table([{"model_id": "zoo:x"}], SUPPORT)


def test_int_and_float_extras_in_two_merges_promote_to_float64(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    append_rows(tmp_path, [(PAIR, row("zoo:a", score=1)), (PAIR, row("zoo:n", score=None))])
    merge_journals(tmp_path)
    assert pq.read_schema(target).field("score").type == pa.int64()
    append_rows(tmp_path, [(PAIR, row("zoo:b", score=2.5))])
    report = merge_journals(tmp_path)
    assert report.ok
    assert pq.read_schema(target).field("score").type == pa.float64()
    assert column_by_model(pq.read_table(target), "score") == {
        "zoo:a": 1.0,
        "zoo:b": 2.5,
        "zoo:n": None,
    }
    # and back: an int arriving in a float column stays float64
    append_rows(tmp_path, [(PAIR, row("zoo:c", score=4))])
    merge_journals(tmp_path)
    assert pq.read_schema(target).field("score").type == pa.float64()
    assert column_by_model(pq.read_table(target), "score")["zoo:c"] == 4.0
    found = find_row(tmp_path, PAIR, "zoo:c")
    assert found is not None and found["score"] == 4.0 and type(found["score"]) is float


def test_all_null_extra_takes_the_type_of_later_values(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    append_rows(tmp_path, [(PAIR, row("zoo:a", attempts=None))])
    merge_journals(tmp_path)
    assert pq.read_schema(target).field("attempts").type == pa.string()  # all null: string
    append_rows(tmp_path, [(PAIR, row("zoo:b", attempts=2))])
    merge_journals(tmp_path)
    assert pq.read_schema(target).field("attempts").type == pa.int64()
    assert column_by_model(pq.read_table(target), "attempts") == {"zoo:a": None, "zoo:b": 2}


def test_str_extra_meeting_int_extra_falls_back_to_string(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    append_rows(
        tmp_path,
        [(PAIR, row("zoo:int", tag=7)), (PAIR, row("zoo:big", exact=2**53 + 1, flag=True))],
    )
    merge_journals(tmp_path)
    append_rows(
        tmp_path,
        [
            (PAIR, row("zoo:str", tag="seven", minutes=1)),
            (PAIR, row("zoo:float", exact=0.5, flag=3, minutes=1)),
        ],
    )
    report = merge_journals(tmp_path)
    assert report.ok and report.written == {target: 2}
    schema = pq.read_schema(target)
    assert [schema.field(name).type for name in ("tag", "exact", "flag")] == [pa.string()] * 3
    table = pq.read_table(target)
    assert column_by_model(table, "tag") == {
        "zoo:big": None,
        "zoo:float": None,
        "zoo:int": "7",
        "zoo:str": "seven",
    }
    assert column_by_model(table, "exact")["zoo:big"] == str(2**53 + 1)  # not rounded
    assert column_by_model(table, "exact")["zoo:float"] == "0.5"
    assert column_by_model(table, "flag") == {
        "zoo:big": "True",
        "zoo:float": "3",
        "zoo:int": None,
        "zoo:str": None,
    }
    found = find_row(tmp_path, PAIR, "zoo:int")
    assert found is not None and found["tag"] == "7"


def test_read_dataset_unifies_extras_across_files(tmp_path: Path) -> None:
    append_rows(
        tmp_path,
        [
            (PAIR, row("zoo:a", only_a="a", shared=1)),
            (NEURON_PAIR, row("zoo:b", shared=1.5)),
            ("other-1/transformers-5.24.0.parquet", row("zoo:c", shared="text", only_c=False)),
        ],
    )
    merge_journals(tmp_path)
    table = read_dataset(tmp_path, keep_extra=True)
    # files in sorted path order: inductor, neuronxcc, other; extras in order of appearance
    assert table.column_names == [*COLUMNS, "only_a", "shared", "only_c"]
    assert table.schema.metadata == SCHEMA.metadata
    assert column_by_model(table, "only_a") == {"zoo:a": "a", "zoo:b": None, "zoo:c": None}
    assert column_by_model(table, "only_c") == {"zoo:a": None, "zoo:b": None, "zoo:c": False}
    assert column_by_model(table, "shared") == {"zoo:a": "1", "zoo:b": "1.5", "zoo:c": "text"}
    assert read_dataset(tmp_path).column_names == list(COLUMNS)
    assert read_dataset(tmp_path / "absent", keep_extra=True).schema.equals(SCHEMA)


def test_extras_merged_into_a_file_with_unknown_columns(tmp_path: Path) -> None:
    old = tmp_path / "data" / PAIR
    write_old_file(old)
    append_rows(tmp_path, [(PAIR, row("zoo:new", minutes=1, future_column=5, hook="h"))])
    merge_journals(tmp_path)
    merged = pq.read_table(old)
    # the file's own extra first, as it was; the new one after
    assert merged.column_names == [*COLUMNS, "future_column", "hook"]
    assert column_by_model(merged, "future_column") == {
        "zoo:llama": "too",
        "zoo:new": "5",
        "zoo:old1": "kept",
    }
    assert column_by_model(merged, "hook") == {"zoo:llama": None, "zoo:new": "h", "zoo:old1": None}


def test_old_format_journal_line_still_merges(tmp_path: Path) -> None:
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir()
    journal = journal_dir / "20250601T123000000000Z-1234-0123456789ab.jsonl"
    journal.write_bytes(OLD_JOURNAL_LINE)
    [(pair, entry)] = read_journal(journal)
    assert pair == PAIR and tuple(entry) == COLUMNS
    report = merge_journals(tmp_path)
    assert report.ok and report.journals_merged == [journal] and not journal.exists()
    found = find_row(tmp_path, PAIR, "zoo:old-journal")
    assert found is not None
    assert found["result"] == "FAIL(gen)" and found["error"] == "RuntimeError: boom ☃"
    assert found["neuron_cores"] == 1 and found["wall_s"] == 1.5 and found["device"] == "cpu"
    assert found["reference_reproducible"] is False
    assert found["tested_at"] == dt.datetime(2025, 6, 1, 12, 30, tzinfo=dt.UTC)
    assert json.loads(found["check"]) == {"tokens": [1, 2]}
    assert pq.read_schema(tmp_path / "data" / PAIR).names == list(COLUMNS)


def test_journal_line_with_a_bad_extra_is_corrupt(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row("zoo:a"))], session_id="bad-extra")
    good = journal.read_bytes()
    bad = json.dumps({"pair": PAIR, "row": {**row_to_json(row("zoo:b"), SUPPORT), "tags": [1]}})
    journal.write_bytes(bad.encode() + b"\n" + good)
    problems: list[str] = []
    assert [e["model_id"] for _, e in read_journal(journal, problems=problems)] == ["zoo:a"]
    assert (
        len(problems) == 1
        and ":1: corrupt line skipped: row zoo:b: extra column 'tags'" in (problems[0])
    )
    report = merge_journals(tmp_path)
    assert report.journals_kept == [journal] and journal.exists()
    assert ids(read_dataset(tmp_path)) == ["zoo:a"]


def test_find_row_of_a_foreign_extra_type_is_none(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    target.parent.mkdir(parents=True)
    table = rows_to_table([row("zoo:a")], SUPPORT).append_column("tags", pa.array([["x", "y"]]))
    pq.write_table(table, target)
    assert find_row(tmp_path, PAIR, "zoo:a") is None  # does not validate: treated as unrecorded
    assert read_dataset(tmp_path, keep_extra=True).column("tags").to_pylist() == [["x", "y"]]
    append_rows(tmp_path, [(PAIR, row("zoo:b", tags="text"))])
    merge_journals(tmp_path)
    merged = pq.read_table(target)
    assert column_by_model(merged, "tags") == {"zoo:a": "['x', 'y']", "zoo:b": "text"}


def test_nan_and_infinite_floats_survive(tmp_path: Path) -> None:
    append_rows(tmp_path, [(PAIR, row("zoo:a", wall_s=math.nan, ratio=math.inf))])
    merge_journals(tmp_path)
    found = find_row(tmp_path, PAIR, "zoo:a")
    assert found is not None and math.isnan(found["wall_s"]) and found["ratio"] == math.inf


# --------------------------------------------------------------------------------------------
# schema evolution
# --------------------------------------------------------------------------------------------


def write_old_file(path: Path) -> None:
    """A file from an 'older version': a subset of columns, other order, int64, ns timestamps,
    no schema metadata, plus a column this version does not know."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "result": pa.array(["PASS", "FAIL(gen)"]),
            "model_id": pa.array(["zoo:old1", "zoo:llama"]),
            "neuron_cores": pa.array([1, 2], pa.int64()),
            "tested_at": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None], pa.timestamp("ns", tz="UTC")
            ),
            "future_column": pa.array(["kept", "too"]),
        }
    )
    pq.write_table(table, path)


def test_old_schema_file_reads_through_schema_and_upgrades(tmp_path: Path) -> None:
    old = tmp_path / "data" / "aaa-0.1" / "transformers-4.0.parquet"  # sorts first: pandas'
    write_old_file(old)  # directory read takes its schema from it
    append_rows(tmp_path, [(PAIR, full_row()), (PAIR, row("zoo:llama"))])
    merge_journals(tmp_path)

    table = read_table(old)
    assert table.schema.equals(SCHEMA, check_metadata=True)
    assert table.column("neuron_cores").to_pylist() == [1, 2]
    assert table.column("wall_s").to_pylist() == [None, None]
    assert table.column("tested_at").to_pylist()[0] == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert read_dataset(tmp_path).num_rows == 4
    assert read_table(old, keep_extra=True).column_names == [*COLUMNS, "future_column"]
    old1 = find_row(tmp_path, "aaa-0.1/transformers-4.0.parquet", "zoo:old1")
    assert old1 is not None and old1["future_column"] == "kept" and old1["wall_s"] is None

    # the merge upgraded the old file as well (upgrade_dataset), though it wrote no row to it
    assert "wall_s" in pd.read_parquet(tmp_path / "data").columns
    assert upgrade_file(old) is False
    assert upgrade_file(tmp_path / "data" / PAIR) is False
    upgraded = pq.read_schema(old)
    assert upgraded.names == [*COLUMNS, "future_column"]  # unknown column kept, at the end
    assert pq.read_table(old).column("future_column").to_pylist() == ["kept", "too"]

    df = pd.read_parquet(tmp_path / "data")
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    llama = df[df.model_id == "zoo:llama"]
    assert len(llama) == 2 and set(llama.result) == {"PASS", "FAIL(gen)"}
    rich = df[df.model_id == full_row()["model_id"]]
    assert rich.wall_s.tolist() == [12.5]

    # merging into the old file keeps the unknown column too
    append_rows(tmp_path, [("aaa-0.1/transformers-4.0.parquet", row("zoo:new", minutes=1))])
    merge_journals(tmp_path)
    merged = pq.read_table(old)
    assert merged.column_names == [*COLUMNS, "future_column"]
    assert column_by_model(merged, "future_column") == {
        "zoo:llama": "too",
        "zoo:new": None,
        "zoo:old1": "kept",
    }


def test_a_file_of_the_schema_before_architecture_loads_them_null_and_upgrades(
    tmp_path: Path,
) -> None:
    """The previous version's files end with ``checked_by``: ``architecture`` and
    ``model_type`` were appended after it, and load as null from those files (so do the
    phase times and the compile cache's counts, appended after them)."""
    later = (
        *("architecture", "model_type", *PHASE_COLUMNS, "graphs_cached", "graphs_compiled"),
        *("compiled", "cpu_ops", "fallback_execution", "backend_compile_s", *FP64_COLUMNS),
        *("core_s", "download_s", "compile_cache", "fullgraph", "lnc", *REFERENCE_HOST_COLUMNS),
    )
    before = pa.schema([f for f in SCHEMA if f.name not in later], metadata=SCHEMA.metadata)
    assert before.names[-1] == "checked_by"
    old = tmp_path / "data" / PAIR
    old.parent.mkdir(parents=True)
    written = rows_to_table([row("zoo:old", checked_by="cpu")], SUPPORT).select(before.names)
    pq.write_table(written.cast(before), old)
    table = read_table(old)
    assert table.schema.equals(SCHEMA, check_metadata=True)
    assert table.column("architecture").to_pylist() == [None]
    assert table.column("model_type").to_pylist() == [None]
    assert table.column("compile_s").to_pylist() == [None]
    assert table.column("graphs_cached").to_pylist() == [None]
    assert table.column("fp64_error_eager").to_pylist() == [None]
    assert table.column("cpu_ops").to_pylist() == [None]  # not known: not "none on the CPU"
    assert table.column("checked_by").to_pylist() == ["cpu"]
    assert table.column("core_s").to_pylist() == [None]
    assert table.column("compile_cache").to_pylist() == [None]
    assert table.column("fullgraph").to_pylist() == table.column("lnc").to_pylist() == [None]
    new = row("zoo:new", minutes=1, architecture="LlamaForCausalLM", model_type="llama")
    append_rows(tmp_path, [(PAIR, new)])
    merge_journals(tmp_path)  # and the merge rewrites the file in the current schema
    assert pq.read_schema(old).names == list(COLUMNS)
    merged = pq.read_table(old)
    assert column_by_model(merged, "architecture") == {
        "zoo:old": None,
        "zoo:new": "LlamaForCausalLM",
    }
    assert column_by_model(merged, "model_type") == {"zoo:old": None, "zoo:new": "llama"}


def test_merge_into_old_file_without_upgrade(tmp_path: Path) -> None:
    old = tmp_path / "data" / PAIR
    write_old_file(old)
    append_rows(tmp_path, [(PAIR, row("zoo:llama", minutes=1))])
    merge_journals(tmp_path)
    table = read_table(old)
    assert ids(table) == ["zoo:llama", "zoo:old1"]
    assert pq.read_schema(old).names[: len(COLUMNS)] == list(COLUMNS)


def test_uncastable_file_is_unreadable(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    target.parent.mkdir(parents=True)
    pq.write_table(
        pa.table({"model_id": ["zoo:a"], "result": ["PASS"], "wall_s": ["fast"]}), target
    )
    with pytest.raises(UnreadableResultsError, match="'wall_s' of type string"):
        read_table(target)
    assert find_row(tmp_path, PAIR, "zoo:a") is None
    before = target.read_bytes()
    append_rows(tmp_path, [(PAIR, row("zoo:b"))])
    report = merge_journals(tmp_path)
    assert [path for path, _ in report.unreadable] == [target]
    assert target.read_bytes() == before
    with pytest.raises(UnreadableResultsError, match="no such file"):
        upgrade_file(tmp_path / "data" / "absent-1" / "x-1.parquet")


# --------------------------------------------------------------------------------------------
# damage
# --------------------------------------------------------------------------------------------


def test_unreadable_parquet_is_reported_and_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "data" / PAIR
    target.parent.mkdir(parents=True)
    garbage = b"this is not parquet \x00\x01\x02" * 10
    target.write_bytes(garbage)
    journal = append_rows(tmp_path, [(PAIR, row("zoo:a")), (NEURON_PAIR, row("zoo:b"))])

    report = merge_journals(tmp_path)
    assert [path for path, _ in report.unreadable] == [target]
    assert report.unreadable[0][1]  # the error text
    assert report.journals_kept == [journal] and journal.exists()
    assert report.written == {tmp_path / "data" / NEURON_PAIR: 1}
    assert target.read_bytes() == garbage
    assert not report.ok
    assert find_row(tmp_path, PAIR, "zoo:a") is None
    with pytest.raises(UnreadableResultsError) as raised:
        read_dataset(tmp_path)
    assert raised.value.path == target
    with pytest.raises(UnreadableResultsError):
        upgrade_file(target)
    assert target.read_bytes() == garbage

    # a second merge does the same; once the file is moved away the rows are recovered
    assert [path for path, _ in merge_journals(tmp_path).unreadable] == [target]
    target.rename(tmp_path / "quarantined.parquet")
    report = merge_journals(tmp_path)
    assert report.ok and report.journals_merged == [journal]
    assert ids(read_dataset(tmp_path)) == ["zoo:a", "zoo:b"]


def test_torn_last_journal_line_is_skipped(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row(f"zoo:m{i}")) for i in range(3)], session_id="torn")
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"pair":"' + PAIR.encode() + b'","row":{"model_id":"zoo:x"')

    with pytest.warns(JournalWarning, match="torn last line"):
        entries = read_journal(journal)
    assert [entry["model_id"] for _, entry in entries] == ["zoo:m0", "zoo:m1", "zoo:m2"]
    problems: list[str] = []
    assert len(read_journal(journal, problems=problems)) == 3
    assert len(problems) == 1 and ":4: torn last line" in problems[0]

    # reopening the session cuts the torn tail off before appending
    with Journal(tmp_path, session_id="torn") as reopened:
        reopened.append(PAIR, row("zoo:m3"))
    problems = []
    assert [e["model_id"] for _, e in read_journal(journal, problems=problems)] == [
        "zoo:m0",
        "zoo:m1",
        "zoo:m2",
        "zoo:m3",
    ]
    assert problems == []
    journal.write_bytes(journal.read_bytes() + b'{"pair": "x')

    report = merge_journals(tmp_path)
    assert report.journals_merged == [journal]  # a torn tail is no reason to keep a journal
    assert any("torn last line" in problem for problem in report.problems)
    assert ids(read_dataset(tmp_path)) == ["zoo:m0", "zoo:m1", "zoo:m2", "zoo:m3"]


def test_complete_tail_without_newline_is_kept_on_reopen(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row("zoo:a"))], session_id="tail")
    journal.write_bytes(journal.read_bytes() + OLD_JOURNAL_LINE.rstrip(b"\n"))
    with Journal(tmp_path, session_id="tail") as reopened:
        reopened.append(PAIR, row("zoo:b"))
    problems: list[str] = []
    assert [e["model_id"] for _, e in read_journal(journal, problems=problems)] == [
        "zoo:a",
        "zoo:old-journal",
        "zoo:b",
    ]
    assert problems == []


def test_corrupt_middle_line_is_reported_and_journal_kept(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row("zoo:a")), (PAIR, row("zoo:b"))])
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([lines[0], b"{not json", lines[1], b""]))
    with pytest.warns(JournalWarning, match=r":2: corrupt line"):
        assert [e["model_id"] for _, e in read_journal(journal)] == ["zoo:a", "zoo:b"]
    report = merge_journals(tmp_path)
    assert report.journals_kept == [journal] and journal.exists()
    assert any(":2: corrupt line" in problem for problem in report.problems)
    assert ids(read_dataset(tmp_path)) == ["zoo:a", "zoo:b"]


def test_journal_session_is_exclusive(tmp_path: Path) -> None:
    with Journal(tmp_path, session_id="only") as journal:
        assert journal.session_id == "only"
        assert journal.path == tmp_path / "journal" / "only.jsonl"
        assert journal.lock_path == tmp_path / "journal" / "only.lock"
        with pytest.raises(RuntimeError, match="in use"):
            Journal(tmp_path, session_id="only")
        journal.append(PAIR, row("zoo:a"))
    assert journal.closed
    with pytest.raises(RuntimeError, match="closed"):
        journal.append(PAIR, row("zoo:b"))
    with pytest.raises(ValueError):
        Journal(tmp_path, session_id="../x")


# --------------------------------------------------------------------------------------------
# other processes: live journals, SIGKILL
# --------------------------------------------------------------------------------------------

CHILD = r"""
import datetime as dt, os, random, sys, time
from pathlib import Path
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals

results, mode, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
pair = "inductor-2.13.0/transformers-5.24.0.parquet"
rng = random.Random(int(sys.argv[4]))
journal = Journal(results)
for i in range(count):
    model_id = f"zoo:child{i:06d}"
    run_py = "".join(rng.choice("abcdefghij\n") for _ in range(300))
    journal.append(pair, {"model_id": model_id, "result": "PASS", "run_py": run_py,
                          "tested_at": dt.datetime.now(dt.UTC), "child_seq": i})
    print(model_id, flush=True)
if mode == "hold":
    print("READY", flush=True)
    sys.stdin.read()
    journal.close()
elif mode == "merge":
    journal.close()
    print("MERGING", flush=True)
    merge_journals(results, include=[journal.path])
    print("MERGED", flush=True)
"""


def start_child(
    tmp_path: Path, results: Path, mode: str, count: int, seed: int = 0
) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), str(results), mode, str(count), str(seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_until(child: subprocess.Popen[str], marker: str) -> list[str]:
    assert child.stdout is not None
    seen: list[str] = []
    for line in child.stdout:
        if line.strip() == marker:
            return seen
        seen.append(line.strip())
    raise AssertionError(f"child ended before printing {marker!r}")


def kill_and_collect(child: subprocess.Popen[str], printed: list[str]) -> list[str]:
    """SIGKILL the child; return every model_id it printed (appends that returned)."""
    os.kill(child.pid, signal.SIGKILL)
    assert child.stdout is not None
    rest = child.stdout.read()
    child.wait()
    if child.stdin is not None:
        child.stdin.close()
    child.stdout.close()
    lines = rest.split()
    # on a loaded machine the child may just have finished before the signal landed
    assert child.returncode == -signal.SIGKILL or (child.returncode == 0 and "MERGED" in lines)
    return [*printed, *(line for line in lines if line.startswith("zoo:"))]


def assert_recovered(results: Path, expected: set[str]) -> None:
    for file in (results / "data").glob("*/*.parquet"):
        read_table(file)  # every file readable
    report = merge_journals(results)
    assert not report.unreadable
    assert not list((results / "journal").glob("*.jsonl"))
    found = read_dataset(results).column("model_id").to_pylist()
    assert len(found) == len(set(found)), "a model appears twice in a pair"
    assert expected <= set(found)
    assert not list((results / "data").glob("*/.*.tmp"))
    seqs = column_by_model(read_dataset(results, keep_extra=True), "child_seq")
    assert all(seqs[model_id] == int(model_id[len("zoo:child") :]) for model_id in expected)


def test_live_journal_is_not_merged(tmp_path: Path) -> None:
    results = tmp_path / "results"
    child = start_child(tmp_path, results, "hold", 3)
    try:
        printed = read_until(child, "READY")
        report = merge_journals(results)
        assert len(report.journals_live) == 1 and report.journals_merged == []
        live = report.journals_live[0]
        assert live.exists() and report.written == {}
        assert not (results / "data").exists()

        report = merge_journals(results, skip_live=False)  # merged, but never deleted
        assert report.journals_live == [live] and live.exists()
        assert ids(read_dataset(results)) == printed
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == 0
    report = merge_journals(results)
    assert report.journals_merged == [live] and not live.exists()
    assert ids(read_dataset(results)) == printed


@pytest.mark.parametrize("after_rows", [1, 40, 400])
def test_sigkill_while_appending_loses_no_returned_append(tmp_path: Path, after_rows: int) -> None:
    results = tmp_path / "results"
    append_rows(results, [(PAIR, row("zoo:before", child_seq=-1))])
    merge_journals(results)
    child = start_child(tmp_path, results, "append", 100_000, seed=after_rows)
    assert child.stdout is not None
    printed = [child.stdout.readline().strip() for _ in range(after_rows)]
    printed = kill_and_collect(child, printed)
    assert len(printed) >= after_rows
    assert_recovered(results, set(printed))
    assert "zoo:before" in read_dataset(results).column("model_id").to_pylist()


def big_existing_file(results: Path, rows: int) -> None:
    """A large parquet file so that rewriting it takes a while."""
    target = results / "data" / PAIR
    target.parent.mkdir(parents=True, exist_ok=True)
    columns = {f.name: pa.nulls(rows, f.type) for f in SCHEMA}
    columns["model_id"] = pa.array([f"zoo:base{i:06d}" for i in range(rows)])
    columns["result"] = pa.array(["PASS"] * rows)
    columns["tested_at"] = pa.array([T0] * rows, pa.timestamp("us", tz="UTC"))
    columns["run_py"] = pa.array([secrets.token_hex(1000) for _ in range(rows)])
    pq.write_table(pa.table(columns, schema=SCHEMA), target)


BASE_ROWS = 8000
CHILD_ROWS = 300


@pytest.fixture(scope="module")
def big_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("big") / "results"
    big_existing_file(results, BASE_ROWS)
    return results


def temp_bytes(target: Path) -> int:
    """Size of the largest temp file beside ``target``; -1 when there is none."""
    sizes = [-1]
    for temp in target.parent.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            sizes.append(temp.stat().st_size)
    return max(sizes)


def wait_for(child: subprocess.Popen[str], condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 20
    while not condition() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0002)


@pytest.mark.parametrize(
    "moment", ["merge-start", 0.05, 0.15, "temp-created", "temp-partial", "replaced"]
)
def test_sigkill_while_merging_leaves_complete_files(
    tmp_path: Path, big_results: Path, moment: str | float
) -> None:
    results = tmp_path / "results"
    shutil.copytree(big_results, results)
    target = results / "data" / PAIR
    old_inode = target.stat().st_ino
    child = start_child(tmp_path, results, "merge", CHILD_ROWS)
    printed = read_until(child, "MERGING")
    assert len(printed) == CHILD_ROWS
    if moment == "temp-created":  # the new version is about to be written
        wait_for(child, lambda: temp_bytes(target) >= 0)
    elif moment == "temp-partial":  # the new version is half written
        wait_for(child, lambda: temp_bytes(target) > 100_000)
    elif moment == "replaced":  # the new version is in place, the journal not yet deleted
        wait_for(child, lambda: target.stat().st_ino != old_inode)
    elif isinstance(moment, float):
        time.sleep(moment)
    printed = kill_and_collect(child, printed)

    # the file is either the old complete version or the new complete one
    assert read_table(target).num_rows in (BASE_ROWS, BASE_ROWS + CHILD_ROWS)
    assert_recovered(results, set(printed))
    assert read_table(target).num_rows == BASE_ROWS + CHILD_ROWS
    assert pq.read_schema(target).names == [*COLUMNS, "child_seq"]


# --------------------------------------------------------------------------------------------
# one schema for every file: upgrade_dataset, and the dataset as its users load it
# --------------------------------------------------------------------------------------------

OLD_PAIR = "aaa-0.1/transformers-4.0.parquet"  # sorts first: directory reads start with it
AOT_PAIR = "aot_eager-2.13.0/transformers-5.24.0.parquet"


def write_older_version_file(path: Path) -> None:
    """A file of an older schema: few columns, int64 where SCHEMA has int32, ns timestamps, an
    old ``neuronsupport_schema``, and an extra column of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "model_id": pa.array(["zoo:old2", "zoo:old1"]),
            "result": pa.array(["FAIL(load)", "PASS"]),
            "neuron_cores": pa.array([4, 1], pa.int64()),
            "tested_at": pa.array([None, T0], pa.timestamp("ns", tz="UTC")),
            "legacy_note": pa.array(["from 0.x", None]),
        }
    ).replace_schema_metadata({"neuronsupport_schema": "0"})
    pq.write_table(table, path)


def schemas_of(results: Path) -> dict[Path, pa.Schema]:
    return {path: pq.read_schema(path) for path in data_files(results)}


def test_merge_upgrades_every_file_to_one_schema_that_loads_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import duckdb

    from pytest_neuronsupport.dataset.files import upgrade_dataset
    from pytest_neuronsupport.views.card import write_card

    results = tmp_path / "results"
    write_older_version_file(results / "data" / OLD_PAIR)
    append_rows(
        results,
        [
            (PAIR, row("zoo:llama", wall_s=1.5, hook_score=None)),  # all null: any type
            (PAIR, row("zoo:gpt2", "FAIL(gen)")),
            (NEURON_PAIR, row("zoo:bert", "EXCLUDED", hook_score=0.5)),  # float64
            (AOT_PAIR, row("zoo:t5", "FAIL(output)", hook_score=2)),  # int64
        ],
    )
    report = merge_journals(results)
    assert report.ok, report
    assert results / "data" / OLD_PAIR in report.upgraded  # not written by the merge

    schemas = schemas_of(results)
    assert len(schemas) == 4
    first = next(iter(schemas.values()))
    assert all(schema.equals(first, check_metadata=True) for schema in schemas.values())
    assert first.names == [*COLUMNS, "legacy_note", "hook_score"]  # first appearance, by path
    assert first.metadata == SCHEMA.metadata
    assert first.field("neuron_cores").type == pa.int32()
    assert first.field("hook_score").type == pa.float64()
    assert upgrade_dataset(results) == []  # nothing left to do

    expected = {
        "zoo:old1": "PASS",
        "zoo:old2": "FAIL(load)",
        "zoo:gpt2": "FAIL(gen)",
        "zoo:llama": "PASS",
        "zoo:bert": "EXCLUDED",
        "zoo:t5": "FAIL(output)",
    }
    scores = {"zoo:bert": 0.5, "zoo:t5": 2.0}

    # datasets, through the card's configs, without the network
    write_card(results)
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    everything = datasets.load_dataset(str(results), "all", split="train", cache_dir=str(cache))
    assert isinstance(everything, datasets.Dataset)
    assert dict(zip(everything["model_id"], everything["result"], strict=True)) == expected
    by_id = {record["model_id"]: record for record in everything}
    assert by_id["zoo:old1"]["wall_s"] is None and by_id["zoo:llama"]["wall_s"] == 1.5
    assert by_id["zoo:old2"]["neuron_cores"] == 4
    assert by_id["zoo:old2"]["legacy_note"] == "from 0.x"
    assert {k: v["hook_score"] for k, v in by_id.items() if v["hook_score"] is not None} == scores
    one = datasets.load_dataset(
        str(results), "aot_eager-2.13.0", split="train", cache_dir=str(cache)
    )
    assert isinstance(one, datasets.Dataset)
    assert one["model_id"] == ["zoo:t5"] and one["hook_score"] == [2.0]

    # pandas' directory read (hidden lock files skipped)
    df = pd.read_parquet(results / "data")
    assert dict(zip(df.model_id, df.result, strict=True)) == expected
    assert list(df.columns) == first.names
    assert df.set_index("model_id").wall_s.isna().to_dict() == {
        model_id: model_id != "zoo:llama" for model_id in expected
    }

    # duckdb's glob
    relation = duckdb.sql(
        f"SELECT model_id, result, wall_s, hook_score FROM '{results}/data/*/*.parquet'"
    )
    assert relation is not None
    found = relation.fetchall()
    assert {model_id: result for model_id, result, _, _ in found} == expected
    assert {model_id: wall_s for model_id, _, wall_s, _ in found}["zoo:old1"] is None
    assert {model_id: score for model_id, _, _, score in found if score is not None} == scores


def test_upgrade_dataset_rewrites_only_the_files_that_differ(tmp_path: Path) -> None:
    from pytest_neuronsupport.dataset.files import upgrade_dataset

    append_rows(tmp_path, [(PAIR, row("zoo:a")), (NEURON_PAIR, row("zoo:b"))])
    merge_journals(tmp_path)
    versions = {path: path.stat().st_ino for path in data_files(tmp_path)}
    assert upgrade_dataset(tmp_path) == []  # already one schema: schemas read, nothing else
    assert {path: path.stat().st_ino for path in data_files(tmp_path)} == versions
    assert not (tmp_path / "data" / ".upgrade.lock").exists()

    old = tmp_path / "data" / OLD_PAIR
    write_older_version_file(old)
    others = sorted(versions)
    assert upgrade_dataset(tmp_path) == sorted([old, *others])  # all gain legacy_note
    assert read_table(old, keep_extra=True).column("legacy_note").to_pylist() == [
        "from 0.x",
        None,
    ]
    assert ids(read_table(old)) == ["zoo:old1", "zoo:old2"]
    assert upgrade_dataset(tmp_path) == []

    # a file that already has the dataset's schema is left alone
    target = tmp_path / "data" / AOT_PAIR
    target.parent.mkdir(parents=True)
    table = rows_to_table([row("zoo:c", legacy_note="new")], SUPPORT)
    atomic_write(target, table)
    inode = target.stat().st_ino
    assert upgrade_dataset(tmp_path) == []
    assert target.stat().st_ino == inode
    schemas = schemas_of(tmp_path)
    assert len({schema.to_string(show_schema_metadata=True) for schema in schemas.values()}) == 1


def test_upgrade_dataset_unifies_types_or_falls_back_to_text(tmp_path: Path) -> None:
    append_rows(
        tmp_path,
        [
            (PAIR, row("zoo:a", tag=7, flag=True)),
            (NEURON_PAIR, row("zoo:b", tag="seven")),
        ],
    )
    report = merge_journals(tmp_path)
    assert report.ok and len(report.upgraded) == 2  # each written by the merge, then upgraded
    table = read_dataset(tmp_path, keep_extra=True)
    assert {path: schema.field("tag").type for path, schema in schemas_of(tmp_path).items()} == {
        path: pa.string() for path in data_files(tmp_path)
    }
    assert column_by_model(table, "tag") == {"zoo:a": "7", "zoo:b": "seven"}
    assert column_by_model(table, "flag") == {"zoo:a": True, "zoo:b": None}


def test_upgrade_dataset_reports_an_unreadable_file_and_upgrades_the_others(
    tmp_path: Path,
) -> None:
    from pytest_neuronsupport.dataset.files import upgrade_dataset

    append_rows(tmp_path, [(PAIR, row("zoo:a", hook="x")), (NEURON_PAIR, row("zoo:b"))])
    merge_journals(tmp_path)
    damaged = tmp_path / "data" / OLD_PAIR
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"PAR1 damaged")
    uncastable = tmp_path / "data" / AOT_PAIR
    uncastable.parent.mkdir(parents=True)
    pq.write_table(
        pa.table({"model_id": ["zoo:c"], "result": ["PASS"], "wall_s": ["x"]}), uncastable
    )

    with pytest.raises(UnreadableResultsError) as raised:
        upgrade_dataset(tmp_path)
    assert raised.value.path == damaged
    assert damaged.read_bytes() == b"PAR1 damaged"
    good = [tmp_path / "data" / PAIR, tmp_path / "data" / NEURON_PAIR]
    assert pq.read_schema(good[0]).equals(pq.read_schema(good[1]), check_metadata=True)

    unreadable: list[tuple[Path, str]] = []
    assert upgrade_dataset(tmp_path, unreadable=unreadable) == []
    assert [path for path, _ in unreadable] == [damaged, uncastable]
    assert "'wall_s' of type string" in unreadable[1][1]

    # a merge with no rows for them reports them as problems, not as files holding rows back
    append_rows(tmp_path, [(PAIR, row("zoo:d"))])
    report = merge_journals(tmp_path)
    assert report.unreadable == [] and report.journals_kept == []
    assert len(report.problems) == 2
    assert str(damaged) in report.problems[0] and str(uncastable) in report.problems[1]
    assert damaged.read_bytes() == b"PAR1 damaged"


#: What a Neuron run reports of itself (TorchNeuron's operators on the CPU, its metrics, its
#: cache) and what the sweep says of its device, as a verdict carries them.
NEURON_SAID: dict[str, Any] = {
    "graphs_cached": 1,
    "graphs_compiled": 2,
    "compiled": True,
    "cpu_ops": ["aten::argmax", "aten::rsqrt"],
    "fallback_execution": False,
    "backend_compile_s": 0.25,
    "fullgraph": True,
    "lnc": 2,
}


@pytest.mark.parametrize("name", ["support", "train", "perf"])
def test_every_table_holds_what_every_device_reports(name: str, tmp_path: Path) -> None:
    """A run's report on Neuron fits every table with its types (a row that cannot be
    written is the model's FAIL(other): the training table once refused ``cpu_ops``, a
    list), through the journal and the merge; the CPU's nulls too."""
    from pytest_neuronsupport.dataset.table import DEVICE_FIELDS
    from pytest_neuronsupport.dataset.tables import table_named
    from pytest_neuronsupport.pipeline.classify import verdict_fields

    table = table_named(name)
    assert set(NEURON_SAID) == {f.name for f in DEVICE_FIELDS}
    for field in DEVICE_FIELDS:
        assert table.schema.field(field.name).type == field.type, field.name
        assert table.docs[field.name] == SUPPORT.docs[field.name]
    keys = {"model_id": "zoo:x", "seq_len": 128, "configuration": "b1-s16-dp1"}
    keys = {k: v for k, v in keys.items() if k in table.key}  # the table's own key
    fields = verdict_fields({"result": "PASS", **NEURON_SAID})
    neuron = validate_row({**keys, **fields, "device": "neuron"}, table)
    cpu = validate_row({**keys, "model_id": "zoo:y", "result": "PASS", "device": "cpu"}, table)
    assert {k: neuron[k] for k in NEURON_SAID} == NEURON_SAID
    assert not set(neuron) - set(table.schema.names)  # no extra column: every one typed
    with Journal(tmp_path) as journal:
        for each in (neuron, cpu):
            journal.append(PAIR, each, table)
    assert merge_journals(tmp_path).ok
    written = {r["model_id"]: r for r in read_dataset(tmp_path, table=table).to_pylist()}
    assert {k: written["zoo:x"][k] for k in NEURON_SAID} == NEURON_SAID
    assert written["zoo:y"]["cpu_ops"] is None and written["zoo:y"]["lnc"] is None
