"""What ``lab probe`` measures: a backend, a model and the backend's
options, typed and checked, from the command line or one arm of a profile,
so the probe loads the target the way the run will."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from lab.api import Option
    from lab.registry import Registry

DEFAULT_BACKEND = "llamacpp"
DEFAULT_MODEL = "embedded:smollm2"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ProbeTargetError(ValueError):
    pass


@dataclass(frozen=True)
class ProbeTarget:
    backend: str
    model: str
    options: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 0
    source: str = "command line"  # or "PROFILE arm NAME"
    # the profile's (tokens, warmup tokens) per request, for a probe that times requests
    requests: tuple[int, int] | None = None


def parse_value(opt: Option, text: str, where: str) -> Any:
    """``text`` as the option's type; ``where`` names the flag for errors."""
    kind = opt.type
    try:
        if kind is bool:
            low = text.strip().lower()
            if low in _TRUE:
                value: Any = True
            elif low in _FALSE:
                value = False
            else:
                raise ValueError(text)
        elif kind is int:
            value = int(text)
        elif kind is float:
            value = float(text)
        elif kind is str:
            value = text
        else:
            raise ProbeTargetError(f"{where}: option {opt.name!r} takes a {kind.__name__}; give it in a profile arm")
    except ValueError:
        raise ProbeTargetError(f"{where}: {opt.name} wants a {kind.__name__}, not {text!r}") from None
    if opt.choices and value not in opt.choices:
        raise ProbeTargetError(f"{where}: {opt.name} is one of {list(opt.choices)}, not {value!r}")
    if opt.min is not None and isinstance(value, (int, float)) and value < opt.min:
        raise ProbeTargetError(f"{where}: {opt.name} is at least {opt.min:g}, not {value}")
    if opt.max is not None and isinstance(value, (int, float)) and value > opt.max:
        raise ProbeTargetError(f"{where}: {opt.name} is at most {opt.max:g}, not {value}")
    return value


def parse_options(registry: Registry, backend: str, pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as the backend's typed options."""
    try:
        declared = {o.name: o for o in registry.backend(backend).options}
    except KeyError as exc:
        raise ProbeTargetError(str(exc.args[0]) if exc.args else f"unknown backend {backend!r}") from None
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ProbeTargetError(f"--option {pair!r}: write KEY=VALUE, e.g. n_gpu_layers=999")
        opt = declared.get(key)
        if opt is None:
            known = ", ".join(sorted(declared)) or "none"
            raise ProbeTargetError(f"--option {key}: backend {backend} has no option {key!r} (its options: {known})")
        out[key] = parse_value(opt, text, f"--option {key}")
    return out


def resolve(
    registry: Registry,
    backend: str | None = None,
    model: str | None = None,
    options: Sequence[str] = (),
    profile: str | None = None,
    arm: str | None = None,
    threads: int = 0,
) -> ProbeTarget:
    """The probe's target: an arm of ``profile`` when given, with the command
    line's ``backend``, ``model``, ``options`` and ``threads`` laid over it."""
    base_options: dict[str, Any] = {}
    source = "command line"
    base_threads = 0
    requests = None
    if profile is not None:
        from lab.profile.load import load_profile

        prof = load_profile(profile, registry)
        names = [a.name for a in prof.arms]
        if arm is None:
            # the first arm that speculates names the stack the run predicts
            chosen = next((a for a in prof.arms if not a.is_baseline), prof.arms[0])
        elif arm in names:
            chosen = prof.arm(arm)
        else:
            raise ProbeTargetError(f"{profile}: no arm {arm!r} (arms: {', '.join(names)})")
        if chosen.model is None:
            raise ProbeTargetError(f"{profile}: arm {chosen.name} names no model")
        backend = backend or chosen.backend
        model = model or chosen.model
        base_options = dict(chosen.options)
        base_threads = prof.run.threads
        source = f"{profile} arm {chosen.name}"
        requests = prof.run.request_lengths()
    elif arm is not None:
        raise ProbeTargetError("--arm names an arm of --profile: give the profile too")
    backend = backend or DEFAULT_BACKEND
    laid = {**base_options, **parse_options(registry, backend, options)}
    return ProbeTarget(backend, model or DEFAULT_MODEL, laid, threads or base_threads, source, requests)
