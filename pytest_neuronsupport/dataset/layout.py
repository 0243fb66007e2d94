"""Where things live under a results directory: pair files, the data files, run folders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = [
    "HUB_SCHEME",
    "SCHEME",
    "check_relpath",
    "data_files",
    "is_hub",
    "is_shared",
    "journal_dir",
    "pair_dirname",
    "pair_path",
    "pair_relpath",
    "phase_file",
    "phases_dir",
    "run_dir",
    "run_dirname",
    "run_py_path",
    "shards_dir",
    "sweeps_dir",
    "train_dir",
]

SCHEME: Final = "s3://"
"""The results that are not a folder: a dataset on object storage (:mod:`.stores.s3`)."""
HUB_SCHEME: Final = "hf://"
"""Or a dataset repo on the Hugging Face Hub, ``hf://datasets/ORG/NAME`` (:mod:`.stores.hub`)."""
README: Final = "README.md"
"""The dataset card: ``<results>/README.md``."""

DATA: Final = "data"
"""The support dataset's folder: ``<results>/data``."""
PERF_DATA: Final = "perf"
"""The performance table's folder: ``<results>/perf``."""
TRAIN_DATA: Final = "train"
"""The training table's folder: ``<results>/train`` (a user's mode's table names its own)."""
BISECT_DATA: Final = "bisect"
"""The bisection table's folder: ``<results>/bisect``."""
JOURNAL: Final = "journal"
"""Where a sweep journals its rows before they are merged: ``<results>/journal/*.jsonl``."""
RUNS: Final = "runs"
"""Where the scripts of each model's runs and their outputs go: ``<results>/runs``."""
SHARDS: Final = "shards"
"""Where the shards' split of a sweep is written once: ``<results>/shards``."""
SWEEPS: Final = ".sweeps"
"""Each sweep's small shared state (its ``--neuron-limit`` count): ``<results>/.sweeps``."""
PUBLISHED: Final = "published"
"""On object storage: the rows each shard published, ``<prefix>/published/<sweep>/<n>.json``."""

UNPUBLISHED: Final = "unpublished"
"""In a shared dataset's local copy: the rows a sweep could not publish (the object store down),
``<copy>/unpublished/<sweep>.jsonl``; the next sweep into the same dataset publishes them."""

RESERVED: Final = frozenset({JOURNAL, RUNS, SHARDS, SWEEPS, PUBLISHED, UNPUBLISHED})
"""Folders of the results that are not a table's."""

_SAFE_CHAR: Final = re.compile(r"[^A-Za-z0-9._+-]")
_RUN_CHAR: Final = re.compile(r"[^A-Za-z0-9._-]")
_PARQUET: Final = ".parquet"


def _safe_component(what: str, text: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    return _SAFE_CHAR.sub("_", text)


def _safe_name(first: str, second: str) -> str:
    name = f"{first}-{second}"
    # pyarrow and pandas skip names starting with "." or "_": a data file must never be hidden.
    if name[0] in "._":
        name = "-" + name[1:]
    return name


def pair_dirname(compiler: str, compiler_version: str) -> str:
    """Folder name of a compiler: ``"inductor-2.13.0"``.

    Characters outside ``[A-Za-z0-9._+-]`` become ``_`` (``"tests.backends:perturb"`` gives
    ``"tests.backends_perturb"``); a leading ``.`` or ``_`` becomes ``-`` so the folder is never
    hidden from dataset readers.

    Raises:
        ValueError: an empty component.
    """
    return _safe_name(
        _safe_component("compiler", compiler),
        _safe_component("compiler_version", compiler_version),
    )


def pair_relpath(compiler: str, compiler_version: str, library: str, library_version: str) -> str:
    """Path of a pair's parquet file relative to ``<results>/data``, with ``/``.

    ``"inductor-2.13.0/transformers-5.24.0.parquet"``; this is the ``pair`` recorded in
    journals. Library name and version are sanitised like :func:`pair_dirname`.
    """
    file_stem = _safe_name(
        _safe_component("library", library),
        _safe_component("library_version", library_version),
    )
    return f"{pair_dirname(compiler, compiler_version)}/{file_stem}{_PARQUET}"


def pair_path(
    results_dir: Path, compiler: str, compiler_version: str, library: str, library_version: str
) -> Path:
    """``<results>/data/<compiler>-<version>/<library>-<version>.parquet`` (sanitised)."""
    return (
        Path(results_dir)
        / DATA
        / pair_relpath(compiler, compiler_version, library, library_version)
    )


def check_relpath(relpath: str) -> str:
    """Validate a pair path relative to ``<results>/data``; return it.

    Raises:
        ValueError: not ``<compiler>-<version>/<library>-<version>.parquet`` as
            :func:`pair_relpath` makes it.
    """
    if not isinstance(relpath, str):
        raise ValueError(f"pair path must be a str, got {type(relpath).__name__}")
    parts = relpath.split("/")
    ok = (
        len(parts) == 2
        and all(part and _SAFE_CHAR.search(part) is None and part[0] not in "._" for part in parts)
        and parts[1].endswith(_PARQUET)
        and len(parts[1]) > len(_PARQUET)
    )
    if not ok:
        raise ValueError(
            f"invalid pair path {relpath!r}: expected '<compiler>-<version>/<library>-<version>"
            ".parquet' made of [A-Za-z0-9._+-], not starting with '.' or '_'"
        )
    return relpath


def data_files(results_dir: Path, folder: str = DATA) -> list[Path]:
    """``data/*/*.parquet`` (a table's ``folder``) in sorted order, skipping hidden (``.``/``_``)
    names like pyarrow."""
    data_dir = Path(results_dir) / folder
    if not data_dir.is_dir():
        return []
    found: list[Path] = []
    for pair_dir in sorted(data_dir.iterdir()):
        if pair_dir.name[0] in "._" or not pair_dir.is_dir():
            continue
        for file in sorted(pair_dir.iterdir()):
            if file.name[0] not in "._" and file.name.endswith(_PARQUET) and file.is_file():
                found.append(file)
    return found


def run_dirname(model_id: str) -> str:
    """Folder name of a model's run: characters outside ``[A-Za-z0-9._-]`` become ``--``.

    ``"zoo:llama"`` gives ``"zoo--llama"``, ``"org/model"`` gives ``"org--model"``.

    Raises:
        ValueError: a name that would not be a folder of its own (empty, ``.`` or ``..``).
    """
    name = _RUN_CHAR.sub("--", model_id)
    if name in ("", ".", ".."):
        raise ValueError(f"model id {model_id!r} cannot name a run folder")
    return name


def run_dir(results_dir: Path, pair_relpath: str, model_id: str) -> Path:
    """``<results>/runs/<compiler>-<version>/<library>-<version>/<run_dirname(model_id)>``.

    The pair part is ``pair_relpath`` without its ``.parquet`` suffix, e.g.
    ``results/runs/inductor-2.13.0/transformers-5.24.0/zoo--llama``.

    Raises:
        ValueError: an invalid pair path, or as :func:`run_dirname`.
    """
    pair = check_relpath(pair_relpath).removesuffix(_PARQUET)
    return Path(results_dir) / RUNS / pair / run_dirname(model_id)


def is_shared(results: str) -> bool:
    """Whether ``--neuron-results`` names object storage or the Hub rather than a folder."""
    return results.startswith((SCHEME, HUB_SCHEME))


def is_hub(results: str) -> bool:
    """Whether ``results`` names the Hugging Face Hub (``hf://``)."""
    return results.startswith(HUB_SCHEME)


def run_py_path(results_dir: Path, pair_relpath: str, model_id: str) -> Path:
    """Where a model's ``run.py`` is written: in its :func:`run_dir`."""
    return run_dir(results_dir, pair_relpath, model_id) / "run.py"


def train_dir(results_dir: Path, pair_relpath: str, model_id: str, seq_len: int) -> Path:
    """Where a model's training scripts go: ``<run_dir>/train-<seq_len>/`` (``train.py``, the
    correctness check, and one folder per batch-search trial)."""
    return run_dir(results_dir, pair_relpath, model_id) / f"train-{int(seq_len)}"


def journal_dir(results_dir: Path) -> Path:
    """``<results>/journal``: the journals of sweeps, merged at their end (or by the next)."""
    return Path(results_dir) / JOURNAL


def shards_dir(results_dir: Path) -> Path:
    """``<results>/shards``: the split of a sharded sweep, written once for every machine."""
    return Path(results_dir) / SHARDS


def sweeps_dir(results_dir: Path) -> Path:
    """``<results>/.sweeps``: each sweep's ``--neuron-limit`` count."""
    return Path(results_dir) / SWEEPS


def unpublished_dir(results_dir: Path) -> Path:
    """``<copy>/unpublished``: rows a sweep could not publish to its object store."""
    return Path(results_dir) / UNPUBLISHED


def phases_dir(results_dir: Path, sweep_id: str) -> Path:
    """``<results>/.sweeps/<sweep-id>``: a file per model running now in the sweep, its phase."""
    return sweeps_dir(results_dir) / _safe_component("sweep id", sweep_id)


def phase_file(results_dir: Path, sweep_id: str, model_id: str) -> Path:
    """``<results>/.sweeps/<sweep-id>/<run_dirname(model_id)>``: what the model runs now."""
    return phases_dir(results_dir, sweep_id) / run_dirname(model_id)
