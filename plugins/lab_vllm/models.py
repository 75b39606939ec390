"""Hugging Face directories for vLLM arms, made from the lab's GGUF models
and cached beside its other derived models (keyed by the GGUF's path, size
and time, so a changed file is converted again)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lab.kit import models
from lab_vllm.hf import convert_in_process

HF_VERSION = "1"


def hf_dir(ref: str, python: str | None = None) -> Path:
    """A directory vLLM can load for the model ``ref``: the directory itself
    when it already is one, else the GGUF it names, converted once."""
    given = Path(os.path.expanduser(ref))
    if given.is_dir() and (given / "config.json").exists():
        return given
    try:
        gguf = models.resolve(ref)
    except models.ModelNotFound as exc:
        raise RuntimeError(str(exc)) from exc
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{st.st_size}:{int(st.st_mtime)}:{HF_VERSION}".encode()).hexdigest()[:10]
    target = models.cache_dir() / f"hf-{key}-{gguf.stem}"
    if (target / "config.json").exists():
        return target
    return models.build_once(target, lambda tmp: convert_in_process(gguf, tmp, python))
