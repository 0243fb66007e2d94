"""Loading and compiling: the model, its tokenizer, the compiled forward; the phases they fail.

Never with remote code: ``trust_remote_code=False`` everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import transformers

from pytest_neuronsupport.runners.lib.protocol import DTYPES, Result, phase


class RunFailure(Exception):
    """A classified failure of the run: FAIL(load), FAIL(gen), FAIL(forward)..."""

    def __init__(self, result: Result, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.result, self.error = result, str(self)


@contextmanager
def step(name: str, failure: Result) -> Iterator[None]:
    """A phase of the run, announced; what raises in it fails the run with ``failure`` (running
    out of memory is a crash of the run, FAIL(other), whatever the phase)."""
    phase(name)
    try:
        yield
    except Exception as exc:  # running out of memory: FAIL(other)
        oom = isinstance(exc, (MemoryError, torch.OutOfMemoryError))
        raise RunFailure(Result.FAIL_OTHER if oom else failure, exc) from exc


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` → ``torch.bfloat16`` (``"float64"`` too: the CPU's exact reference)."""
    if name not in (*DTYPES, "float64"):
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})")
    return getattr(torch, name)


def load_pretrained(cls: Any, params: dict[str, Any], dtype: str, device: str) -> Any:
    """``cls.from_pretrained`` of the run's checkpoint, in ``dtype``, on ``device``."""
    options = dict(revision=params.get("revision"), dtype=torch_dtype(dtype))
    model = cls.from_pretrained(params["checkpoint"], trust_remote_code=False, **options)
    return model.to(device).eval()


def load_tokenizer(params: dict[str, Any]) -> Any:
    options = dict(revision=params.get("revision"), trust_remote_code=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(params["checkpoint"], **options)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def user_message(tokenizer: Any, text: str, without_template: str = "") -> dict[str, Any]:
    """``text`` as a user message through the tokenizer's chat template, if it has one (else
    the plain text followed by ``without_template``): input ids and attention mask."""
    if getattr(tokenizer, "chat_template", None):
        chat = dict(add_generation_prompt=True, return_dict=True, return_tensors="pt")
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": text}], **chat)
    else:
        encoded = tokenizer(text + without_template, return_tensors="pt")
    return {k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded}


def compile_forward(params: dict[str, Any], *modules: Any) -> None:
    """Compile each module's forward with the run's backend, in place."""
    backend, fullgraph = params["backend"], params["fullgraph"]  # a name, or a callable
    for module in modules:
        module.forward = torch.compile(module.forward, backend=backend, fullgraph=fullgraph)
