"""``run_multimodal``: an image-text-to-text model (``AutoModelForImageTextToText``, LLaVA- and
Qwen-VL-like) generates 32 tokens greedily from an image made here (no download) and the
prompt ``"The future of AI is"``, sent with the image as a user message through the
processor's chat template. Static cache, compiled, on one core; compared with the CPU like a
decoder.

Standalone: pasted into ``run.py`` after ``runners/generation.py``.
"""

from __future__ import annotations

from typing import Any

import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.runners.common import guarded
from pytest_neuronsupport.runners.generation import PROMPT, Generation, run_generation

# script: drop-end

IMAGE_SIZE = 224


def make_image() -> Any:
    """A deterministic RGB picture: red rises left to right, green top to bottom, blue is their
    mix. Made with Pillow (a dependency of the image processors), nothing downloaded."""
    from PIL import Image

    red = Image.linear_gradient("L").rotate(90).resize((IMAGE_SIZE, IMAGE_SIZE))
    green = Image.linear_gradient("L").resize((IMAGE_SIZE, IMAGE_SIZE))
    blue = Image.blend(red, green, 0.5)
    return Image.merge("RGB", (red, green, blue))


def load_processor(params: dict[str, Any]) -> Any:
    return transformers.AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
        params["checkpoint"], revision=params.get("revision"), trust_remote_code=False
    )


def encode(processor: Any) -> dict[str, Any]:
    """The image and the prompt as one user message, through the processor's chat template."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(images=make_image(), text=text, return_tensors="pt")
    return {k: v for k, v in encoded.items() if hasattr(v, "dtype")}


def run(params: dict[str, Any]) -> dict[str, Any] | None:
    processor = guarded("FAIL(load)", lambda: load_processor(params))
    inputs = guarded("FAIL(load)", lambda: encode(processor))
    tokenizer = processor.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    gen = Generation(
        model_class=transformers.AutoModelForImageTextToText,
        inputs=inputs,
        pad_token_id=pad,
        decode=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True),
    )
    return run_generation(params, gen)
