"""English judges that always give the same answer, built from the zoo's GPT-2."""

from __future__ import annotations

import shutil
from pathlib import Path


def judge_double(gpt2: Path, where: Path, answer: str) -> Path:
    """Test double for an instruct model: the zoo's GPT-2 rewired to answer ``answer`` to
    anything. Its final layer norm outputs a constant vector ``u`` (weight 0, bias ``u``) and
    the output rows of the 'Yes' and 'No' first tokens are ``+u`` and ``-u`` (or the reverse),
    so one logit is |u|^2 and the other -|u|^2 whatever the text."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    from pytest_neuronsupport.runners.lib.judge import NO, YES, first_tokens

    source = gpt2
    target = where / f"judge-{answer}"
    if target.exists():
        return target
    shutil.copytree(source, target)
    tokenizer = transformers.AutoTokenizer.from_pretrained(target)
    weights = load_file(target / "model.safetensors")
    head = next(k for k in weights if k.endswith("lm_head.weight") or k.endswith("wte.weight"))
    u = torch.zeros(weights[head].shape[1])
    u[0] = 3.0
    sign = 1.0 if answer == "Yes" else -1.0
    yes, no = first_tokens(tokenizer, YES), first_tokens(tokenizer, NO)
    for token in set(yes) - set(no):
        weights[head][token] = sign * u
    for token in set(no) - set(yes):
        weights[head][token] = -sign * u
    weights["transformer.ln_f.weight"] = torch.zeros_like(weights["transformer.ln_f.weight"])
    weights["transformer.ln_f.bias"] = u.clone()
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    return target
