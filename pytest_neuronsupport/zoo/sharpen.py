"""Sharpeners: give a freshly initialised zoo model clear winners instead of near-ties.

A sharpener is called as ``sharpen(model, special_ids)`` after the seeded random
initialisation and rewrites or rescales weights in place; the comment below says why and how.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

# Sharpening. Random tiny models have flat output distributions: top-1/top-2 logit gaps of ~1e-3
# where bf16 changes logits by ~5e-3, so bf16 and fp32 greedy decoding part ways at a near-tie
# (measured before sharpening, 64 prompts x 32 greedy tokens: bf16 == fp32 for only 37-45 of 64
# sequences). Scaling the output layer alone does not fix that: logits and bf16 error scale
# together (a 50x lm_head gives logit std 8 and still 5 of 8 prompts diverge). What separates
# top-1 from top-2 is a readout *aligned* with the hidden state:
#
# - decoders: lm_head row j is the unit-norm input embedding of token pred(j), times
#   _READOUT_SCALE, where pred is a random permutation of the non-special tokens (drawn from
#   the model's seed) and the rows of special tokens are zero. The residual stream is dominated
#   by the current token's embedding, so the logit of its successor is far above the others
#   (logit std ~6, top-1/top-2 gap >= 3.9 over 64 prompts x 32 greedy steps; bf16 == fp32
#   for 64/64). GPT-2's learned position embeddings are as large as its token embeddings and blur
#   the readout, so its token embeddings are doubled first (embedding_gain). Trade-off, by
#   design: the greedy token is always the fixed successor of the previous token. The layers
#   still move every logit (so logit comparisons see attention and KV-cache bugs), but token
#   comparisons do not; weaker embeddings bring context into the argmax and the near-ties back
#   (measured: a 0.4x gain lets context pick 35% of tokens and 12 of 48 prompts diverge in bf16).
#   The model never emits a special token (generation always runs to max_new_tokens), and
#   lm_head is untied (tie_word_embeddings=False) so from_pretrained reproduces it exactly.
#   mixtral and llava (its Llama part) take the readout as it is (gap >= 9.3 and >= 16.0 over
#   64 prompts). llama-2core's wider layers (an MLP of 4 x 256) outweigh its embeddings, and
#   T5's layers are scaled to its unit-variance embeddings: at gain 1 the gaps were 0.008 and
#   0.04 (8 and 10 of 12 prompts bf16 == fp32), so their embeddings get gains of 4 and 2
#   (gap >= 14.9 and >= 4.5 over 64 prompts; bf16 == fp32 for 64/64, as for every decoder).
# - encoder-decoders (t5, bart) get the same readout in the decoder, plus a successor for the
#   decoder start token (from_start); their head is untied first (see untie_head and
#   share_bart_embeddings); bart needs no gain (gap >= 8.2 over 64 prompts). The greedy tokens
#   then depend on the start token only, not on the encoder input: the encoder shows in the
#   logits (cross-attention), not in the tokens. Likewise llava's image.
# - encoders: the MLM / QA / token-classification output weights are multiplied by a constant
#   chosen so that logits have a standard deviation of about 6-8 on ordinary sentences (for
#   bert-mlm the decoder is untied from the word embeddings first); these heads read each
#   token's own state, which differs from token to token.
# - sequence classifiers read the first token only, and with initializer_range=0.02 an
#   attention block has a gain of ~0.02^2 * 64 = 0.03: the first token's state hardly depends
#   on the sentence, every input gets nearly the same logits, and a near-tie between two labels
#   (measured: NEUTRAL 0.49 vs POSITIVE 0.47) is then a near-tie for every input. So the
#   attention output projections are also multiplied by ATTENTION_GAIN (a gain of ~0.8, as in
#   trained models) before the classifier is scaled.
_READOUT_SCALE = 6.0
ATTENTION_GAIN = 30.0


def successor_readout(
    embedding_gain: float = 1.0, *, from_start: bool = False
) -> Callable[[Any, set[int]], None]:
    """Return a sharpener making the LM head predict a fixed successor of the current token.

    *embedding_gain* multiplies the input embeddings first (see the comment above). With
    *from_start* (encoder-decoders), the first decoding step reads the decoder start token, a
    special token that is nobody's predecessor: the head row of one random regular token also
    gets the start token's unit embedding, so that step has a clear winner too.
    """

    def sharpen(model: Any, special_ids: set[int]) -> None:
        import torch

        embeddings = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        if head is None or head.weight is embeddings:  # pragma: no cover - config error
            raise RuntimeError(f"{type(model).__name__}: lm_head must be untied")
        vocab = embeddings.shape[0]
        regular = torch.tensor([i for i in range(vocab) if i not in special_ids])
        # pred[k] is the token whose successor is regular[k]
        pred = regular[torch.randperm(len(regular))]
        with torch.no_grad():
            embeddings.mul_(embedding_gain)
            rows = embeddings[pred]
            rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-6)
            head.weight.zero_()
            head.weight[regular] = rows * _READOUT_SCALE
            if from_start:
                start = model.config.decoder_start_token_id
                first = regular[torch.randint(len(regular), ())]
                row = embeddings[start] / embeddings[start].norm().clamp_min(1e-6)
                head.weight[first] += row * _READOUT_SCALE

    return sharpen


def untie_head(model: Any, special_ids: set[int]) -> None:
    """Give the LM head a weight of its own (T5: transformers 5 ties it whatever the config says).

    A checkpoint that stores both ``shared.weight`` and a different ``lm_head.weight`` loads
    untied, as FLAN-T5 checkpoints do (transformers logs that it will not tie them).
    """
    import torch

    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())


def share_bart_embeddings(model: Any, special_ids: set[int]) -> None:
    """Copy BART's shared embedding into the encoder's and decoder's own copies.

    With ``tie_word_embeddings=False`` (needed for an untied head) transformers 5 unties the
    encoder and decoder embeddings from ``shared`` too; equal values keep BART's one
    vocabulary embedding, and the checkpoint loads without any tying or warning.
    """
    import torch

    shared = model.get_input_embeddings().weight
    with torch.no_grad():
        for stack in (model.get_encoder(), model.get_decoder()):
            stack.embed_tokens.weight.copy_(shared)


def chain(*steps: Callable[[Any, set[int]], None]) -> Callable[[Any, set[int]], None]:
    """Return a sharpener running *steps* in order."""

    def sharpen(model: Any, special_ids: set[int]) -> None:
        for step in steps:
            step(model, special_ids)

    return sharpen


def scale(*factors: tuple[str, float]) -> Callable[[Any, set[int]], None]:
    """Return a sharpener multiplying the weight of each submodule matching a pattern by a factor.

    Patterns are ``fnmatch`` patterns over ``named_modules()`` names; each must match.
    """

    def sharpen(model: Any, special_ids: set[int]) -> None:
        import torch

        modules = dict(model.named_modules())
        for pattern, factor in factors:
            matched = [m for name, m in modules.items() if fnmatch.fnmatchcase(name, pattern)]
            if not matched:  # pragma: no cover - spec error
                raise RuntimeError(f"no submodule of {type(model).__name__} matches {pattern!r}")
            with torch.no_grad():
                for module in matched:
                    module.weight.mul_(factor)

    return sharpen


def no_sharpening(model: Any, special_ids: set[int]) -> None:
    """Leave the model as initialised (feature extraction has no output layer to sharpen)."""
