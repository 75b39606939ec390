"""A GGUF's SentencePiece vocabulary as a Hugging Face fast tokenizer that
splits as llama.cpp's SPM does: a space prefix, spaces as U+2581, merges by
the merged token's score (BPE with score-ordered ranks), byte tokens for the
rest."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

SPACE = "\u2581"
_NORMAL, _CONTROL, _USER = 1, 3, 4


def merges(tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]) -> list[tuple[str, str]]:
    """Every split of a normal token into two tokens, ranked by the whole
    token's score (highest first)."""
    index = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, str, str]] = []
    for i, t in enumerate(tokens):
        if int(types[i]) != _NORMAL or len(t) < 2:
            continue
        for cut in range(1, len(t)):
            a, b = t[:cut], t[cut:]
            if a in index and b in index:
                ranked.append((-float(scores[i]), i, a, b))
    ranked.sort()
    return [(a, b) for _, _, a, b in ranked]


def spm_tokenizer(md: Mapping[str, Any], tokens: list[str], named: Any) -> Any:
    """The fast tokenizer; ``named(key)`` gives the token text of a
    ``tokenizer.ggml.*_token_id`` key or None."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    n = len(tokens)
    scores = [float(s) for s in md.get("tokenizer.ggml.scores", [0.0] * n)]
    types = [int(t) for t in md.get("tokenizer.ggml.token_type", [_NORMAL] * n)]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges(tokens, scores, types),
                     byte_fallback=True, fuse_unk=False, unk_token=named("tokenizer.ggml.unknown_token_id"))
    tok = Tokenizer(bpe)
    prefix = md.get("tokenizer.ggml.add_space_prefix", True)
    steps: list[Any] = [normalizers.Prepend(SPACE)] if bool(prefix.item() if hasattr(prefix, "item") else prefix) else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t in (_CONTROL, _USER)]
    tok.add_special_tokens(specials)
    return fast_tokenizer(tok, md, named)


def fast_tokenizer(tok: Any, md: Mapping[str, Any], named: Any) -> Any:
    """The ``tokenizers`` tokenizer the lab's Vocab wraps, with the GGUF's
    special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=named("tokenizer.ggml.bos_token_id"),
        eos_token=named("tokenizer.ggml.eos_token_id"),
        unk_token=named("tokenizer.ggml.unknown_token_id"),
        pad_token=named("tokenizer.ggml.padding_token_id"),
        chat_template=md.get("tokenizer.chat_template"),
    )
