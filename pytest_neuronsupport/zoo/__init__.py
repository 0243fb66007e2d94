"""The offline tiny-model zoo: deterministic tiny Hugging Face checkpoints built on first use.

Every entry is a real ``transformers`` architecture with a small config (hidden size 64, two
layers, four heads; ``llama-2core`` is larger on purpose), random weights drawn from a fixed
per-model seed, and a real byte-level BPE tokenizer trained with the ``tokenizers`` library on an
English corpus embedded in the package (``llava`` also gets a processor: a PIL-backed CLIP image
processor and a chat template). The checkpoints exercise the whole pipeline (``from_pretrained``,
``torch.compile``, ``generate`` or a forward pass) without network access; in model lists they
are named ``zoo:<name>``.

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
- ``processor``: llava's processor (CLIP image processor, llava-1.5 chat template).
- ``configs``: the ``transformers`` config factories and the sizes they share.
- ``sharpen``: the sharpeners, which give the random models clear winners over near-ties.
- ``tokenizer``: tokenizer families, byte-level BPE training, the ``transformers`` wrapper.
- ``corpus``: the English training corpus of the tokenizers.
- ``architectures`` (apart, with ``architecture_table``): a tiny model of every class transformers
  maps for the card's text tasks, its config shrunk, the ``roberta`` family's tokenizer
  (``neuronsupport zoo build --architectures``); the table says which build and why not.
"""

from __future__ import annotations

from pytest_neuronsupport.zoo.builder import build, ensure_built, zoo_root
from pytest_neuronsupport.zoo.catalog import ZOO_VERSION, ZooModel, get, names

__all__ = ["ZOO_VERSION", "ZooModel", "build", "ensure_built", "get", "names", "zoo_root"]
