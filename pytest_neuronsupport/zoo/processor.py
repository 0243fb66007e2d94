"""The processor of the zoo models that take more than text (``llava``)."""

from __future__ import annotations

from typing import Any

from pytest_neuronsupport.zoo.configs import IMAGE_SIZE, PATCH_SIZE

# The llava-1.5 prompt format: "USER: <image>\n<text> ASSISTANT:". Images come first; the
# processor expands each <image> into one <image> per patch (16, see the configs module).
_LLAVA_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- message['role'].upper() + ': ' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] + ' ' }}"
    "{%- else %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{- '<image>\\n' }}"
    "{%- endfor %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{- item['text'] + ' ' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- 'ASSISTANT:' }}"
    "{%- endif %}"
)


def llava_processor(tokenizer: Any) -> Any:
    """Return llava's ``LlavaProcessor``: a PIL-backed CLIP image processor and the tokenizer.

    ``CLIPImageProcessorPil`` rather than ``CLIPImageProcessor``: in transformers 5 the latter is
    the torchvision backend, and torchvision is not a dependency (the PyPI build does not import
    beside a CPU torch wheel of another release). The saved ``image_processor_type`` names the
    PIL class; ``AutoProcessor`` takes the backend from what is installed (torchvision if it
    imports, else PIL), and the two give the same pixel values for 32x32 inputs (no resampling).
    """
    from transformers import CLIPImageProcessorPil, LlavaProcessor

    processor_cls: Any = LlavaProcessor  # untyped
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )
    return processor_cls(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token
        chat_template=_LLAVA_TEMPLATE,
    )
