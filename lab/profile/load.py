"""Profiles: arms x prompts x rounds, read from TOML into frozen dataclasses.

Stages: read, validate, expand sweeps, infer baselines. A broken profile
gives one ProfileError naming file, line and key path; files it reads stay in
its directory unless ``allow_outside_paths``. :func:`check_profile` is all
``lab run`` and ``lab check`` can know without loading a model."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from lab.base.profile import Arm, Profile, Prompt, RunSettings
from lab.profile.baselines import infer_baselines
from lab.profile.errors import Problems, ProfileError, Source, shown
from lab.profile.read import closest, parse_toml, read_profile_text
from lab.profile.sweeps import ArmDraft, expand
from lab.profile.urls import url_refusal
from lab.profile.validate import check_arm, validate

if TYPE_CHECKING:
    from lab.registry import Registry

__all__ = [
    "Arm", "Profile", "ProfileError", "Prompt", "RunSettings", "check_profile", "load_profile", "parse_profile",
]


def load_profile(path: str | Path, registry: Registry | None = None, models: bool = False) -> Profile:
    """Read and validate a profile. With a registry, backend and drafter names
    and their options are checked too (the runner always passes one);
    ``models``: every model it names exists (:func:`check_profile`)."""
    text = read_profile_text(path)
    return parse_profile(text, str(path), registry, default_name=Path(path).stem, models=models)


def parse_profile(
    text: str, path: str = "<profile>", registry: Registry | None = None, default_name: str = "profile",
    models: bool = False,
) -> Profile:
    """A profile from its TOML text; ``path`` names it in errors and anchors
    its files. Every independent problem is refused at once, root causes first."""
    src = Source(path, text)
    data = parse_toml(src)
    probs = Problems()
    checked = validate(src, data, registry, default_name, probs)
    drafts = probs.attempt(expand, src, checked.arms) or []
    for draft in drafts:
        probs.attempt(check_arm, src, draft, registry)
    if registry is not None and models:
        for draft in drafts:
            probs.attempt(_check_arm_models, src, draft, registry)
    own = len(probs.errors)
    # in the file's order: each arm's own problems read top to bottom
    probs.errors.sort(key=lambda e: e.line or 0)
    arms = probs.attempt(infer_baselines, src, drafts, registry)
    if arms is not None and checked.run.reference and registry is not None:
        probs.attempt(_check_reference, src, arms, registry)
    if own:
        # pairing arms by stack and model goes wrong where an arm's own key did
        probs.errors[own:] = [ProfileError(e.path, e.key, f"{e.message} (this may follow from a problem above)", e.line)
                              for e in probs.errors[own:]]
    probs.raise_any()
    assert arms is not None
    return Profile(checked.name, path, checked.description, checked.run, checked.prompts, arms, text)


def _check_reference(src: Source, arms: Sequence[Arm], registry: Registry) -> None:
    """``reference = true`` asks for what some baseline's engine can give:
    refused when none can (it would silently measure nothing)."""
    bases = [a for a in arms if a.is_baseline]
    if any(registry.backend(a.backend).reference_tool(a.options) for a in bases):
        return
    which = ", ".join(sorted({a.backend for a in bases})) or "none"
    raise src.error(["run", "reference"], "no baseline arm's backend has a reference tool of its engine "
                    f"(baseline backends: {which}; llamacpp has llama-bench, the llama-server backends a bare "
                    "request): remove the key or add such a baseline")


def check_profile(path: str | Path, registry: Registry) -> Profile:
    """Everything knowable without loading a model: :func:`load_profile`,
    then every model it names exists (built-in models are not built)."""
    return load_profile(path, registry, models=True)


def _check_arm_models(src: Source, arm: ArmDraft, registry: Registry) -> None:
    """Every model one expanded arm names exists; then what its backend
    refuses of its options (llama-server bound beyond loopback without the
    profile allowing it), which no option's type can say."""
    key: list[str | int] = ["arms", arm.index]
    if arm.model is not None:
        _check_model(src, arm.model, [*key, "model"])
    for table, values, declared in _model_options(arm, registry):
        for name, value in values.items():
            option = declared.get(name)
            if isinstance(value, str) and option is not None and option.model_ref:
                _check_model(src, value, [*key, table, name])
    backend = registry.backend(arm.backend)
    refused = url_refusal(backend.options, arm.options) or backend.refuse_options(arm.options)
    if refused:
        raise src.error([*key, "options", refused[0]], refused[1])


def option_warnings(profile: Profile, registry: Registry) -> list[str]:
    """What backends want said about options they allow (``warn_options``),
    one line per arm and warning, for the CLI to print before a run."""
    out = []
    for arm in profile.arms:
        for line in registry.backend(arm.backend).warn_options(arm.options):
            out.append(f"arm {arm.name}: {line}")
    return out


def _model_options(arm: Arm, registry: Registry) -> list[tuple[str, Any, dict[str, Any]]]:
    """(table, values, declared options by name) for the arm's backend and drafter."""
    out = [("options", arm.options, {o.name: o for o in registry.backend(arm.backend).options})]
    if arm.drafter is not None:
        out.append(("drafter_options", arm.drafter_options, {o.name: o for o in registry.drafter(arm.drafter).options}))
    return out


def _check_model(src: Source, ref: str, key: Sequence[str | int]) -> None:
    """A model reference names a built-in model the plugins register, a
    path that exists (already resolved from the profile's directory by
    :func:`lab.profile.files.model_path`) or a hub reference (whose files
    the hub and its cache answer for: :mod:`lab.kit.hub`, asked by the
    commands, never here)."""
    from lab.kit import hub_ref, models

    known = models.known_models()
    if ref in known:
        return
    try:
        there = Path(os.path.expanduser(ref)).exists()
    except (OSError, ValueError) as exc:
        raise src.error(key, f"model {shown(ref)}: {type(exc).__name__}") from None
    if there or hub_ref.parse(ref) is not None:
        return
    if re.match(r"[A-Za-z][A-Za-z0-9_-]+:", ref):
        hint = closest(ref, known)
        if hint:
            raise src.error(key, f"no built-in model {shown(ref)}; did you mean {hint!r}? (`lab plugins` lists "
                                 f"all {len(known)} built-in models)")
        raise src.error(key, f"no built-in model {shown(ref)}; known: {', '.join(known)}")
    hub = (" and no hub reference (org/repo:QUANT, org/repo/path/file.gguf or org/repo: docs/profiles.md)"
           if hub_ref.resembles(_as_written(src, ref)) else "")
    raise src.error(key, f"model {shown(ref)}: no such file or directory (a model path is read from the "
                         f"profile's directory){hub}")


def _as_written(src: Source, resolved: str) -> str:
    """A model path as the profile wrote it, before it was joined to the
    profile's directory."""
    from lab.profile.files import base_dir

    base = str(base_dir(src.path))
    prefix = base.rstrip("/") + "/" if base not in ("", ".") else ""
    return resolved[len(prefix):] if prefix and resolved.startswith(prefix) else resolved
