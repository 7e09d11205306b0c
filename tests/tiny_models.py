"""Tiny random-weight models built from transformers configs, with a real BPE tokenizer trained on SciFact
text: they exercise a teacher's loading, prompting, batching and truncation, not its judgement."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus_lines(n: int = 300) -> list[str]:
    lines = []
    with open(ROOT / "collections" / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            lines.append(f"{doc.get('title', '')} {doc['text']}")
            if len(lines) == n:
                break
    return lines


def tiny_tokenizer(*, bos: bool = False, words: str = "yes no Yes No true false"):
    """A byte-level BPE tokenizer (1000 tokens) trained on SciFact text, in which each of ``words`` is one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<bos>", "<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus_lines() + ([words] + words.split()) * 4000, trainer)  # bare and after a space
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        bos_token="<bos>" if bos else None,
        model_max_length=256,
    )


def tiny_causal_lm(out: Path, *, chat: bool, bos: bool = False) -> Path:
    """A 2-layer Qwen2 with seeded random weights; with ``chat``, a ChatML chat template."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer(bos=bos)
    if chat:
        tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


def tiny_t5(out: Path) -> Path:
    """A 2-layer T5 encoder-decoder with seeded random weights (pad = decoder start, as in T5)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    T5ForConditionalGeneration(config).save_pretrained(out)
    return out
