"""A run's probe measured in a child process of its own (measuring in the
run's process can leave a GPU slower for the whole run): the child loads the
backend, measures and caches the curve as :func:`lab.probing.driver.obtain`
does, writes it to a file and exits; it is stopped and waited for on every
way out. ``LAB_PROBE_PROCESS=shared`` measures in the run's process.

    python -m lab.probing.probe_child REQUEST.json MODULES   (the child; not a command for users)"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import signal
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from lab.base.probe import Probe, ProbeError, load, save
from lab.kit.children import Child
from lab.probing.driver import DEFAULT_REPEATS, ProbeSpec, obtain
from lab.registry import Registry, load_registry

# How long a child has to end after it was asked to (SIGTERM), before SIGKILL.
STOP_GRACE_S = 5.0
POLL_S = 0.05


def wants_own_process(spec: ProbeSpec, registry: Registry) -> bool:
    """Whether this spec's probe runs in a child: an installed plugin's
    backend, unless ``LAB_PROBE_PROCESS=shared``."""
    if os.environ.get("LAB_PROBE_PROCESS", "").strip().lower() == "shared":
        return False
    cls = registry.backends.get(spec.backend)
    return cls is not None and installed(cls, "lab.backends")


def installed(cls: type, group: str) -> bool:
    """Whether ``cls`` comes from a plugin of entry-point ``group``, so a
    child process finds it as the registry loads (a class registered by
    hand does not)."""
    module = cls.__module__
    return any(module == ep.module or module.startswith(ep.module + ".") for ep in entry_points(group=group))


def obtain_isolated(
    spec: ProbeSpec,
    registry: Registry,
    repeats: int = DEFAULT_REPEATS,
    root: Path | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda text: None,
) -> Probe | None:
    """:func:`lab.probing.driver.obtain` in a child process when the spec
    wants one (:func:`wants_own_process`), else in this one. None when
    ``cancelled`` turned true first (the child is stopped)."""
    if not wants_own_process(spec, registry):
        return obtain(spec, registry, repeats=repeats, root=root)
    with tempfile.TemporaryDirectory(prefix="lab-probe-") as tmp:
        request = Path(tmp) / "request.json"
        out = Path(tmp) / "probe.json"
        request.write_text(json.dumps({
            "backend": spec.backend, "model": spec.model, "threads": spec.threads, "options": dict(spec.options),
            "widths": list(spec.widths), "repeats": repeats, "root": str(root) if root is not None else None,
            "out": str(out), "depth": spec.depth, "deeper": spec.deeper,
            "request_tokens": list(spec.request_tokens) if spec.request_tokens is not None else None,
        }, default=str), encoding="utf-8")
        cls = registry.backends[spec.backend]
        # a fresh interpreter that loads the engine's native libraries before the lab (lab.arms.host)
        child = Child([sys.executable, "-m", "lab.probing.probe_child", str(request), ",".join(cls.native_preload)],
                      name="the probe's process", log_path=Path(tmp) / "child.log")
        try:
            while child.alive():
                if cancelled():
                    return None
                time.sleep(POLL_S)
        finally:
            child.stop(STOP_GRACE_S)
            said = child.said()
            if said:
                log(f"probe of {spec.label} in its own process (pid {child.pid}):\n" + "\n".join(said))
        if child.returncode != 0:
            how = (f"died of {signal.Signals(-child.returncode).name}" if child.returncode and child.returncode < 0
                   else f"ended with status {child.returncode}")
            raise RuntimeError(f"the probe's process {how}: {said[-1] if said else 'no output'}")
        try:
            p = load(out)
        except ProbeError as exc:
            raise RuntimeError(f"the probe's process wrote no usable probe: {exc}") from None
    return dataclasses.replace(p, origin={**p.origin, "process": "own"})


def _stop_asked(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    # SIGTERM as Ctrl-C, so every finally runs and a started server is stopped
    signal.signal(signal.SIGTERM, _stop_asked)
    faulthandler.enable(all_threads=True)
    req = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    depth = req.get("depth")
    lengths = req.get("request_tokens")
    spec = ProbeSpec(req["backend"], req["model"], int(req["threads"]), dict(req["options"]),
                     tuple(int(w) for w in req["widths"]), depth=int(depth) if depth is not None else None,
                     request_tokens=(int(lengths[0]), int(lengths[1])) if lengths else None,
                     deeper=int(req["deeper"]) if req.get("deeper") is not None else None)
    root = Path(req["root"]) if req.get("root") else None
    p = obtain(spec, load_registry(), repeats=int(req["repeats"]), root=root,
               progress=lambda text: print(text, flush=True))
    save(p, req["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
