"""A run's probe phase, before any arm: T(w) measured (or found cached, or
read from the file ``[run] probe`` names) for every stack that speculates;
``[run] probe = false`` turns it off. A failed probe costs the prediction,
never the run."""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from lab.base import probe as probes
from lab.base.events import Logged, RunEvent
from lab.base.profile import Profile
from lab.probing import driver, isolated

if TYPE_CHECKING:
    from lab.registry import Registry


def probe_phase(profile: Profile, registry: Registry, emit: Callable[[RunEvent], None],
                cancelled: Callable[[], bool], run_dir: str) -> list[probes.Probe]:
    """Every probe the run prices its arms with, each reported as it comes
    and saved beside the run."""
    setting = profile.run.probe
    if setting is False:
        emit(probes.ProbeReported("", "off ([run] probe = false)"))
        return []
    got: list[probes.Probe] = []
    if isinstance(setting, str):
        path = Path(setting)
        if not path.is_absolute():
            path = Path(profile.path).parent / path
        try:
            p = probes.load(path)
        except probes.ProbeError as exc:
            emit(probes.ProbeReported("", f"{exc}; no prediction"))
            return []
        # arms it priced in another run say nothing here: rows match it by backend and model
        kept = {k: v for k, v in p.origin.items() if k != "arms"}
        p = dataclasses.replace(p, origin={**kept, "source": "file", "path": setting})
        emit(probes.ProbeReported(f"{p.backend} / {p.model}", p.origin_line(), probe=p))
        got.append(p)
    else:
        specs, skipped = driver.plan(profile.arms, profile.run.threads, registry, profile.run.probe_depth,
                                     profile.run.request_lengths())
        for line in skipped:
            emit(probes.ProbeReported("", line))
        for spec in specs:
            if cancelled():
                break
            emit(probes.ProbeReported(
                spec.label, f"verify cost T(w) for widths {probes.format_widths(spec.widths)}", done=False))
            try:
                found = isolated.obtain_isolated(spec, registry, cancelled=cancelled,
                                                 log=lambda text: emit(Logged(text)))
                if found is None:  # cancelled while it measured: its process is stopped
                    break
                # which rows it prices: the report matches rows to probes by this
                p = dataclasses.replace(found, origin={**found.origin, "arms": list(spec.arms)})
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - no probe means no prediction, not a failed run
                emit(Logged(traceback.format_exc()))
                emit(probes.ProbeReported(
                    spec.label, f"failed ({type(exc).__name__}: {exc}); no prediction for this stack"))
                continue
            emit(probes.ProbeReported(spec.label, p.origin_line(), probe=p))
            got.append(p)
    if got and run_dir:
        probes.save_for_run(run_dir, got)
    return got
