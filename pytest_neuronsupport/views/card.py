"""The dataset card: ``<results>/README.md``, so that the results load anywhere.

Its YAML header is what the Hugging Face dataset viewer and ``datasets.load_dataset`` read:
one config over every pair (``all``, the default) and one per compiler folder
(``<compiler>-<version>``), each a single ``train`` split of parquet files. Its prose (what is
tested, the results, the support matrix by architecture, the layout, the columns, how to query
and rerun) is made from the code's own constants
(:data:`~pytest_neuronsupport.dataset.support.SCHEMA`,
:data:`~pytest_neuronsupport.dataset.support.COLUMN_DOCS`,
:data:`~pytest_neuronsupport.dataset.support.RESULT_MEANINGS`) and from the data (the pairs, their
row and result counts, the matrix of :mod:`.coverage`, the extra columns), so it cannot drift
from either.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import yaml

from pytest_neuronsupport.compilecache import SHARED_FOLDER
from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.dataset.files import read_table
from pytest_neuronsupport.dataset.layout import data_files
from pytest_neuronsupport.dataset.support import (
    COLUMN_DOCS,
    RESULT_MEANINGS,
    SCHEMA,
    SCHEMA_VERSION,
)
from pytest_neuronsupport.pipeline.classify import COMPILED_NOTHING, compiled_nothing
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.coverage import coverage

__all__ = ["ALL_CONFIG", "LICENSE", "PRETTY_NAME", "SPLIT", "TAGS", "card_text", "write_card"]

ALL_CONFIG: Final = "all"
"""Name of the config over every pair (the default one)."""
SPLIT: Final = "train"
"""The one split of every config."""
LICENSE: Final = "apache-2.0"
"""The card's ``license`` (the plugin's own)."""
PRETTY_NAME: Final = "pytest-neuronsupport results"
"""The card's ``pretty_name`` and title."""
TAGS: Final = ("torch-compile", "transformers", "aws-neuron", "compiler", "model-support")
"""The card's ``tags``."""

_SAFE_ID: Final = re.compile(r"[A-Za-z0-9._:/+-]+")
_EXAMPLE_ID: Final = "zoo:llama"

_INTRO: Final = """\
Which Hugging Face models run unmodified through `torch.compile`, as recorded by sweeps of the
pytest plugin `pytest-neuronsupport`. Each row is one model tested with one compiler (a
`torch.compile` backend and its version: `neuronxcc` on AWS Trainium, `inductor`, `aot_eager`...
elsewhere) and one version of the library that loads it (`transformers`).

## What is tested

Each model's test is a standalone script, `run.py`, kept in the row's `run_py`. It loads the
checkpoint with `transformers` on as many cores as its bf16 weights need, compiles its forward
pass with the row's `backend`, and either generates tokens greedily from a fixed prompt
(decoders, seq2seq and multimodal models) or runs one forward pass (encoders); the script holds
the exact inputs and parameters. The output is held to the same checkpoint run eagerly on the
CPU in fp32, twice (to check that the reference is reproducible): equal, or differing only at a
near-tie (a margin within the numerical noise of the device's dtype), passes. When the CPU
comparison cannot run, an instruct model may judge whether the generated text is fluent English
(`english`). `checked_by` says which of these decided (`cpu`, `near-tie`, `judge`), or `none`:
a `PASS` that compared nothing, on having run, counted apart below. Every number that decided
a verdict is kept in the row (`check`). `PASS` says nothing about throughput or longer
generations.
"""


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: no line breaks, ``|`` escaped."""
    return re.sub(r"\r\n|\r|\n", " ", text).replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as an inline code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"


def _row(*cells: object) -> str:
    """One Markdown table row; every cell escaped."""
    return "| " + " | ".join(_cell(str(cell)) for cell in cells) + " |"


def _table(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> list[str]:
    return [_row(*header), "|" + "---|" * len(header), *(_row(*row) for row in rows)]


class _Pair:
    """What the card says about one data file."""

    def __init__(self, path: Path, table: pa.Table) -> None:
        self.folder = path.parent.name
        self.file = path.name
        self.rows = table.num_rows
        self.results = Counter(table.column("result").to_pylist())
        results, checked = (table.column(n).to_pylist() for n in ("result", "checked_by"))
        self.unchecked = sum(
            r == Result.PASS and c == "none" for r, c in zip(results, checked, strict=True)
        )
        compiled = table.column("compiled").to_pylist()
        self.compiled_nothing = sum(
            compiled_nothing({"result": r, "compiled": c})
            for r, c in zip(results, compiled, strict=True)
        )
        self.extras = {f.name: str(f.type) for f in table.schema if f.name not in SCHEMA.names}
        self.first_id = next(iter(table.column("model_id").to_pylist()), None)
        shared = table.column("compile_cache").to_pylist()
        self.compile_caches = {c for c in shared if c and SHARED_FOLDER.fullmatch(c)}


def _pairs(results_dir: Path) -> list[_Pair]:
    """Every data file, read through the schema (extras kept)."""
    return [_Pair(path, read_table(path, keep_extra=True)) for path in data_files(results_dir)]


def _header(folders: list[str]) -> str:
    """The YAML front matter: license, name, tags and (when there is data) the configs."""
    meta: dict[str, Any] = {"license": LICENSE, "pretty_name": PRETTY_NAME, "tags": list(TAGS)}
    if folders:
        configs: list[dict[str, Any]] = [
            {
                "config_name": ALL_CONFIG,
                "default": True,
                "data_files": [{"split": SPLIT, "path": "data/*/*.parquet"}],
            }
        ]
        configs.extend(
            {
                "config_name": folder,
                "data_files": [{"split": SPLIT, "path": f"data/{folder}/*.parquet"}],
            }
            for folder in folders
        )
        meta["configs"] = configs
    text = yaml.safe_dump(meta, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return f"---\n{text}---\n"


def _results_section(pairs: list[_Pair]) -> list[str]:
    total: Counter[str] = Counter()
    for pair in pairs:
        total.update(pair.results)
    rows: list[tuple[object, ...]] = [
        (_code(result.value), RESULT_MEANINGS[result], total[result.value]) for result in Result
    ]
    return [
        "## Results",
        "",
        "The `result` column holds one of these values (rows: over every pair):",
        "",
        *_table(("result", "meaning", "rows"), rows),
        "",
        f"Of the {total[Result.PASS.value]} `PASS` rows, {sum(p.unchecked for p in pairs)} "
        "compared their output with nothing (`checked_by` = `none`: no CPU reference, no "
        "judge; the reason ends `notes`), and "
        f"{sum(p.compiled_nothing for p in pairs)} compiled nothing (`compiled` = false: the "
        f"model ran as it is, not a compiler `PASS`; `{COMPILED_NOTHING}`).",
    ]


def _pairs_section(pairs: list[_Pair]) -> list[str]:
    if not pairs:
        return ["## Pairs", "", "No results yet: `data/` holds no parquet file."]
    others = [result.value for result in Result if result is not Result.PASS]
    header = (
        "config",
        "file",
        "rows",
        Result.PASS.value,
        "PASS unchecked",
        COMPILED_NOTHING,
        *others,
    )
    rows: list[tuple[object, ...]] = [
        (
            _code(pair.folder),
            _code(pair.file),
            pair.rows,
            pair.results[Result.PASS.value],
            pair.unchecked,
            pair.compiled_nothing,
            *(pair.results[result] for result in others),
        )
        for pair in pairs
    ]
    return [
        "## Pairs",
        "",
        f"One file per compiler and library version; each compiler folder is a config of its "
        f"own, `{ALL_CONFIG}` holds them all.",
        "",
        *_table(header, rows),
    ]


def _coverage_section(results_dir: Path) -> list[str]:
    """The support matrix by architecture (:mod:`.coverage`, as ``neuronsupport coverage``
    prints it), when a row names its architecture."""
    matrix = coverage(results_dir)
    if not matrix.grid.cells:
        return []
    grid = matrix.grid
    lines = [
        "## Support by architecture",
        "",
        "One line per model type and head class (`model_type`, `architecture`: from each "
        "checkpoint's config), as `neuronsupport coverage` prints it: the latest result in each "
        "pair (`-`: not tested there; several models: how many came to each result), the "
        "runner, cores, graph breaks, the cause of its failures (grouped as `neuronsupport "
        "failures` groups them) and the models it covers.",
        "",
        *_table(grid.header, [tuple(line) for line in grid.cells]),
    ]
    return [*lines, "", matrix.note, ""] if matrix.note else [*lines, ""]


def _layout_section() -> list[str]:
    return [
        "## Layout",
        "",
        "```",
        "data/<compiler>-<compiler_version>/<library>-<library_version>.parquet",
        "```",
        "",
        "At most one row per `model_id` in a file: a later run of a model replaces its row in "
        "its pair, and a model that leaves the sweep's list keeps its row. Every file has the "
        f"same columns (schema version {SCHEMA_VERSION}, in the parquet metadata key "
        "`neuronsupport_schema`), so the files load together.",
    ]


def _columns_section(pairs: list[_Pair]) -> list[str]:
    rows: list[tuple[object, ...]] = [
        (_code(field.name), _code(str(field.type)), COLUMN_DOCS[field.name]) for field in SCHEMA
    ]
    extras: dict[str, set[str]] = {}
    for pair in pairs:
        for name, kind in pair.extras.items():
            extras.setdefault(name, set()).add(kind)
    rows.extend(
        (
            _code(name),
            " or ".join(_code(kind) for kind in sorted(kinds)),
            "Added by a `pytest_neuronsupport_row` hook of the sweeps that recorded it; null "
            "where a row lacks it.",
        )
        for name, kinds in extras.items()
    )
    return ["## Columns", "", *_table(("column", "type", "meaning"), rows)]


def _usage_section(pairs: list[_Pair]) -> list[str]:
    folder = pairs[0].folder if pairs else "inductor-2.13.0"
    first = next((pair.first_id for pair in pairs if pair.first_id), None)
    model_id = first if first is not None and _SAFE_ID.fullmatch(first) else _EXAMPLE_ID
    return [
        "## Query",
        "",
        "With pandas:",
        "",
        "```python",
        "import pandas as pd",
        'df = pd.read_parquet("data")  # every pair',
        f'one_compiler = pd.read_parquet("data/{folder}")',
        'print(df.groupby(["compiler", "compiler_version", "result"]).size())',
        "```",
        "",
        "With duckdb:",
        "",
        "```python",
        "import duckdb",
        'duckdb.sql("""',
        "    SELECT compiler, compiler_version, result, count(*) AS models",
        "    FROM 'data/*/*.parquet' GROUP BY ALL ORDER BY ALL",
        '""").show()',
        "```",
        "",
        "With `datasets` (this folder, or the Hub repository it is uploaded to):",
        "",
        "```python",
        "from datasets import load_dataset",
        f'everything = load_dataset(".", "{ALL_CONFIG}", split="{SPLIT}")',
        f'one_compiler = load_dataset(".", "{folder}", split="{SPLIT}")',
        "```",
        "",
        "## Rerun a model",
        "",
        "Each row's `run_py` is the model's whole test. Save it and run it on the same stack "
        "(its header lists the versions and a `pip install` line):",
        "",
        "```python",
        "import pandas as pd",
        'df = pd.read_parquet("data")',
        f'row = df[df.model_id == "{model_id}"].iloc[0]',
        'open("run.py", "w").write(row.run_py)',
        "```",
        "",
        "```",
        "python run.py                        # prints the verdict",
        "python run.py --result verdict.json  # and writes it as JSON",
        "```",
    ]


def _compile_cache_section(pairs: list[_Pair]) -> list[str]:
    """The buckets the sweeps shared their compiled graphs through, with the line that copies
    each folder (none: no section)."""
    folders = sorted({folder for pair in pairs for folder in pair.compile_caches})
    if not folders:
        return []
    return [
        "",
        "## Compiled graphs",
        "",
        "The sweeps shared their compile cache through a Hub Storage Bucket, one folder per "
        "compiler version. On a Trainium instance with that compiler, a run skips compiling "
        "the graphs there by copying them into TorchNeuron's cache first:",
        "",
        "```bash",
        *(f"hf buckets sync {folder} /tmp/neff_cache" for folder in folders),
        "export TORCH_NEURONX_NEFF_CACHE_DIR=/tmp/neff_cache",
        "```",
    ]


def card_text(results_dir: Path) -> str:
    """The dataset card of ``results_dir``: YAML front matter, then Markdown.

    The configs name only folders that hold data files (none when there is no data). The
    counts come from the files as they are; run
    :func:`~pytest_neuronsupport.dataset.files.upgrade_dataset` first (every merge does) so that
    the files load together.

    Raises:
        UnreadableResultsError: a data file cannot be read (its path is in ``.path``).
    """
    pairs = _pairs(Path(results_dir))
    folders = sorted({pair.folder for pair in pairs})
    lines = [
        _header(folders) + f"\n# {PRETTY_NAME}",
        "",
        _INTRO,
        *_results_section(pairs),
        "",
        *_pairs_section(pairs),
        "",
        *_coverage_section(Path(results_dir)),
        *_layout_section(),
        "",
        *_columns_section(pairs),
        "",
        *_usage_section(pairs),
        *_compile_cache_section(pairs),
    ]
    return "\n".join(lines) + "\n"


def write_card(results_dir: Path) -> Path:
    """Write :func:`card_text` to ``<results>/README.md`` atomically; return its path.

    The card is written to a hidden temp file beside it, fsynced and renamed over it, so a
    reader sees the old card or the new one, never a part.

    Raises:
        UnreadableResultsError: as :func:`card_text`; the old card is left as it was.
    """
    results_dir = Path(results_dir)
    target = results_dir / "README.md"
    atomic_write_text(target, card_text(results_dir))
    return target
