"""``run_multimodal``: an image-text-to-text model (LLaVA- and Qwen-VL-like) generates 32 tokens
greedily, compiled with a static cache, from an image made here and ``PROMPT`` in the processor's
chat template; its tokens are checked against the CPU's (float64, fp32)."""

from __future__ import annotations

from typing import Any

import transformers

from pytest_neuronsupport.runners import Runner
from pytest_neuronsupport.runners.lib.generation import PROMPT, Generation, generate_and_check
from pytest_neuronsupport.runners.lib.models import step
from pytest_neuronsupport.runners.lib.protocol import Result

RUNNER = Runner(
    name="multimodal",
    load_class="AutoModelForImageTextToText",
    generates=True,
    mappings=("image_text_to_text",),
    tasks=("image-text-to-text",),
)

IMAGE_SIZE = 224


def run(params: dict[str, Any], ops: Any) -> dict[str, Any] | None:
    with step("load", Result.FAIL_LOAD):
        processor = load_processor(params)
        inputs = encode(processor)
    tokenizer = processor.tokenizer
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    gen = Generation(transformers.AutoModelForImageTextToText, inputs, tokenizer)
    return generate_and_check(params, ops, gen)


def make_image() -> Any:
    """A deterministic RGB picture: red rises left to right, green top to bottom, blue is their
    mix. Made with Pillow (a dependency of the image processors), nothing downloaded."""
    from PIL import Image

    red = Image.linear_gradient("L").rotate(90).resize((IMAGE_SIZE, IMAGE_SIZE))
    green = Image.linear_gradient("L").resize((IMAGE_SIZE, IMAGE_SIZE))
    return Image.merge("RGB", (red, green, Image.blend(red, green, 0.5)))


def load_processor(params: dict[str, Any]) -> Any:
    options = dict(revision=params.get("revision"), trust_remote_code=False)
    return transformers.AutoProcessor.from_pretrained(params["checkpoint"], **options)  # type: ignore[no-untyped-call]


def encode(processor: Any) -> dict[str, Any]:
    """The image and the prompt as one user message, through the processor's chat template."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(images=make_image(), text=text, return_tensors="pt")
    return {k: v for k, v in encoded.items() if hasattr(v, "dtype")}
