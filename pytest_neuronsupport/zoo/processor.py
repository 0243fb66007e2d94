"""The processors of the zoo models that take more than text: ``llava``'s, and those of the
tiny image-text-to-text architectures (:data:`VISION`), none of which needs torchvision."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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

#: What LLaVA's and LLaVA-NeXT's processors are told of a CLIP tower: its patches, and the
#: CLS token it adds (dropped by the "default" feature selection).
_CLIP_TOWER = {
    "patch_size": PATCH_SIZE,
    "vision_feature_select_strategy": "default",
    "num_additional_image_tokens": 1,
    "chat_template": _LLAVA_TEMPLATE,
}


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
    return processor_cls(image_processor=image_processor, tokenizer=tokenizer, **_CLIP_TOWER)


# The tiny image-text-to-text architectures (:mod:`.architectures`): each family's processor
# on the PIL backend, with its chat template and the image tokens its model type's tokenizer
# names, for 32x32 images in 8x8 patches (as llava's above).

#: Gemma 3's turns; an image is its begin-of-image token, which the processor expands.
_GEMMA3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<start_of_turn>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
#: PaliGemma's prompt: the images, then the text (the processor adds bos and the newline).
_PALIGEMMA_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{- '<image>' }}"
    "{%- endfor %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{- item['text'] }}"
    "{%- endfor %}"
    "{%- endfor %}"
)
#: Idefics3's (SmolVLM's) turns: "User:<image>text<end_of_utterance>\nAssistant:".
_IDEFICS3_TEMPLATE = (
    "<|im_start|>"
    "{%- for message in messages %}"
    "{{- message['role'] | capitalize }}"
    "{%- if message['content'][0]['type'] == 'image' %}{{- ':' }}{%- else %}{{- ': ' }}{%- endif %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %}{{- item['text'] }}"
    "{%- elif item['type'] == 'image' %}{{- '<image>' }}{%- endif %}"
    "{%- endfor %}"
    "<end_of_utterance>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"
)
#: LLaVA-NeXT's tiles: the 32x32 base image and the best fit of these (height, width).
_PINPOINTS = [[32, 64], [64, 32], [64, 64]]
_SQUARE = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2


@dataclass(frozen=True)
class Vision:
    """How a tiny image-text-to-text model of one model type is built: the special tokens its
    tokenizer names (by role), the config keys set beside the shrunk sizes (given the
    tokenizer, for the image tokens' ids) and its processor (given the tokenizer)."""

    tokens: dict[str, str]
    config: Callable[[Any], dict[str, Any]]
    processor: Callable[[Any], Any]


def _tower(**more: Any) -> dict[str, Any]:
    return {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, **more}


def _llava_next_processor(tokenizer: Any) -> Any:
    from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor

    image_processor = LlavaNextImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size=_SQUARE, image_grid_pinpoints=_PINPOINTS
    )
    return LlavaNextProcessor(  # type: ignore[no-untyped-call]
        image_processor=image_processor, tokenizer=tokenizer, **_CLIP_TOWER
    )


def _gemma3_processor(tokenizer: Any) -> Any:
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    image_processor = Gemma3ImageProcessorPil(size=_SQUARE)
    return Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=_GEMMA3_TEMPLATE,
        image_seq_length=_GEMMA3_TOKENS,
    )


def _paligemma_processor(tokenizer: Any) -> Any:
    """SigLIP's image processor, which PaliGemma's processor asks the image's token count of;
    the processor adds PaliGemma's location and segmentation tokens to the tokenizer."""
    from transformers import PaliGemmaProcessor, SiglipImageProcessorPil

    image_processor: Any = SiglipImageProcessorPil(size=_SQUARE)
    image_processor.image_seq_length = _PATCHES
    return PaliGemmaProcessor(  # type: ignore[no-untyped-call]
        image_processor=image_processor, tokenizer=tokenizer, chat_template=_PALIGEMMA_TEMPLATE
    )


def _idefics3_processor(tokenizer: Any) -> Any:
    """One 32x32 image, not split: its 16 patches, merged 2x2, are 4 image tokens."""
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    edge = {"longest_edge": IMAGE_SIZE}
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size=edge, max_image_size=edge
    )
    return Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=_PATCHES // 4,
        chat_template=_IDEFICS3_TEMPLATE,
    )


#: Gemma 3's image: its 4x4 patches pooled to 2x2 tokens.
_GEMMA3_TOKENS = 4
#: The image-text-to-text model types built with a processor, by model type.
VISION: dict[str, Vision] = {
    "llava": Vision(
        {"image_token": "<image>"},
        lambda tok: {"vision_config": _tower(), "image_token_index": tok.image_token_id},
        llava_processor,
    ),
    "llava_next": Vision(
        {"image_token": "<image>"},
        lambda tok: {
            "vision_config": _tower(),
            "image_grid_pinpoints": _PINPOINTS,
            "image_token_index": tok.image_token_id,
            "image_seq_length": _PATCHES,
        },
        _llava_next_processor,
    ),
    "gemma3": Vision(
        {
            "image_token": "<image_soft_token>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
        },
        lambda tok: {
            "vision_config": _tower(),
            "mm_tokens_per_image": _GEMMA3_TOKENS,
            "image_token_index": tok.image_token_id,
            "boi_token_index": tok.boi_token_id,
            "eoi_token_index": tok.eoi_token_id,
        },
        _gemma3_processor,
    ),
    "paligemma": Vision(
        {"image_token": "<image>"},
        lambda tok: {
            "vision_config": _tower(),
            "text_config": {"num_image_tokens": _PATCHES},
            "image_token_index": tok.image_token_id,
        },
        _paligemma_processor,
    ),
    "idefics3": Vision(
        {
            "image_token": "<image>",
            "fake_image_token": "<fake_token_around_image>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
        lambda tok: {
            "vision_config": _tower(),
            "scale_factor": 2,
            "image_token_id": tok.image_token_id,
        },
        _idefics3_processor,
    ),
}


# The families whose own processor takes a video processor (transformers' video processors
# need torchvision, which does not import beside the CPU torch wheel) or requires torchvision
# (Pixtral's): each is saved with the processor of another model type that takes no video
# processor and builds the same inputs from the family's image processor (the same count of
# image tokens); ``AutoProcessor`` loads the processor class the folder names.

#: Qwen2-VL's (and Qwen2.5-VL's, Qwen3-VL's) turns; an image is its pad token between the
#: vision start and end, which the processor expands.
_QWEN_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_QWEN_TOKENS = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}


def _qwen_vl_processor(patch_size: int) -> Callable[[Any], Any]:
    """Qwen2-VL's image processor (32x32 images: patches of *patch_size*, merged 2x2) in
    PaddleOCR-VL's processor: Qwen2-VL's without the video processor (its image tokens are
    the same count, the grid's patches over the merge)."""

    def make(tokenizer: Any) -> Any:
        from transformers import PaddleOCRVLProcessor, Qwen2VLImageProcessorPil

        pixels = IMAGE_SIZE * IMAGE_SIZE
        image_processor = Qwen2VLImageProcessorPil(
            size={"shortest_edge": pixels, "longest_edge": pixels},
            patch_size=patch_size,
            merge_size=2,
            temporal_patch_size=2,
        )
        return PaddleOCRVLProcessor(  # type: ignore[no-untyped-call]
            image_processor=image_processor, tokenizer=tokenizer, chat_template=_QWEN_TEMPLATE
        )

    return make


def _qwen_config(tokenizer: Any, vision: dict[str, Any], head: int = 16) -> dict[str, Any]:
    """The image tokens' ids, the tower of two layers, and the text model's multimodal rotary
    sections over its head of 16 (temporal, height, width: 2 + 3 + 3 of its 8 frequencies)."""
    return {
        "vision_config": {"depth": 2, "patch_size": PATCH_SIZE, **vision},
        "text_config": {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
            }
        },
        "image_token_id": tokenizer.image_token_id,
        "video_token_id": tokenizer.video_token_id,
        "vision_start_token_id": tokenizer.vision_start_token_id,
        "vision_end_token_id": tokenizer.vision_end_token_id,
    }


VISION["qwen2_vl"] = Vision(
    _QWEN_TOKENS,
    lambda tok: _qwen_config(tok, {"embed_dim": 64, "hidden_size": 64}),
    _qwen_vl_processor(PATCH_SIZE),
)
VISION["qwen2_5_vl"] = Vision(
    _QWEN_TOKENS,
    lambda tok: _qwen_config(
        tok, {"out_hidden_size": 64, "window_size": 16, "fullatt_block_indexes": [1]}
    ),
    _qwen_vl_processor(PATCH_SIZE),
)
VISION["qwen3_vl"] = Vision(
    _QWEN_TOKENS,
    lambda tok: _qwen_config(
        tok,
        {"out_hidden_size": 64, "num_position_embeddings": 16, "deepstack_visual_indexes": [1]},
    ),
    _qwen_vl_processor(PATCH_SIZE),
)


def _llava_onevision_processor(tokenizer: Any) -> Any:
    """LLaVA-OneVision's image processor (its tiles as LLaVA-NeXT's above) in LLaVA-NeXT's
    processor: LLaVA-OneVision's without the video processor. Its tower is SigLIP's (no CLS
    token), and its images' tiles are few enough that the model does not pool them (at most
    nine tiles' worth: ``anyres_max_9``), so the two count the image's tokens alike."""
    from transformers import LlavaNextProcessor, LlavaOnevisionImageProcessorPil

    image_processor = LlavaOnevisionImageProcessorPil(size=_SQUARE, image_grid_pinpoints=_PINPOINTS)
    return LlavaNextProcessor(  # type: ignore[no-untyped-call]
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        chat_template=_LLAVA_TEMPLATE,
    )


def _mistral3_processor(tokenizer: Any) -> Any:
    """Pixtral's image processor (32x32 images, patches of 8 merged 2x2) in LightOnOCR's
    processor, which counts the image's tokens as Mistral 3's model does: Pixtral's processor
    (Mistral 3's own) requires torchvision."""
    from transformers import LightOnOcrProcessor, PixtralImageProcessorPil

    image_processor = PixtralImageProcessorPil(
        size={"longest_edge": IMAGE_SIZE}, patch_size=2 * PATCH_SIZE
    )
    return LightOnOcrProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        spatial_merge_size=2,
        chat_template=_MISTRAL3_TEMPLATE,
    )


#: Mistral's turns: "[INST][IMG]text[/INST]" (the processor expands the image token).
_MISTRAL3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '[INST]' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}"
    "{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '[IMG]' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'user' %}{{- '[/INST]' }}{%- endif %}"
    "{%- endfor %}"
)

VISION["smolvlm"] = Vision(
    VISION["idefics3"].tokens, VISION["idefics3"].config, _idefics3_processor
)
VISION["llava_onevision"] = Vision(
    {"image_token": "<image>", "video_token": "<video>"},
    lambda tok: {
        "vision_config": _tower(),
        "image_grid_pinpoints": _PINPOINTS,
        "image_token_index": tok.image_token_id,
        "video_token_index": tok.video_token_id,
    },
    _llava_onevision_processor,
)
VISION["mistral3"] = Vision(
    {"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"},
    lambda tok: {
        "vision_config": _tower(),
        "spatial_merge_size": 2,
        "image_token_index": tok.image_token_id,
    },
    _mistral3_processor,
)
