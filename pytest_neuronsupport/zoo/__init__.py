"""The offline tiny-model zoo: deterministic tiny Hugging Face checkpoints built on first use.

Every entry is a real ``transformers`` architecture with a small config (hidden size 64, two
layers, four heads; ``llama-2core`` is larger on purpose), random weights drawn from a fixed
per-model seed, and a real byte-level BPE tokenizer trained with the ``tokenizers`` library on an
English corpus embedded in the package (``llava`` also gets a processor: a PIL-backed CLIP image
processor and a chat template). The checkpoints exercise the whole pipeline (``from_pretrained``,
``torch.compile``, ``generate`` or a forward pass) without network access; in model lists they
are named ``zoo:<name>``.

The tiny architectures (:mod:`.architectures`) are named ``zoo:arch/<class>``
(``zoo:arch/LlamaForCausalLM``): :func:`problem` checks such a name, :func:`checkpoint` builds
either kind into the cache on first use, under the same lock discipline.

Checkpoints are built into ``<cache_dir>/zoo/v<ZOO_VERSION>-transformers-<version>/<name>`` by
:func:`ensure_built` and never committed. With the same library versions every file is
byte-identical on every build. Byte-level BPE is the only tokenizer model used because WordPiece
and Unigram training in ``tokenizers`` is not reproducible (same vocabulary, different ids).

This package is imported during test collection, so none of its modules imports anything heavy
at module level: ``torch``, ``transformers``, ``tokenizers`` and ``filelock`` are imported inside
the functions that build. Building ``llava`` (and running its image processor) needs Pillow:
``transformers`` has no image processor without it, and its torchvision-backed ones are not used
here (see :func:`.processor.llava_processor`).

Modules, each importing only those listed after it:

- ``builder``: :func:`build`, :func:`ensure_built` and :func:`zoo_root` (cache, lock, rename).
- ``catalog``: the one table of models, :class:`ZooModel` entries, :func:`names`, :func:`get`.
- ``processor``: llava's processor (CLIP image processor, llava-1.5 chat template), and those
  of the image-text-to-text families of ``architectures`` (``VISION``).
- ``configs``: the ``transformers`` config factories and the sizes they share.
- ``sharpen``: the sharpeners, which give the random models clear winners over near-ties.
- ``tokenizer``: tokenizer families, byte-level BPE training, the ``transformers`` wrapper.
- ``corpus``: the English training corpus of the tokenizers.
- ``architectures`` (apart, with ``table``, the table of those that build, and ``measure``,
  which regenerates it): a tiny model of every class transformers maps for the card's text
  tasks, its config shrunk, the ``roberta`` family's tokenizer (an image-text-to-text family's
  processor too: ``processor``) (``neuronsupport zoo build --architectures``); the table says
  which build and why not.
"""

from __future__ import annotations

from pathlib import Path

from pytest_neuronsupport.zoo.builder import build, ensure_built, zoo_root
from pytest_neuronsupport.zoo.catalog import ARCHITECTURE_PREFIX, ZOO_VERSION, ZooModel, get, names

__all__ = [
    "ARCHITECTURE_PREFIX",
    "ZOO_VERSION",
    "ZooModel",
    "build",
    "checkpoint",
    "ensure_built",
    "get",
    "names",
    "problem",
    "zoo_root",
]


def problem(name: str) -> str | None:
    """Why ``name`` (after ``zoo:``) names no zoo model, or None when it names one."""
    if name.startswith(ARCHITECTURE_PREFIX):
        from pytest_neuronsupport.zoo import table

        cls = name.removeprefix(ARCHITECTURE_PREFIX)
        if cls in table.not_buildable():
            return f"the tiny architecture {cls!r} cannot be built: {table.not_buildable()[cls]}"
        if cls not in table.built():
            return (
                f"unknown tiny architecture {cls!r} (a class transformers maps for the card's "
                "text tasks: `neuronsupport zoo list --architectures`)"
            )
        return None
    if name not in names():
        return f"unknown zoo model {name!r} (known: {', '.join(names())})"
    return None


def checkpoint(name: str, cache_dir: Path) -> Path:
    """The checkpoint folder of a zoo model or tiny architecture, built on first use."""
    if name.startswith(ARCHITECTURE_PREFIX):
        from pytest_neuronsupport.zoo import architectures

        return architectures.ensure_built(name.removeprefix(ARCHITECTURE_PREFIX), cache_dir)
    return ensure_built(name, cache_dir)
