"""The prompt the lab's stacks send, rendered once by the lab from the
model file's chat template (ChatML where it has none; ``chat_template =
false`` sends the text as written), since engines disagree about templates.
``prompt_sha256`` identifies the rendered text, or the server's ids where the
server renders (:func:`ids_report`)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

MODEL = "model"  # the model's own chat template
FALLBACK = "fallback-chatml"  # the model has none: the lab's ChatML fallback
OFF = "off"  # chat_template = false: the prompt text as written

# ChatML, for models without a chat template (no beginning-of-sequence token)
FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class PromptError(ValueError):
    """A prompt that cannot be rendered (a template that fails on it); the
    same message on every stack."""


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the special-token texts it may write."""

    source: str
    bos_token: str = ""
    eos_token: str = ""


@dataclass(frozen=True)
class RenderedPrompt:
    """The exact prompt text an arm sends, and how it is tokenized."""

    text: str
    template: str  # MODEL, FALLBACK or OFF

    @property
    def templated(self) -> bool:
        return self.template != OFF

    @property
    def add_special(self) -> bool:
        """Whether the tokenizer adds the model's BOS: only for raw text; a
        template writes BOS itself where the model wants one."""
        return not self.templated

    @property
    def parse_special(self) -> bool:
        """Whether special-token texts in the prompt become special tokens:
        yes for a template's markers, no in a user's raw text."""
        return self.templated

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def report(self) -> dict[str, str]:
        """The row keys a backend hands back in its engine report."""
        return {"prompt_sha256": self.sha256, "prompt_template": self.template}


def ids_sha256(ids: Sequence[int]) -> str:
    """The sha256 of token ids, written as decimal numbers joined by commas."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode("ascii")).hexdigest()


def ids_report(ids: Sequence[int], template: str) -> dict[str, str]:
    """The row keys of a prompt known only as a server's ids (a hash that
    never equals a text's)."""
    return {"prompt_sha256": ids_sha256(ids), "prompt_template": template}


_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING = 8
_GGUF_ARRAY = 9
_WANTED = ("tokenizer.chat_template", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated GGUF header")
    return data


def _gguf_string(f: BinaryIO) -> bytes:
    (n,) = struct.unpack("<Q", _read_exact(f, 8))
    return _read_exact(f, n)


def _gguf_value(f: BinaryIO, vtype: int, keep: bool) -> Any:
    if vtype == _GGUF_STRING:
        raw = _gguf_string(f)
        return raw.decode("utf-8", errors="replace") if keep else None
    fmt = _GGUF_SCALARS.get(vtype)
    if fmt is not None:
        (value,) = struct.unpack(fmt, _read_exact(f, struct.calcsize(fmt)))
        return value
    if vtype == _GGUF_ARRAY:
        sub, n = struct.unpack("<IQ", _read_exact(f, 12))
        sub_fmt = _GGUF_SCALARS.get(sub)
        if sub_fmt is not None and not keep:
            f.seek(n * struct.calcsize(sub_fmt), os.SEEK_CUR)
            return None
        items = [_gguf_value(f, sub, keep) for _ in range(n)]
        return items if keep else None
    raise ValueError(f"unknown GGUF value type {vtype}")


def gguf_template(path: Path) -> ChatTemplate | None:
    """The chat template in a GGUF's metadata, None when it has none. Reads
    the header only (no tensor data)."""
    found: dict[str, Any] = {}
    with open(path, "rb") as f:
        if _read_exact(f, 4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, _n_tensors, n_kv = struct.unpack("<IQQ", _read_exact(f, 20))
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old")
        for _ in range(n_kv):
            key = _gguf_string(f).decode("utf-8", errors="replace")
            (vtype,) = struct.unpack("<I", _read_exact(f, 4))
            found[key] = _gguf_value(f, vtype, keep=key in _WANTED or key == "tokenizer.ggml.tokens")
    source = found.get("tokenizer.chat_template")
    if not source:
        return None
    tokens = found.get("tokenizer.ggml.tokens") or []

    def text_of(key: str) -> str:
        i = found.get(key)
        return str(tokens[i]) if isinstance(i, int) and 0 <= i < len(tokens) else ""

    return ChatTemplate(str(source), text_of("tokenizer.ggml.bos_token_id"), text_of("tokenizer.ggml.eos_token_id"))


def _token_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return str(value.get("content") or "")
    return str(value or "")


def directory_template(path: Path) -> ChatTemplate | None:
    """A model directory's chat template: chat_template.jinja, else
    tokenizer_config.json's ``chat_template`` (its "default" when it names
    several)."""
    config: dict[str, Any] = {}
    cfg = path / "tokenizer_config.json"
    if cfg.exists():
        config = json.loads(cfg.read_text(encoding="utf-8"))
    source: Any = None
    jinja = path / "chat_template.jinja"
    if jinja.exists():
        source = jinja.read_text(encoding="utf-8")
    else:
        source = config.get("chat_template")
        if isinstance(source, list):
            named = {str(t.get("name")): t.get("template") for t in source if isinstance(t, Mapping)}
            source = named.get("default")
    if not source:
        return None
    return ChatTemplate(str(source), _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))


@lru_cache(maxsize=32)
def _cached_template(path: str, _mtime: float) -> ChatTemplate | None:
    from lab.kit.model_files import check_model

    p = Path(path)
    # the header reader below trusts its lengths: a file that lies about them is refused first
    check_model(p)
    if p.is_dir():
        return directory_template(p)
    return gguf_template(p)


def model_template(path: str | Path) -> ChatTemplate | None:
    """The chat template of a model file or directory, None when it has none."""
    p = Path(path)
    return _cached_template(str(p), p.stat().st_mtime)


def _raise(message: str) -> None:
    raise PromptError(message)


def _tojson(value: Any, indent: int | None = None) -> str:
    # Templates expect JSON as Python's json writes it, not HTML-escaped.
    return json.dumps(value, ensure_ascii=False, indent=indent)


@lru_cache(maxsize=32)
def _compiled(source: str) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def render_chat(template: ChatTemplate, user: str, system: str | None = None, **variables: Any) -> str:
    """``template`` applied to one user turn (after an optional system turn),
    ending where the assistant's answer starts."""
    from jinja2 import TemplateError

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    try:
        return str(_compiled(template.source).render(
            messages=messages, add_generation_prompt=True, bos_token=template.bos_token,
            eos_token=template.eos_token, **variables,
        ))
    except PromptError:
        raise
    except TemplateError as exc:
        raise PromptError(f"the chat template failed to render: {exc}") from exc


def render_prompt(
    model_path: str | Path, prompt: str, system: str | None, chat_template: bool,
    variables: Mapping[str, Any] | None = None,
) -> RenderedPrompt:
    """The prompt an arm sends for a cell: the model's template (or the
    fallback) applied, or the text as written when ``chat_template`` is off.
    ``variables`` go to the template (e.g. ``enable_thinking``)."""
    if not chat_template:
        return RenderedPrompt(prompt, OFF)
    try:
        found = model_template(model_path)
    except (OSError, ValueError, struct.error) as exc:
        raise PromptError(f"{model_path}: cannot read its chat template: {exc}") from exc
    kind = MODEL if found is not None else FALLBACK
    template = found if found is not None else ChatTemplate(FALLBACK_TEMPLATE)
    return RenderedPrompt(render_chat(template, prompt, system, **dict(variables or {})), kind)
