"""Choosing models as the dataset card does: positions, the selection, exclusions, the list.

The rules are tested here on ``ModelInfo`` objects of the real client, served by a stand-in for
the Hub's listing (no HTTP); ``test_hub.py`` runs ``neuronsupport select`` against a loopback
Hub.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub.hf_api import ModelInfo

from pytest_neuronsupport import selection
from pytest_neuronsupport.dataset.files import read_table, set_selection
from pytest_neuronsupport.modellist import parse
from pytest_neuronsupport.selection import Candidate, Limits
from tests.results_for_tests import result_row, write_results


def info(
    model_id: str, task: str, downloads: int = 0, trending: int = 0, **extra: Any
) -> ModelInfo:
    """A ModelInfo as the client parses the Hub's listing."""
    return ModelInfo(  # type: ignore[no-untyped-call]
        id=model_id,
        sha=hashlib.sha1(model_id.encode()).hexdigest(),
        pipeline_tag=task,
        downloads=downloads,
        trendingScore=trending,
        tags=extra.pop("tags", ["transformers"]),
        library_name="transformers",
        **extra,
    )


class HubListingForTests:
    """Stands in for ``HfApi.list_models``: the Hub's orders over a fixed set of models."""

    def __init__(self, models: list[ModelInfo]) -> None:
        self.models = models
        self.calls: list[dict[str, Any]] = []

    def list_models(self, **kwargs: Any) -> list[ModelInfo]:
        self.calls.append(kwargs)
        assert kwargs["filter"] == "transformers" and "safetensors" in kwargs["expand"]
        field = kwargs["sort"]  # the ModelInfo attribute of the same name
        matching = [m for m in self.models if m.pipeline_tag == kwargs["pipeline_tag"]]
        matching.sort(key=lambda m: (-getattr(m, field), m.id))
        return matching[: kwargs["limit"]]


def test_a_model_takes_its_best_position_over_every_ranking() -> None:
    hub = HubListingForTests(
        [
            info("a/popular", "text-generation", downloads=900, trending=1),
            info("b/trending", "text-generation", downloads=10, trending=99),
            info("c/third", "text-generation", downloads=500, trending=50),
            info("d/bert", "fill-mask", downloads=1000, trending=5),
            info("e/bert-2", "fill-mask", downloads=800, trending=6),
        ]
    )
    found = selection.candidates(hub, ("text-generation", "fill-mask"), depth=10)
    positions = {m: c.position for m, c in found.items()}
    # a: 1st by downloads; b: 1st by trending; c: 2nd in both; d: 1st, e: 1st by trending
    assert positions == {"a/popular": 1, "b/trending": 1, "c/third": 2, "d/bert": 1, "e/bert-2": 1}
    assert [(c["pipeline_tag"], c["sort"]) for c in hub.calls] == [
        ("text-generation", "downloads"),
        ("text-generation", "trending_score"),
        ("fill-mask", "downloads"),
        ("fill-mask", "trending_score"),
    ]
    entries = selection.select(found, top=2, limits=Limits())
    # ties at position 1 go to more downloads, then to the id
    assert [(e.id, e.selection_rank) for e in entries] == [
        ("a/popular", 1),
        ("b/trending", 2),
        ("d/bert", None),
        ("e/bert-2", None),
        ("c/third", None),  # a text-generation model past --top is in the rest
    ]


def test_depth_cuts_each_ranking() -> None:
    models = [info(f"m/{i}", "fill-mask", downloads=i, trending=i) for i in range(10)]
    hub = HubListingForTests(models)
    found = selection.candidates(hub, ("fill-mask",), depth=3)
    assert sorted(found) == ["m/7", "m/8", "m/9"]


@pytest.mark.parametrize(
    ("extra", "category", "why"),
    [
        ({"config": {"quantization_config": {"quant_method": "awq"}}}, "quantized", "awq"),
        ({"gguf": {"total": 1}}, "quantized", "GGUF"),
        ({"tags": ["transformers", "custom_code"]}, "trust-remote-code", "custom_code"),
        ({"config": {"auto_map": {"AutoModel": "x.Y"}}}, "trust-remote-code", "auto_map"),
        (
            {"transformersInfo": {"auto_model": "AutoModel", "custom_class": "mine.Model"}},
            "trust-remote-code",
            "mine.Model",
        ),
        ({"safetensors": {"parameters": {"BF16": 10**12}, "total": 10**12}}, "too-large", "16"),
        ({"gated": "manual"}, "gated", "no Hugging Face token"),
    ],
)
def test_each_exclusion_from_the_hubs_metadata(
    extra: dict[str, Any], category: str, why: str
) -> None:
    model = Candidate.from_info(info("org/m", "text-generation", **extra), "text-generation", 1)
    excluded = selection.exclusion(model, Limits(max_cores=16, core_memory_gb=24.0))
    assert excluded is not None and excluded[0] == category and why in excluded[1]


def test_size_and_gating_depend_on_the_limits() -> None:
    params = 100 * 10**9  # 200 GB in bf16
    big = info("org/big", "text-generation", safetensors={"parameters": {}, "total": params})
    model = Candidate.from_info(big, "text-generation", 1)
    assert selection.exclusion(model, Limits(max_cores=16, core_memory_gb=12.0)) is not None
    assert selection.exclusion(model, Limits(max_cores=16, core_memory_gb=24.0)) is None
    gated = Candidate.from_info(info("org/g", "fill-mask", gated="auto"), "fill-mask", 1)
    assert selection.exclusion(gated, Limits(has_token=True)) is None


def test_excluded_models_take_no_rank_and_the_list_reads_back(tmp_path: Path) -> None:
    hub = HubListingForTests(
        [
            info("org/quantized", "text-generation", 100, 9, tags=["transformers", "gguf"]),
            info("org/first", "text-generation", 90, 8),
            info("org/second", "text-generation", 80, 7),
            info("org/encoder", "feature-extraction", 70, 1),
        ]
    )
    entries = selection.select(selection.candidates(hub, depth=5), top=5, limits=Limits())
    text = selection.list_text(entries, {"endpoint": "http://127.0.0.1:1", "at": "now"})
    assert text.startswith("# Written by `neuronsupport select`.\n# endpoint: http://127.0.0.1:1\n")
    path = tmp_path / "models.toml"
    path.write_text(text, encoding="utf-8")
    data = tomllib.loads(text)["model"]
    assert [(m["id"], m.get("selection_rank")) for m in data] == [
        ("org/first", 1),
        ("org/second", 2),
        ("org/quantized", None),
        ("org/encoder", None),
    ]
    assert data[2]["exclusion"] == "quantized" and data[2]["notes"] == "a GGUF repository"
    assert all(len(m["revision"]) == 40 for m in data)
    # what the sweep reads: the same entries, with the exclusion decided ahead
    specs = parse(path)
    assert [s.id for s in specs] == [m["id"] for m in data]
    assert specs[2].exclusion == "quantized" and specs[0].revision == data[0]["revision"]


def test_selection_rank_means_the_latest_selection(tmp_path: Path) -> None:
    results = write_results(
        tmp_path,
        [
            result_row("org/a", selection_rank=1),
            result_row("org/b", selection_rank=2),
            result_row("org/left", "FAIL(gen)", selection_rank=3),
        ],
    )
    pair = results / "data" / "inductor-2.13.0" / "transformers-5.24.0.parquet"
    assert set_selection(pair, {"org/b": 1, "org/a": 2, "org/new": 3}) is True
    table = read_table(pair).to_pylist()
    ranks = {row["model_id"]: (row["selection_rank"], row["result"]) for row in table}
    assert ranks == {"org/a": (2, "PASS"), "org/b": (1, "PASS"), "org/left": (None, "FAIL(gen)")}
    assert set_selection(pair, {"org/b": 1, "org/a": 2}) is False  # already so: not rewritten
    assert set_selection(tmp_path / "absent.parquet", {"x": 1}) is False


def test_a_sweeps_lists_rank_the_pairs_rows_at_its_end(tmp_path: Path) -> None:
    """``apply_ranks``: the ranks of the sweep's lists, on every row of the pair it wrote."""
    from pytest_neuronsupport.runners import Runners

    results = write_results(
        tmp_path, [result_row("zoo:bert", selection_rank=2), result_row("org/gone")]
    )
    pair = results / "data" / "inductor-2.13.0" / "transformers-5.24.0.parquet"
    ranked = tmp_path / "ranked.toml"
    ranked.write_text(
        '[[model]]\nid = "zoo:gpt2"\nselection_rank = 1\n\n[[model]]\nid = "org/gone"\n'
        "selection_rank = 2\n",
        encoding="utf-8",
    )
    assert selection.apply_ranks([ranked], Runners.builtin(), pair) is None
    table = read_table(pair).to_pylist()
    ranks = {row["model_id"]: row["selection_rank"] for row in table}
    assert ranks == {"zoo:bert": None, "org/gone": 2}  # bert is no longer selected
    # lists without a selection leave the ranks as they are; a list with an error, too
    plain = tmp_path / "plain.toml"
    plain.write_text('[[model]]\nid = "zoo:bert"\n', encoding="utf-8")
    broken = tmp_path / "broken.toml"
    broken.write_text('[[model]]\nid = "zoo:bert"\nselection_rank = 0\n', encoding="utf-8")
    for lists in ([plain], [broken]):
        assert selection.apply_ranks(lists, Runners.builtin(), pair) is None
        assert read_table(pair).to_pylist() == table
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(b"not parquet")
    problem = selection.apply_ranks([ranked], Runners.builtin(), damaged)
    assert problem is not None and problem.startswith(f"{damaged}: selection ranks not updated")
