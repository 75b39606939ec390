"""Profiles: arms x prompts x rounds, read from TOML into frozen dataclasses.

A profile goes through four stages, one module each under :mod:`lab.profile`:
read (file and TOML), validate (every table, against the lab's limits and
what the plugins declare), expand sweeps (a list given for n_max or a
non-list option makes one arm per value), infer baselines. A broken profile
gives one ProfileError that names the file, the line where it can be found,
and the key path (``arms[2].options.n_max``); no input gives another
exception. Files a profile reads stay inside its directory unless
``[run] allow_outside_paths = true`` (or ``LAB_ALLOW_OUTSIDE_PATHS=1``).

:func:`check_profile` is what ``lab run`` and ``lab check`` call: everything
that can be known without loading a model, the models it names included.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from lab.base.profile import Arm, Profile, Prompt, RunSettings
from lab.profile.baselines import infer_baselines
from lab.profile.errors import ProfileError, Source, shown
from lab.profile.read import parse_toml, read_profile_text
from lab.profile.sweeps import expand
from lab.profile.validate import check_arm, validate

if TYPE_CHECKING:
    from lab.registry import Registry

__all__ = [
    "Arm", "Profile", "ProfileError", "Prompt", "RunSettings", "check_profile", "load_profile", "parse_profile",
]


def load_profile(path: str | Path, registry: Registry | None = None) -> Profile:
    """Read and validate a profile. With a registry, backend and drafter names
    and their options are checked too (the runner always passes one)."""
    text = read_profile_text(path)
    return parse_profile(text, str(path), registry, default_name=Path(path).stem)


def parse_profile(
    text: str, path: str = "<profile>", registry: Registry | None = None, default_name: str = "profile"
) -> Profile:
    """A profile from its TOML text; ``path`` names it in errors and anchors
    the files it reads."""
    src = Source(path, text)
    data = parse_toml(src)
    checked = validate(src, data, registry, default_name)
    drafts = expand(src, checked.arms)
    for draft in drafts:
        check_arm(src, draft, registry)
    arms = infer_baselines(src, drafts, registry)
    if checked.run.reference and registry is not None:
        _check_reference(src, arms, registry)
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
    """Everything about a profile that is known without loading a model:
    :func:`load_profile` with the plugins, then every model it names exists
    (a built-in ``embedded:`` / ``tiny:`` name the lab knows, or a path that
    is there). Built-in models are not built here."""
    profile = load_profile(path, registry)
    src = Source(str(path), profile.source)
    entries = list(dict.fromkeys(a.group for a in profile.arms))
    for arm in profile.arms:
        key: list[str | int] = ["arms", entries.index(arm.group)]
        if arm.model is not None:
            _check_model(src, arm.model, [*key, "model"])
        for table, values, declared in _model_options(arm, registry):
            for name, value in values.items():
                option = declared.get(name)
                if isinstance(value, str) and option is not None and option.model_ref:
                    _check_model(src, value, [*key, table, name])
        # A backend may refuse a combination its options' types cannot say
        # (llama-server bound beyond loopback without the profile allowing it).
        refused = registry.backend(arm.backend).refuse_options(arm.options)
        if refused:
            raise src.error([*key, "options", refused[0]], refused[1])
    return profile


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
    """A model reference names a built-in model the plugins register or a
    path that exists (already resolved from the profile's directory by
    :func:`lab.profile.files.model_path`)."""
    from lab.kit import models

    known = models.known_models()
    if ref in known:
        return
    try:
        there = Path(os.path.expanduser(ref)).exists()
    except (OSError, ValueError) as exc:
        raise src.error(key, f"model {shown(ref)}: {type(exc).__name__}") from None
    if there:
        return
    if re.match(r"[A-Za-z][A-Za-z0-9_-]+:", ref):
        raise src.error(key, f"no built-in model {shown(ref)}; known: {', '.join(known)}")
    raise src.error(key, f"model {shown(ref)}: no such file or directory (a model path is read from the "
                         "profile's directory)")
