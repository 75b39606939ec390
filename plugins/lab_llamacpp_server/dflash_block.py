"""How many tokens a DFlash draft can propose a step: its trained block
(``dflash.block_size``, 16 when unsaid) less one, the whole block for an
anchor-first DSpark draft. The server clamps a larger n_max and refuses
longer set rates, so the lab checks n_max first."""

from __future__ import annotations

from pathlib import Path

DEFAULT_BLOCK = 16


def _value(field: object) -> str | None:
    """A GGUF metadata field's value as text, the way llama.cpp prints it
    (``true`` for a true flag)."""
    import gguf

    data = getattr(field, "data", None)
    if not data:
        return None
    part = field.parts[data[0]]  # type: ignore[attr-defined]
    kind = field.types[0] if field.types else None  # type: ignore[attr-defined]
    if kind == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8", "replace")
    if kind == gguf.GGUFValueType.BOOL:
        return "true" if bool(part[0]) else "false"
    return str(part.tolist()[0]) if len(part) else None


def max_draft(draft_path: str | Path, spec_type: str = "draft-dflash") -> tuple[int, str]:
    """The most tokens one step of this draft can propose under ``spec_type``, and why."""
    import gguf

    reader = gguf.GGUFReader(str(draft_path))

    def meta(key: str) -> str | None:
        field = reader.fields.get(key)
        return _value(field) if field is not None else None

    raw = meta("dflash.block_size")
    block = int(raw) if raw is not None and raw.isdigit() else DEFAULT_BLOCK
    anchor_first = spec_type == "draft-dspark" and meta("dflash.sample_from_anchor") == "true"
    most = block if anchor_first else block - 1
    source = "its dflash.block_size" if raw is not None else "llama.cpp's default, the draft names none"
    return most, f"the DFlash draft's trained block is {block} positions ({source}), so a step drafts at most {most}"
