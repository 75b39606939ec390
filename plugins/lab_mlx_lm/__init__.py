"""The ``mlx-lm`` backend: mlx-lm's own generation, plain or speculative;
nothing here imports mlx."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(backends=("lab_mlx_lm.backend:MlxLmBackend",))
