"""The GGUF conversion's reads: transformers parses a file three times and builds gguf's name
table per module; :func:`~pytest_neuronsupport.pipeline.gguf.read_once` makes each once, and
leaves the ``gguf`` package as it found it. (The conversion itself, on SmolLM2's real file:
tests/test_real_weights.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_neuronsupport.pipeline.gguf import read_once

gguf = pytest.importorskip("gguf")


def small_file(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_is_read_once_and_gguf_is_left_as_it_was(tmp_path: Path) -> None:
    path = small_file(tmp_path / "m.gguf")
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with read_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first  # the same file by another spelling
        assert first.fields["general.architecture"].contents() == "llama"
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        other = small_file(tmp_path / "other.gguf")
        assert gguf.GGUFReader(other) is not first
    assert gguf.GGUFReader is reader_class and gguf.get_tensor_name_map is name_map
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)
