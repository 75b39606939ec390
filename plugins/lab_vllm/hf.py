"""A Hugging Face directory made from a GGUF file, for vLLM: transformers
dequantizes the GGUF, and with its quantizer dropped saves a plain float
model and its tokenizer. Runs as its own process (``python -m lab_vllm.hf
SRC DST``), so the lab never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONVERT_TIMEOUT_S = 1800


def convert(gguf: Path, out_dir: Path) -> None:
    """Write the HF directory of ``gguf`` at ``out_dir`` (in this process)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name)
    # save_pretrained refuses a model that says it is GGUF-quantized; the
    # weights are already dequantized floats
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None  # type: ignore[assignment]
    for holder in (model, model.config):
        if getattr(holder, "quantization_config", None) is not None:
            try:
                delattr(holder, "quantization_config")
            except AttributeError:
                holder.quantization_config = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False  # type: ignore[assignment]
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def convert_in_process(gguf: Path, out_dir: Path, python: str | None = None) -> None:
    """Run :func:`convert` in a child interpreter; RuntimeError with its
    last output lines when it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [python or sys.executable, "-m", "lab_vllm.hf", str(gguf), str(out_dir)],
        capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=env,
    )
    if done.returncode != 0 or not (out_dir / "config.json").exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"converting {gguf} to a Hugging Face directory failed (exit {done.returncode}):\n{tail}")


if __name__ == "__main__":  # pragma: no cover - the child side of convert_in_process
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
