"""The ``dflash-mlx`` backend: the ``dflash-mlx`` package's DFlash engine,
as its ``dflash generate`` runs it; nothing here imports mlx or dflash_mlx."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(backends=("lab_dflash_mlx.backend:DFlashMlxBackend",),
                checks=("lab_dflash_mlx.backend:doctor_checks",))
