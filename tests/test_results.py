"""Tests of pytest_neuronsupport.results: schema, journals, merges, crash safety (real files,
real subprocesses killed with SIGKILL, no mocks)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport.results import (
    COLUMNS,
    RESULTS,
    SCHEMA,
    Journal,
    JournalWarning,
    Row,
    UnreadableResultsError,
    find_row,
    merge_journals,
    pair_dirname,
    pair_path,
    pair_relpath,
    read_dataset,
    read_journal,
    read_table,
    upgrade_file,
)

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
)


def row(model_id: str, result: str = "PASS", minutes: int = 0, **values: object) -> Row:
    """A row tested ``minutes`` after T0."""
    return Row.from_dict(
        {
            "model_id": model_id,
            "result": result,
            "tested_at": T0 + dt.timedelta(minutes=minutes),
            **values,
        }
    )


def full_row() -> Row:
    """A row with every column set, unicode and a long run script."""
    run_py = "".join(f"# line {i}: résumé — 模型 ✓\nx_{i} = {i} * 2\n" for i in range(3000))
    return Row(
        model_id="zoo:llama-ünïcode/模型",
        library="transformers",
        neuron_cores=2,
        runner="causal_lm",
        selection_rank=17,
        task="text-generation",
        revision="0123456789abcdef0123456789abcdef01234567",
        result="FAIL(output)",
        notes="note with\nnewline and \u2028 line separator",
        exclusion="",
        error="RuntimeError: boom ☃\nTraceback ...",
        cpu_match="3/4 tokens",
        english="The cat sat on the mat — ça va?",
        wall_s=12.5,
        hbm_peak_gb=3.25,
        hbm_capacity_gb=96.0,
        neuronx_cc="2.21.33363.0",
        library_version="5.24.0",
        transformers="5.24.0",
        accelerate="1.2.0",
        torch_neuronx="2.9.0.2.11",
        torch="2.13.0",
        nki="0.1.0",
        python="3.11.7",
        neuron_driver="2.24.7.0",
        tested_at=dt.datetime(
            2025, 6, 1, 14, 0, 0, 654321, tzinfo=dt.timezone(dt.timedelta(hours=2))
        ),
        run_py=run_py,
        device="neuron",
        backend="neuron",
        compiler="neuronxcc",
        compiler_version="2.21.33363.0",
        dtype="bfloat16",
        run_py_sha256="ab" * 32,
        reference_reproducible=True,
        first_divergence=7,
        divergence_margin=0.015625,
        near_tie_tolerance=1e-3,
        check=json.dumps({"margin": 0.015625, "tokens": [1, 2, 3], "label": "ü"}),
    )


def append_rows(
    results: Path, entries: list[tuple[str, Row]], session_id: str | None = None
) -> Path:
    with Journal(results, session_id=session_id) as journal:
        for pair, entry in entries:
            journal.append(pair, entry)
        return journal.path


def ids(table: pa.Table) -> list[str]:
    return sorted(table.column("model_id").to_pylist())


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
    assert RESULTS == (
        "PASS",
        "FAIL(load)",
        "FAIL(gen)",
        "FAIL(forward)",
        "FAIL(output)",
        "FAIL(other)",
        "EXCLUDED",
    )


@pytest.mark.parametrize("make", [full_row, lambda: Row(model_id="zoo:tiny", result="EXCLUDED")])
def test_row_round_trip_through_dict_and_json(make: object) -> None:
    assert callable(make)
    original = make()
    data = original.to_dict()
    assert tuple(data) == COLUMNS
    text = json.dumps(data)
    back = Row.from_dict(json.loads(text))
    assert back == original
    if original.tested_at is not None:
        assert data["tested_at"] == "2025-06-01T12:00:00.654321+00:00"
        assert back.tested_at is not None and back.tested_at.utcoffset() == dt.timedelta(0)
    else:
        assert data["tested_at"] is None
        assert all(data[name] is None for name in COLUMNS if name not in ("model_id", "result"))


def test_row_from_dict_accepts_datetime_and_z_suffix() -> None:
    from_string = Row.from_dict(
        {"model_id": "m", "result": "PASS", "tested_at": "2025-06-01T12:00:00Z"}
    )
    from_datetime = Row.from_dict(
        {"model_id": "m", "result": "PASS", "tested_at": dt.datetime(2025, 6, 1, 12, tzinfo=dt.UTC)}
    )
    assert from_string == from_datetime
    assert Row(model_id="m", result="PASS", wall_s=3).wall_s == 3.0


def test_row_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="bogus, other"):
        Row.from_dict({"model_id": "m", "result": "PASS", "other": 1, "bogus": 2})
    with pytest.raises(ValueError, match="result"):
        Row.from_dict({"model_id": "m"})
    with pytest.raises(ValueError, match="result"):
        Row(model_id="m", result="OK")
    with pytest.raises(ValueError, match="timezone"):
        Row(model_id="m", result="PASS", tested_at=dt.datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="int32"):
        Row(model_id="m", result="PASS", neuron_cores=2**31)
    with pytest.raises(ValueError, match="device"):
        Row(model_id="m", result="PASS", device="tpu")
    with pytest.raises(ValueError, match="JSON object"):
        Row(model_id="m", result="PASS", check="[1, 2]")
    with pytest.raises(ValueError, match="ISO"):
        Row.from_dict({"model_id": "m", "result": "PASS", "tested_at": "yesterday"})


def test_pair_names_are_sanitised(tmp_path: Path) -> None:
    assert pair_dirname("inductor", "2.13.0") == "inductor-2.13.0"
    assert pair_dirname("tests.backends:perturb", "2.13.0") == "tests.backends_perturb-2.13.0"
    assert pair_dirname("a b/c", "1+cu121") == "a_b_c-1+cu121"
    assert pair_dirname(".hidden", "1") == "-hidden-1"
    assert pair_relpath("neuronxcc", "2.21.33363.0", "transformers", "5.24.0") == NEURON_PAIR
    assert pair_path(tmp_path, "inductor", "2.13.0", "transformers", "5.24.0") == (
        tmp_path / "data" / PAIR
    )
    with pytest.raises(ValueError):
        pair_dirname("", "1")
    with Journal(tmp_path) as journal, pytest.raises(ValueError, match="invalid pair path"):
        journal.append("../escape.parquet", row("m"))


def test_row_round_trip_through_parquet(tmp_path: Path) -> None:
    rich = full_row()
    bare = Row(model_id="zoo:bare", result="FAIL(load)")
    append_rows(tmp_path, [(NEURON_PAIR, rich), (NEURON_PAIR, bare)])
    report = merge_journals(tmp_path)
    target = tmp_path / "data" / NEURON_PAIR
    assert report.written == {target: 2}
    assert report.ok
    assert find_row(tmp_path, NEURON_PAIR, rich.model_id) == rich
    assert find_row(tmp_path, NEURON_PAIR, bare.model_id) == bare
    assert find_row(tmp_path, NEURON_PAIR, "zoo:absent") is None
    assert find_row(tmp_path, PAIR, rich.model_id) is None
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
    assert llama is not None and llama.result == "PASS" and llama.error is None
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
    assert found is not None and found.result == "PASS"

    # same against a row already in the parquet file (late recovery of a dead journal)
    append_rows(tmp_path, [(PAIR, row("zoo:a", "FAIL(load)", minutes=2))])
    merge_journals(tmp_path)
    found = find_row(tmp_path, PAIR, "zoo:a")
    assert found is not None and found.result == "PASS"
    assert not list((tmp_path / "journal").glob("*.jsonl"))


def test_merging_the_same_journal_twice_is_idempotent(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row(f"zoo:m{i}", minutes=i)) for i in range(20)])
    saved = tmp_path / "saved.jsonl"
    shutil.copy(journal, saved)
    merge_journals(tmp_path)
    once = read_table(tmp_path / "data" / PAIR)
    shutil.copy(saved, journal)  # as if the merge was killed before deleting the journal
    merge_journals(tmp_path)
    twice = read_table(tmp_path / "data" / PAIR)
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

    # before upgrading, pandas' directory read loses the columns the old file lacks
    assert "wall_s" not in pd.read_parquet(tmp_path / "data").columns

    assert upgrade_file(old) is True
    assert upgrade_file(old) is False
    assert upgrade_file(tmp_path / "data" / PAIR) is False
    upgraded = pq.read_schema(old)
    assert upgraded.names == [*COLUMNS, "future_column"]  # unknown column kept, at the end
    assert pq.read_table(old).column("future_column").to_pylist() == ["kept", "too"]

    df = pd.read_parquet(tmp_path / "data")
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    llama = df[df.model_id == "zoo:llama"]
    assert len(llama) == 2 and set(llama.result) == {"PASS", "FAIL(gen)"}
    rich = df[df.model_id == full_row().model_id]
    assert rich.wall_s.tolist() == [12.5]

    # merging into the old file keeps the unknown column too
    append_rows(tmp_path, [("aaa-0.1/transformers-4.0.parquet", row("zoo:new", minutes=1))])
    merge_journals(tmp_path)
    merged = pq.read_table(old)
    assert merged.column_names == [*COLUMNS, "future_column"]
    assert dict(
        zip(
            merged.column("model_id").to_pylist(),
            merged.column("future_column").to_pylist(),
            strict=True,
        )
    ) == {
        "zoo:llama": "too",
        "zoo:new": None,
        "zoo:old1": "kept",
    }


def test_merge_into_old_file_without_upgrade(tmp_path: Path) -> None:
    old = tmp_path / "data" / PAIR
    write_old_file(old)
    append_rows(tmp_path, [(PAIR, row("zoo:llama", minutes=1))])
    merge_journals(tmp_path)
    table = read_table(old)
    assert ids(table) == ["zoo:llama", "zoo:old1"]
    assert pq.read_schema(old).names[: len(COLUMNS)] == list(COLUMNS)


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
    assert [entry.model_id for _, entry in entries] == ["zoo:m0", "zoo:m1", "zoo:m2"]
    problems: list[str] = []
    assert len(read_journal(journal, problems=problems)) == 3
    assert len(problems) == 1 and ":4: torn last line" in problems[0]

    # reopening the session cuts the torn tail off before appending
    with Journal(tmp_path, session_id="torn") as reopened:
        reopened.append(PAIR, row("zoo:m3"))
    problems = []
    assert [e.model_id for _, e in read_journal(journal, problems=problems)] == [
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


def test_corrupt_middle_line_is_reported_and_journal_kept(tmp_path: Path) -> None:
    journal = append_rows(tmp_path, [(PAIR, row("zoo:a")), (PAIR, row("zoo:b"))])
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([lines[0], b"{not json", lines[1], b""]))
    with pytest.warns(JournalWarning, match=r":2: corrupt line"):
        assert [e.model_id for _, e in read_journal(journal)] == ["zoo:a", "zoo:b"]
    report = merge_journals(tmp_path)
    assert report.journals_kept == [journal] and journal.exists()
    assert any(":2: corrupt line" in problem for problem in report.problems)
    assert ids(read_dataset(tmp_path)) == ["zoo:a", "zoo:b"]


def test_journal_session_is_exclusive(tmp_path: Path) -> None:
    with Journal(tmp_path, session_id="only") as journal:
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
from pytest_neuronsupport.results import Journal, Row, merge_journals

results, mode, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
pair = "inductor-2.13.0/transformers-5.24.0.parquet"
rng = random.Random(int(sys.argv[4]))
journal = Journal(results)
for i in range(count):
    model_id = f"zoo:child{i:06d}"
    run_py = "".join(rng.choice("abcdefghij\n") for _ in range(300))
    journal.append(pair, Row(model_id=model_id, result="PASS", run_py=run_py,
                             tested_at=dt.datetime.now(dt.UTC)))
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
    append_rows(results, [(PAIR, row("zoo:before"))])
    merge_journals(results)
    child = start_child(tmp_path, results, "append", 100_000, seed=after_rows)
    assert child.stdout is not None
    printed = [child.stdout.readline().strip() for _ in range(after_rows)]
    printed = kill_and_collect(child, printed)
    assert len(printed) >= after_rows
    assert_recovered(results, {"zoo:before", *printed})


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
