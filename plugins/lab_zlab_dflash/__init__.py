"""The ``zlab-dflash`` backend: z-lab's ``dflash`` package (``dflash generate mlx``)
through its Python API; nothing here imports mlx or dflash."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(backends=("lab_zlab_dflash.backend:ZlabDFlashBackend",),
                checks=("lab_zlab_dflash.backend:doctor_checks",))
