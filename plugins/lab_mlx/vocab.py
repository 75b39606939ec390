"""Tokenizer side of an MLX target: prompt ids, the bytes of each token, and
which tokens end generation. Wraps a Hugging Face fast tokenizer, whether it
came from an MLX directory or was rebuilt from a GGUF's metadata."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Sequence

from lab.kit.engine_loop import END_TEXTS

# Token texts llama.cpp also treats as end-of-generation; the same set keeps
# "ignore_eos" masking identical across stacks.
EOG_TEXTS = END_TEXTS

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes-to-unicode map used by byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class Vocab:
    def __init__(self, hf: Any, n_vocab: int, add_bos: bool | None = None) -> None:
        self.hf = hf
        self.n_vocab = n_vocab
        specials = {int(i) for i in getattr(hf, "all_special_ids", [])}
        added = getattr(hf, "added_tokens_decoder", {}) or {}
        specials |= {int(i) for i, t in added.items() if getattr(t, "special", False)}
        self.special_ids = specials
        tokens = hf.convert_ids_to_tokens(list(range(min(n_vocab, len(hf)))))
        self.pieces: list[bytes] = [self._piece(i, t) for i, t in enumerate(tokens)]
        self.pieces += [b""] * (n_vocab - len(self.pieces))
        eog = {i for i, t in enumerate(tokens) if t in EOG_TEXTS}
        if hf.eos_token_id is not None:
            eog.add(int(hf.eos_token_id))
        self.eog_ids = sorted(eog)
        self.add_bos = add_bos

    def _piece(self, i: int, token: str | None) -> bytes:
        if token is None or i in self.special_ids:
            # llama.cpp renders control tokens as nothing in output text.
            return b""
        if self._byte_level:
            dec = _byte_decoder()
            if all(ch in dec for ch in token):
                return bytes(dec[ch] for ch in token)
            return token.encode("utf-8")
        m = _BYTE_TOKEN.match(token)
        if m:
            return bytes([int(m.group(1), 16)])
        return token.replace("\u2581", " ").encode("utf-8")

    @property
    def _byte_level(self) -> bool:
        cached = self.__dict__.get("_is_byte_level")
        if cached is None:
            try:
                decoder = self.hf.backend_tokenizer.decoder
                cached = "ByteLevel" in type(decoder).__name__ or "ByteLevel" in repr(decoder)
            except AttributeError:
                cached = False
            self.__dict__["_is_byte_level"] = cached
        return bool(cached)

    def encode(self, text: str, add_special: bool) -> list[int]:
        ids = list(self.hf.encode(text, add_special_tokens=add_special))
        if add_special and self.add_bos and self.hf.bos_token_id is not None and (not ids or ids[0] != self.hf.bos_token_id):
            ids.insert(0, int(self.hf.bos_token_id))
        return ids

    def chat_prompt(self, user: str, system: str | None, **template_kwargs: Any) -> str:
        if not getattr(self.hf, "chat_template", None):
            raise ValueError("this model has no chat template; set chat_template = false")
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        return str(self.hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **template_kwargs))

    def prompt_ids(self, prompt: str, system: str | None, chat_template: bool, **template_kwargs: Any) -> list[int]:
        if chat_template:
            # The rendered template already holds BOS where the model wants one.
            return self.encode(self.chat_prompt(prompt, system, **template_kwargs), add_special=False)
        return self.encode(prompt, add_special=True)

    def piece(self, token: int) -> bytes:
        return self.pieces[token] if 0 <= token < len(self.pieces) else b""

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in ids).decode("utf-8", errors="replace")
