"""Building zoo checkpoints: :func:`build` into any directory, :func:`ensure_built` into the cache.

Builds run deterministically and quietly (:func:`_quiet_deterministic_build`); the cache is
shared safely between processes (a file lock, a temporary directory and an atomic rename).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_neuronsupport.builtonce import built_once
from pytest_neuronsupport.zoo.catalog import ZOO_VERSION, ZooModel, get
from pytest_neuronsupport.zoo.tokenizer import FAMILY_SPECIALS, family_ids, make_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

# The package's logger, as before the zoo was split into modules: "pytest_neuronsupport.zoo".
_LOG = logging.getLogger(__package__)

# How long ensure_built waits for another process that is building the same model.
_LOCK_TIMEOUT_S = 900.0


def zoo_root(cache_dir: Path) -> Path:
    """Return the directory that holds this zoo version's checkpoints under *cache_dir*.

    The path names both :data:`ZOO_VERSION` and the installed ``transformers`` version, because
    the files (and the random weights) depend on both.
    """
    from importlib.metadata import version

    return Path(cache_dir) / "zoo" / f"v{ZOO_VERSION}-transformers-{version('transformers')}"


def ensure_built(name: str, cache_dir: Path) -> Path:
    """Return the checkpoint directory of zoo model *name*, building it first if it is absent.

    The directory can be passed to ``from_pretrained`` of ``AutoConfig``, ``AutoTokenizer`` and
    the model classes. Safe when several processes (e.g. pytest-xdist workers) call it at once:
    the build runs under a :class:`filelock.FileLock` on ``<name>.lock`` beside the checkpoint,
    goes into a temporary sibling directory and is renamed into place, so a half-built directory
    is never visible at the returned path. Once built, a call only checks that the directory
    exists.
    """
    get(name)  # fail early, with the list of known names
    final = zoo_root(cache_dir) / name
    if not final.is_dir():
        _LOG.debug("waiting for the build lock of zoo model %s", name)

    def logged_build(dest: Path) -> None:
        _LOG.info("building zoo model %s into %s", name, final)
        build(name, dest)

    return built_once(final, logged_build, _LOCK_TIMEOUT_S)


def build(name: str, dest: Path) -> None:
    """Write the checkpoint files of zoo model *name* (config, weights, tokenizer) into *dest*.

    Models with a processor (``llava``) also get its files (``processor_config.json``,
    ``chat_template.jinja``). *dest* is created if needed. With the same library versions the
    files are byte-identical on every call. Global state touched on the way (torch's RNG and
    default dtype, the transformers progress bar and log level, ``TOKENIZERS_PARALLELISM``) is
    restored before returning.
    """
    entry = get(name)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with _quiet_deterministic_build():
        tokenizer = make_tokenizer(entry.family, entry.token_type_ids)
        if entry.make_processor is None:
            tokenizer.save_pretrained(str(dest))
        else:  # saves the tokenizer too (its config then names the processor class)
            entry.make_processor(tokenizer).save_pretrained(str(dest))
        config = entry.make_config(family_ids(tokenizer, entry.family))
        special_ids = set(tokenizer.convert_tokens_to_ids(list(FAMILY_SPECIALS[entry.family])))
        model = _make_model(entry, config, special_ids)
        model.save_pretrained(str(dest))


def _make_model(entry: ZooModel, config: PreTrainedConfig, special_ids: set[int]) -> Any:
    """Instantiate zoo model *entry* with seeded random weights and a sharpened output layer."""
    import torch
    import transformers

    cls = getattr(transformers, entry.architecture)
    torch.manual_seed(entry.seed)
    model = cls(config)
    model.eval()
    entry.sharpen(model, special_ids)
    if entry.dtype != "float32":
        model.to(getattr(torch, entry.dtype))
    return model


@contextlib.contextmanager
def _quiet_deterministic_build() -> Iterator[None]:
    """Make a build deterministic and quiet, restoring the global state touched afterwards.

    Forks torch's CPU RNG (the per-model seed must not leak into the caller), pins the default
    dtype to float32, turns off ``tokenizers`` parallelism (no fork warning later, and a
    single-threaded trainer) and silences transformers' progress bars and info logs.
    """
    import torch
    from transformers.utils import logging as transformers_logging

    hf_logging: Any = transformers_logging  # untyped module

    bar_was_enabled = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    dtype = torch.get_default_dtype()
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_default_dtype(dtype)
        hf_logging.set_verbosity(verbosity)
        if bar_was_enabled:
            hf_logging.enable_progress_bar()
        if parallelism is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
