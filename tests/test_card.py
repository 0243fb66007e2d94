"""Tests of the dataset card (pytest_neuronsupport.views.card) and of the constants it is made
from (COLUMN_DOCS, RESULT_MEANINGS): real datasets written through a journal and a merge."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from datasets.utils.metadata import MetadataConfigs

from pytest_neuronsupport.dataset.files import UnreadableResultsError
from pytest_neuronsupport.dataset.layout import data_files
from pytest_neuronsupport.dataset.support import COLUMN_DOCS, COLUMNS, RESULT_MEANINGS, SCHEMA
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.card import ALL_CONFIG, SPLIT, card_text, write_card
from pytest_neuronsupport.views.coverage import coverage
from tests.results_for_tests import result_row, write_results

CELL_SPLIT = re.compile(r"(?<!\\)\|")


def sample_results(results: Path) -> Path:
    """Three pairs (two compilers, two library versions), every result, a hook's column."""
    rows = [
        result_row("zoo:llama", compiled=False),  # a PASS that compiled nothing
        result_row("zoo:gpt2", "FAIL(gen)"),
        result_row("zoo:bert", "EXCLUDED", exclusion="too-large"),
        result_row("zoo:t5", "FAIL(output)", library_version="5.25.0"),
        result_row("zoo:llama", compiler="aot_eager", hook_tag="nightly", checked_by="none"),
        result_row("zoo:bart", "FAIL(load)", compiler="aot_eager"),
        result_row("zoo:bert", "FAIL(forward)", compiler="aot_eager"),
        result_row("zoo:qwen3", "FAIL(other)", compiler="aot_eager"),
    ]
    return write_results(results, rows)


def split_card(text: str) -> tuple[dict[str, Any], str]:
    """The card's YAML front matter, parsed, and its Markdown body."""
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(front)
    assert isinstance(meta, dict)
    return meta, body


def table_rows(body: str, first_header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table whose header starts with ``first_header``,
    split on unescaped ``|`` only; the header row first."""
    lines = body.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in CELL_SPLIT.split(line)[1:-1]]
        if not all(set(cell) <= {"-"} for cell in cells):
            rows.append(cells)
    width = len(rows[0])
    assert all(len(row) == width for row in rows), "a cell broke its table"
    return rows


# --------------------------------------------------------------------------------------------
# the constants the card is made from
# --------------------------------------------------------------------------------------------


def test_column_docs_cover_exactly_the_schema() -> None:
    assert list(COLUMN_DOCS) == list(COLUMNS) == SCHEMA.names
    for name, doc in COLUMN_DOCS.items():
        assert doc.strip() == doc and doc.endswith("."), name
        assert "\n" not in doc, name


def test_result_meanings_cover_every_result() -> None:
    assert list(RESULT_MEANINGS) == list(Result)
    for result, meaning in RESULT_MEANINGS.items():
        assert meaning.endswith(".") and "\n" not in meaning, result
    assert "skipped" in RESULT_MEANINGS[Result.EXCLUDED]
    assert "passed" in RESULT_MEANINGS[Result.PASS]
    assert all("failed" in RESULT_MEANINGS[r] for r in Result if r.value.startswith("FAIL"))


# --------------------------------------------------------------------------------------------
# the YAML header
# --------------------------------------------------------------------------------------------


def test_yaml_header_configs_name_existing_files(tmp_path: Path) -> None:
    results = sample_results(tmp_path / "results")
    meta, _ = split_card(card_text(results))
    assert meta["license"] == "apache-2.0"
    assert meta["pretty_name"] and meta["tags"]
    folders = sorted({path.parent.name for path in data_files(results)})
    assert folders == ["aot_eager-2.13.0", "inductor-2.13.0"]
    configs = meta["configs"]
    assert [config["config_name"] for config in configs] == [ALL_CONFIG, *folders]
    assert configs[0]["default"] is True
    assert not any(config.get("default") for config in configs[1:])
    for config in configs:
        [data] = config["data_files"]
        assert set(data) == {"split", "path"} and data["split"] == SPLIT
        matched = sorted(results.glob(data["path"]))
        name = config["config_name"]
        expected = [p for p in data_files(results) if name in (ALL_CONFIG, p.parent.name)]
        assert matched == expected and matched, name

    # as datasets itself reads it: valid data_files, "all" the default config
    parsed = MetadataConfigs.from_dataset_card_data(meta)
    assert list(parsed) == [ALL_CONFIG, *folders]
    assert parsed.get_default_config_name() == ALL_CONFIG


def test_config_names_that_look_like_yaml_scalars_stay_strings(tmp_path: Path) -> None:
    results = write_results(
        tmp_path / "results", [result_row("zoo:a", compiler="2001", compiler_version="12-14")]
    )
    meta, _ = split_card(card_text(results))
    assert [config["config_name"] for config in meta["configs"]] == [ALL_CONFIG, "2001-12-14"]
    assert meta["configs"][1]["data_files"][0]["path"] == "data/2001-12-14/*.parquet"


def test_empty_dataset_has_no_configs(tmp_path: Path) -> None:
    meta, body = split_card(card_text(tmp_path / "absent"))
    assert "configs" not in meta
    assert "No results yet" in body
    assert write_card(tmp_path / "absent").is_file()


# --------------------------------------------------------------------------------------------
# the prose
# --------------------------------------------------------------------------------------------


def test_every_column_and_result_appears_with_its_meaning(tmp_path: Path) -> None:
    results = sample_results(tmp_path / "results")
    _, body = split_card(card_text(results))

    columns = table_rows(body, "column")
    assert columns[0] == ["column", "type", "meaning"]
    by_name = {row[0]: row for row in columns[1:]}
    assert list(by_name) == [f"`{name}`" for name in [*COLUMNS, "hook_tag"]]
    for field in SCHEMA:
        _, kind, meaning = by_name[f"`{field.name}`"]
        assert kind == f"`{field.type}`"
        assert meaning == COLUMN_DOCS[field.name].replace("|", "\\|")
    assert by_name["`tested_at`"][1] == "`timestamp[us, tz=UTC]`"
    assert "hook" in by_name["`hook_tag`"][2] and by_name["`hook_tag`"][1] == "`string`"

    meanings = table_rows(body, "result")
    assert meanings[0] == ["result", "meaning", "rows"]
    assert [row[0] for row in meanings[1:]] == [f"`{result.value}`" for result in Result]
    for result, row in zip(Result, meanings[1:], strict=True):
        assert row[1] == RESULT_MEANINGS[result]
        assert row[2] == "2" if result is Result.PASS else "1"

    for needle in (
        "SELECT",
        "FROM 'data/*/*.parquet'",
        'pd.read_parquet("data")',
        f'load_dataset(".", "{ALL_CONFIG}", split="{SPLIT}")',
        'load_dataset(".", "aot_eager-2.13.0"',
        "row.run_py",
        "python run.py",
        "data/<compiler>-<compiler_version>/<library>-<library_version>.parquet",
    ):
        assert needle in body, needle


def test_pairs_are_listed_with_counts_per_result(tmp_path: Path) -> None:
    results = sample_results(tmp_path / "results")
    _, body = split_card(card_text(results))
    pairs = table_rows(body, "config")
    others = [result.value for result in Result if result is not Result.PASS]
    header = ["config", "file", "rows", "PASS", "PASS unchecked", "PASS compiled nothing"]
    assert pairs[0] == [*header, *others]
    counts = {(row[0], row[1]): row[2:] for row in pairs[1:]}
    # columns: rows, PASS, PASS unchecked, PASS compiled nothing, FAIL(load|gen|forward|train|
    # output|other), EXCLUDED
    assert counts == {
        ("`aot_eager-2.13.0`", "`transformers-5.24.0.parquet`"): list("41101010010"),
        ("`inductor-2.13.0`", "`transformers-5.24.0.parquet`"): list("31010100001"),
        ("`inductor-2.13.0`", "`transformers-5.25.0.parquet`"): list("10000000100"),
    }
    assert "Of the 2 `PASS` rows, 1 compared their output with nothing" in body
    assert "and 1 compiled nothing (`compiled` = false" in body


def test_the_support_matrix_by_architecture_is_the_coverage_commands(tmp_path: Path) -> None:
    llama: dict[str, Any] = {"architecture": "LlamaForCausalLM", "model_type": "llama"}
    odd: dict[str, Any] = {"architecture": "Odd|Net\nForCausalLM", "model_type": "odd"}  # by hand
    rows = [
        result_row("zoo:llama", **llama),
        result_row("meta/Llama-3-8B", **llama, neuron_cores=2, checked_by="none"),
        result_row("meta/Llama-3-8B", "FAIL(gen)", compiler="aot_eager", **llama),
        result_row("org/odd", "EXCLUDED", exclusion="no-runner", **odd),
        result_row("org/before"),  # no architecture: named under the table
    ]
    results = write_results(tmp_path / "results", rows)
    _, body = split_card(card_text(results))
    assert "## Support by architecture" in body
    matrix = coverage(results)
    shown = table_rows(body, "model type")
    expected = [list(matrix.grid.header), *map(list, matrix.grid.cells)]
    assert shown == [
        [cell.replace("\n", " ").replace("|", "\\|") for cell in line] for line in expected
    ]
    aot, inductor = (
        "aot_eager-2.13.0 / transformers-5.24.0",
        "inductor-2.13.0 / transformers-5.24.0",
    )
    assert shown[0][2:4] == [aot, inductor]
    assert shown[1][:4] == ["llama", "LlamaForCausalLM", "FAIL(gen)", "1 PASS, 1 PASS unchecked"]
    assert shown[1][-1] == "meta/Llama-3-8B, zoo:llama"
    assert shown[2][1] == "Odd\\|Net ForCausalLM"  # escaped: the table keeps its columns
    assert matrix.note is not None and f"\n{matrix.note}\n" in body
    # no row names its architecture: no section
    bare = write_results(tmp_path / "bare", [result_row("org/before")])
    assert "## Support by architecture" not in split_card(card_text(bare))[1]


def test_table_cells_survive_pipes_and_newlines_in_data(tmp_path: Path) -> None:
    """A column name with ``|``, a newline and backticks (a file written by hand) stays in
    its cell; so does a meaning with ``|`` in it (near_tie_tolerance's ``|z|``)."""
    results = tmp_path / "results"
    target = results / "data" / "inductor-2.13.0" / "transformers-5.24.0.parquet"
    target.parent.mkdir(parents=True)
    pq.write_table(
        pa.table({"model_id": ["zoo:a"], "result": ["PASS"], "odd|name\n`x`": [1]}), target
    )
    _, body = split_card(card_text(results))
    columns = table_rows(body, "column")
    assert len(columns) == 1 + len(COLUMNS) + 1
    assert columns[-1][0] == "`` odd\\|name `x` ``"
    near_tie = next(row for row in columns if row[0] == "`near_tie_tolerance`")
    assert "max \\|z\\|" in near_tie[2]


def test_rerun_example_uses_a_recorded_model(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results", [result_row("org/model-1.5")])
    _, body = split_card(card_text(results))
    assert 'df[df.model_id == "org/model-1.5"]' in body


def test_the_buckets_of_shared_compiled_graphs_are_named_with_their_sync_line(
    tmp_path: Path,
) -> None:
    """As the public dataset's card names its NEFF cache: each bucket folder the rows name,
    with the line that copies it; a value no shell line should hold is left out."""
    folder = "hf://buckets/org/neff/neuronxcc-2.21.0+local"
    odd = "hf://buckets/org/neff/x; rm -rf ~"
    rows = [
        result_row("zoo:llama", compile_cache=folder),
        result_row("zoo:bert", compile_cache=folder),
        result_row("zoo:t5", compile_cache=odd),
        result_row("zoo:gpt2"),
    ]
    _, body = split_card(card_text(write_results(tmp_path / "results", rows)))
    section = body.split("## Compiled graphs", 1)[1]
    assert f"hf buckets sync {folder} /tmp/neff_cache\n" in section
    assert section.count("hf buckets sync") == 1 and "rm -rf" not in body
    assert "export TORCH_NEURONX_NEFF_CACHE_DIR=/tmp/neff_cache" in section
    plain = card_text(write_results(tmp_path / "plain", [result_row("zoo:gpt2")]))
    assert "## Compiled graphs" not in plain


# --------------------------------------------------------------------------------------------
# writing it
# --------------------------------------------------------------------------------------------


def test_write_card_replaces_readme_atomically(tmp_path: Path) -> None:
    results = sample_results(tmp_path / "results")
    (results / "README.md").write_text("an old card\n")
    path = write_card(results)
    assert path == results / "README.md"
    assert path.read_text(encoding="utf-8") == card_text(results)
    assert not list(results.glob(".README.md.*"))


def test_unreadable_file_raises_and_keeps_the_old_card(tmp_path: Path) -> None:
    results = sample_results(tmp_path / "results")
    old = write_card(results).read_text(encoding="utf-8")
    damaged = data_files(results)[0]
    damaged.write_bytes(b"PAR1 damaged")
    with pytest.raises(UnreadableResultsError) as raised:
        write_card(results)
    assert raised.value.path == damaged
    assert (results / "README.md").read_text(encoding="utf-8") == old
