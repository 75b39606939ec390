"""Writing tiny GGUF models: SmolLM2's tokenizer and chat template copied
from the embedded model (so every tiny model shares its vocabulary, as drafts
must, and prompts read as text), a writer that carries them, and the last
write. The ``gguf`` package comes with the ``llamacpp`` and ``vllm`` extras:
it is imported when a model is written, never at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Tokenizer:
    fields: list[tuple[str, Any, Any]]  # (key, value, gguf value type or (ARRAY, sub type))
    n_vocab: int


def smollm2_tokenizer() -> Tokenizer:
    """The ``tokenizer.*`` metadata of the embedded SmolLM2 model."""
    import gguf

    from lab.kit.models import embedded_smollm2

    reader = gguf.GGUFReader(str(embedded_smollm2()))
    fields: list[tuple[str, Any, Any]] = []
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        types = list(field.types)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
        fields.append((key, value, types))
    if n_vocab == 0:
        raise RuntimeError("the embedded model has no token list")
    return Tokenizer(fields, n_vocab)


def writer(out: Path, arch: str, tok: Tokenizer) -> Any:
    """A ``gguf.GGUFWriter`` for ``out`` with its name and the tokenizer in."""
    import gguf

    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(f"speclab {arch} (tiny, random weights)")
    for key, value, types in tok.fields:
        main = types[0]
        if main == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, main, sub_type=types[1])
        else:
            w.add_key_value(key, value, main)
    return w


def finish(w: Any) -> None:
    """Write the header, the metadata and the tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
