"""Loading an MLX target: an HF-style MLX directory (what mlx-lm loads) or a
GGUF file (see lab_mlx.gguf)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab_mlx.vocab import Vocab


@dataclass
class LoadedModel:
    model: Any
    vocab: Vocab
    path: str
    config: dict[str, Any]
    # a GGUF's nextn (MTP) blocks' tensors as read with the model, where load_target was asked to keep them
    nextn: dict[str, Any] = field(default_factory=dict)

    @property
    def weight_bytes(self) -> int:
        from mlx.utils import tree_flatten

        flat: Any = tree_flatten(self.model.parameters())
        return sum(int(v.nbytes) for _, v in flat)


def embedding_rows(model: Any) -> int:
    for owner in (getattr(model, "model", None), getattr(getattr(model, "language_model", None), "model", None), model):
        embed = getattr(owner, "embed_tokens", None) if owner is not None else None
        if embed is not None:
            return int(embed.weight.shape[0])
    raise AttributeError(f"cannot find the token embedding of {type(model).__name__}")


def load_target(path: Path, keep_nextn: bool = False) -> LoadedModel:
    """``keep_nextn`` keeps a GGUF's nextn tensors from the same read (a second
    read held a second copy of every tensor); headers are checked before MLX
    reads them (lab.kit.model_files)."""
    from lab.kit.model_files import check_model

    check_model(path)
    if path.is_file() and path.suffix == ".gguf":
        from lab_mlx.gguf import load_gguf

        model, vocab, config, nextn = load_gguf(str(path), keep_nextn)
        return LoadedModel(model, vocab, str(path), config, nextn)
    if not (path / "config.json").exists():
        raise ValueError(f"{path} is neither a .gguf file nor an MLX model directory (no config.json)")
    from mlx_lm.utils import load

    result: Any = load(str(path), return_config=True)
    model, wrapper, config = result
    model.eval()
    hf = getattr(wrapper, "_tokenizer", wrapper)
    return LoadedModel(model, Vocab(hf, embedding_rows(model)), str(path), dict(config))
