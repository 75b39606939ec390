"""Validation: every table of a profile checked against what the lab and the
plugins declare, before any sweep is expanded or any engine started.
What swept values decide together is checked per arm after expansion
(:func:`check_arm`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from lab.api import with_defaults
from lab.base import draft_policy
from lab.base.limits import (
    DEADLINE_RANGE,
    MAX_ARMS,
    MAX_DESCRIPTION,
    MAX_NAME,
    MAX_PROMPTS,
    N_MAX,
    RUN_RANGES,
    out_of_range,
)
from lab.base.profile import DEADLINE_CALLS, ORDERS, Deadlines, Prompt, RunSettings
from lab.profile import acceptance_key, files
from lab.profile.errors import KeyPath, Problems, Source, shown
from lab.profile.errors import clean as clean_text
from lab.profile.names import UniqueNames, name_problem
from lab.profile.options import check_options, check_requires
from lab.profile.read import closest, no_unknown, table, typed
from lab.profile.suites import SUITE_KEYS, SUITE_ONLY_KEYS, expand_suite
from lab.profile.sweeps import ArmDraft, ArmEntry

if TYPE_CHECKING:
    from lab.registry import Registry

TOP_KEYS = ("profile", "run", "prompts", "arms")
PROFILE_KEYS = ("name", "description")
PROMPT_KEYS = ("name", "text", "system", "file")
ARM_KEYS = ("name", "backend", "model", "drafter", "n_max", "options", "drafter_options", "baseline",
            "url", "api_key_env", "concurrency", "acceptance", "draft_policy", "deadlines")
# arm-level keys that are options of a server arm's backend, checked as such
ARM_OPTION_KEYS = ("url", "api_key_env", "concurrency")
RUN_TYPES: dict[str, tuple[type, ...]] = {
    "max_tokens": (int,),
    "temperature": (float, int),
    "seed": (int,),
    "rounds": (int,),
    "warmup": (int,),
    "warmup_tokens": (int,),
    "warm_rounds": (bool,),
    "chat_template": (bool,),
    "ignore_eos": (bool,),
    "n_ctx": (int,),
    "threads": (int,),
    "memory_interval_s": (float, int),
    "probe": (str, bool),
    "probe_depth": (int,),
    "reference": (bool,),
    "allow_outside_paths": (bool,),
    "order": (str,),
    "max_rounds": (int,),
}
_FLOAT_KEYS = ("temperature", "memory_interval_s")


@dataclass(frozen=True)
class Checked:
    """A profile's tables, checked, sweeps not yet expanded."""

    name: str
    description: str
    run: RunSettings
    prompts: tuple[Prompt, ...]
    arms: tuple[ArmEntry, ...]


def validate(src: Source, data: dict[str, Any], registry: Registry | None, default_name: str,
             problems: Problems | None = None) -> Checked:
    """The checked tables; with ``problems`` the checks go on past each
    refusal (kept there), without it the first is raised."""
    probs = problems if problems is not None else Problems()
    probs.attempt(no_unknown, src, data, TOP_KEYS, [])
    meta = probs.attempt(validate_meta, src, data.get("profile", {}), default_name)
    name, description = meta if meta is not None else (default_name, "")
    raw_run = data.get("run", {})
    # a [run] refused for one key still says whether files outside may be read: the
    # prompts and arms are checked as it asked, not refused for what it allowed
    run = probs.attempt(validate_run, src, raw_run) or RunSettings(
        allow_outside_paths=isinstance(raw_run, dict) and raw_run.get("allow_outside_paths") is True)
    prompts = probs.attempt(validate_prompts, src, data.get("prompts"), run, probs) or ()
    arms = probs.attempt(validate_arms, src, data.get("arms"), registry, run, probs) or ()
    names = tuple(p.name for p in prompts)
    for entry in arms:
        probs.attempt(acceptance_key.check_prompts, src, entry.acceptance, names, ["arms", entry.index, "acceptance"])
    if problems is None:
        probs.raise_any()
    return Checked(name, description, run, prompts, arms)


def _has_hidden(text: str, allowed: str = "") -> bool:
    return not all(ch.isprintable() or ch in allowed for ch in text)


def validate_meta(src: Source, raw: Any, default_name: str) -> tuple[str, str]:
    meta = table(src, raw, ["profile"])
    no_unknown(src, meta, PROFILE_KEYS, ["profile"])
    key: KeyPath = ["profile", "name"]
    name = typed(src, meta.get("name", default_name), (str,), key)
    if not name.strip():
        raise src.error(key, "the profile name is empty")
    if len(name) > MAX_NAME or _has_hidden(name):
        raise src.error(key, f"a profile name is at most {MAX_NAME} printable characters, got {shown(name)}")
    key = ["profile", "description"]
    description = typed(src, meta.get("description", ""), (str,), key)
    if len(description) > MAX_DESCRIPTION or _has_hidden(description, "\n\t"):
        raise src.error(key, f"a description is at most {MAX_DESCRIPTION} printable characters (lines and tabs allowed)")
    return name, description


def _unknown_keys(src: Source, t: Mapping[str, Any], allowed: Any, key: KeyPath, probs: Problems) -> None:
    """Every key of ``t`` that is not allowed, each its own problem."""
    for k in t:
        probs.attempt(no_unknown, src, {k: None}, allowed, key)


def _run_value(src: Source, k: str, v: Any) -> Any:
    value = typed(src, v, RUN_TYPES[k], ["run", k])
    if k in _FLOAT_KEYS:
        value = float(v)
    if k in RUN_RANGES:
        why = out_of_range(value, RUN_RANGES[k])
        if why:
            raise src.error(["run", k], why)
    return value


def validate_run(src: Source, raw: Any) -> RunSettings:
    """[run], every key checked on its own: all its problems refused at once."""
    t = table(src, raw, ["run"])
    probs = Problems()
    _unknown_keys(src, t, RUN_TYPES, ["run"], probs)
    values: dict[str, Any] = {}
    for k, v in t.items():
        if k in RUN_TYPES:
            checked = probs.attempt(lambda k=k, v=v: (_run_value(src, k, v),))
            if checked is not None:
                values[k] = checked[0]
    if "order" in values and values["order"] not in ORDERS:
        close = closest(values["order"], ORDERS)
        hint = f"; did you mean {close!r}?" if close else ""
        probs.errors.append(src.error(["run", "order"], f"unknown order {shown(values['order'])}: use \"paired\" "
                                      f"(each arm's cells beside its baseline's) or \"arms\" (one arm after another)"
                                      f"{hint}"))
    if "max_rounds" in values and values["max_rounds"] < values.get("rounds", RunSettings.rounds):
        probs.errors.append(src.error(["run", "max_rounds"], f"max_rounds ({values['max_rounds']}) is below rounds "
                                      f"({values.get('rounds', RunSettings.rounds)}): the rounds always run"))
    probs.raise_any()
    settings = RunSettings(**values)
    if isinstance(settings.probe, str):
        allow = files.outside_allowed(settings.allow_outside_paths)
        files.check_probe(src, files.base_dir(src.path), settings.probe, ["run", "probe"], allow)
    return settings


def validate_prompts(src: Source, raw: Any, run: RunSettings, problems: Problems | None = None) -> tuple[Prompt, ...]:
    if raw is None:
        raise src.error(["prompts"], "a profile needs at least one [[prompts]] entry")
    if not isinstance(raw, list) or not raw:
        raise src.error(["prompts"], "expected an array of tables ([[prompts]])")
    if len(raw) > MAX_PROMPTS:
        raise src.error(["prompts"], f"{len(raw)} prompts; a profile may have at most {MAX_PROMPTS}")
    base = files.base_dir(src.path)
    allow = files.outside_allowed(run.allow_outside_paths)
    out: list[Prompt] = []
    names = UniqueNames()
    for i, item in enumerate(raw):
        if problems is None:
            _prompt_entry(src, i, item, base, allow, names, out)
        else:
            problems.attempt(_prompt_entry, src, i, item, base, allow, names, out)
    return tuple(out)


def _prompt_entry(src: Source, i: int, item: Any, base: Any, allow: bool, names: UniqueNames,
                  out: list[Prompt]) -> None:
    """One ``[[prompts]]`` entry checked, its prompts added to ``out``."""
    key: list[str | int] = ["prompts", i]
    t = table(src, item, key)
    if "suite" in t:
        no_unknown(src, t, (*SUITE_KEYS, "text", "file"), key)
        for p in expand_suite(src, t, key, allow):
            earlier = names.clash(p.name)
            if earlier is not None:
                raise src.error([*key, "suite"], f"suite prompt {shown(p.name)} clashes with prompt {shown(earlier)}; give the line a name = \"...\" prefix")
            out.append(p)
        if len(out) > MAX_PROMPTS:
            raise src.error([*key, "suite"], f"{len(out)} prompts after this suite; a profile may have at most {MAX_PROMPTS}")
        return
    no_unknown(src, t, (*PROMPT_KEYS, *SUITE_KEYS), key)
    for k in SUITE_ONLY_KEYS:
        if k in t:
            raise src.error([*key, k], f"{k!r} goes with suite = \"...\" (a line that names a prompt suite)")
    if "name" not in t:
        raise src.error([*key, "name"], "missing key 'name'")
    name = typed(src, t["name"], (str,), [*key, "name"])
    problem = name_problem(name)
    if problem:
        raise src.error([*key, "name"], f"prompt name {shown(name)}: {problem}")
    earlier = names.clash(name)
    if earlier is not None:
        how = "duplicate prompt name" if earlier == name else f"prompt name differs from {shown(earlier)} only by case:"
        raise src.error([*key, "name"], f"{how} {shown(name)}")
    if ("text" in t) == ("file" in t):
        raise src.error([*key, "text"], "give exactly one of 'text' or 'file'")
    if "file" in t:
        text_key: KeyPath = [*key, "file"]
        value = typed(src, t["file"], (str,), text_key)
        text = files.read_prompt(src, base, value, text_key, allow)
    else:
        text_key = [*key, "text"]
        text = typed(src, t["text"], (str,), text_key)
    if not text.strip():
        raise src.error(text_key, "prompt text is empty")
    if "\x00" in text:
        raise src.error(text_key, "prompt text holds a NUL character")
    system = t.get("system")
    if system is not None:
        typed(src, system, (str,), [*key, "system"])
        if "\x00" in system:
            raise src.error([*key, "system"], "the system prompt holds a NUL character")
    out.append(Prompt(name, text, system))


def validate_arms(
    src: Source, raw: Any, registry: Registry | None, run: RunSettings | None = None, problems: Problems | None = None
) -> tuple[ArmEntry, ...]:
    if raw is None:
        raise src.error(["arms"], "a profile needs at least one [[arms]] entry")
    if not isinstance(raw, list) or not raw:
        raise src.error(["arms"], "expected an array of tables ([[arms]])")
    # each entry makes one arm at least: refused before any entry's checks, which
    # take milliseconds each (options, a drafter's, model paths)
    if len(raw) > MAX_ARMS:
        raise src.error(["arms", MAX_ARMS], f"{len(raw):,} [[arms]] entries; a profile may have at most {MAX_ARMS} "
                                            "arms: split the profile")
    allow = files.outside_allowed(run.allow_outside_paths if run is not None else False)
    if problems is None:
        return tuple(validate_arm(src, i, item, registry, allow) for i, item in enumerate(raw))
    checked = (problems.attempt(validate_arm, src, i, item, registry, allow) for i, item in enumerate(raw))
    return tuple(entry for entry in checked if entry is not None)


def _text(src: Source, t: dict[str, Any], k: str, key: KeyPath) -> str | None:
    """An optional string key: absent is None; empty or with a NUL is refused."""
    value = t.get(k)
    if value is None:
        return None
    typed(src, value, (str,), [*key, k])
    if not value.strip():
        raise src.error([*key, k], f"{k} is an empty string; leave it out or name one")
    if "\x00" in value:
        raise src.error([*key, k], f"{k} holds a NUL character")
    return value


def _misplaced_options(src: Source, t: Mapping[str, Any], key: KeyPath, registry: Registry | None) -> None:
    """An arm-level key that is a plugin's option (``spec_type`` beside
    ``backend``) belongs in the arm's options or drafter_options table: the
    error says where, instead of only listing the arm keys."""
    if registry is None:
        return
    backend, drafter = t.get("backend"), t.get("drafter")
    for k in t:
        if k in ARM_KEYS:
            continue
        for kind, table_name, plugins, own in (
            ("backend", "options", registry.backends, backend),
            ("drafter", "drafter_options", registry.drafters, drafter),
        ):
            having = sorted(n for n, cls in plugins.items() if k in {o.name for o in cls.options})
            if not having:
                continue
            where = f"{table_name} = {{ {k} = ... }}"
            if isinstance(own, str) and own in having:
                whose = f"{kind} {own!r}"
            else:
                names = ", ".join(repr(n) for n in having)
                whose = f"{kind} {names}" + (f", not of this arm's {own!r}" if isinstance(own, str) else "")
                where += f" on an arm whose {kind} is {names}"
            raise src.error([*key, k], f"{shown(k)} is an option of {whose}, not an arm key: put it under "
                                       f"{where}; see `lab plugins`")


def validate_arm(src: Source, i: int, item: Any, registry: Registry | None, allow_outside: bool = False) -> ArmEntry:
    """One ``[[arms]]`` entry: each of its keys checked on its own, so that
    every problem it has is refused at once (a key whose check needs another,
    an option of an unknown backend, waits for that one)."""
    key: list[str | int] = ["arms", i]
    t = table(src, item, key)
    probs = Problems()
    for k in t:
        if k not in ARM_KEYS:
            # an option of a plugin is said to be one (where it goes), any other key unknown
            probs.attempt(_misplaced_options, src, {k: t[k], **{x: t[x] for x in ("backend", "drafter") if x in t}},
                          key, registry)
            if not _said(probs, key, k):
                probs.attempt(no_unknown, src, {k: None}, ARM_KEYS, key)
    for required in ("name", "backend"):
        if required not in t:
            probs.errors.append(src.error([*key, required], f"missing key {required!r}"))
    name = probs.attempt(_arm_name, src, t, key) if "name" in t else None
    backend = probs.attempt(typed, src, t["backend"], (str,), [*key, "backend"]) if "backend" in t else None
    model = probs.attempt(_model, src, t, key, allow_outside)
    before = len(probs.errors)
    drafter = probs.attempt(_drafter, src, t, key)
    drafter_ok = len(probs.errors) == before
    baseline = probs.attempt(_text, src, t, "baseline", key)
    options = probs.attempt(_arm_options, src, t, key)
    drafter_options = probs.attempt(table, src, t.get("drafter_options", {}), [*key, "drafter_options"])
    n_max = probs.attempt(_n_max, src, t.get("n_max"), [*key, "n_max"])
    acceptance = probs.attempt(acceptance_key.parse, src, t.get("acceptance"), [*key, "acceptance"])
    policy = (probs.attempt(_draft_policy, src, t.get("draft_policy"), drafter, [*key, "draft_policy"]) if drafter_ok
              else draft_policy.FIXED)
    deadlines = probs.attempt(_deadlines, src, t.get("deadlines"), [*key, "deadlines"])

    stack = backend
    opt_axes: dict[str, list[Any]] = {k: [v] for k, v in (options or {}).items()}
    dopt_axes: dict[str, list[Any]] = {k: [v] for k, v in (drafter_options or {}).items()}
    if registry is not None and backend is not None:
        got = probs.attempt(_plugins, src, t, key, registry, backend, model, drafter if drafter_ok else "",
                            options, drafter_options, allow_outside)
        if got is not None:
            stack, opt_axes, dopt_axes = got
    probs.raise_any()
    assert name is not None and backend is not None and stack is not None and n_max is not None
    assert policy is not None and deadlines is not None and acceptance is not None
    return ArmEntry(i, name, backend, model, drafter, n_max, opt_axes, dopt_axes, baseline, stack, acceptance, policy,
                    deadlines)


def _said(probs: Problems, key: KeyPath, k: str) -> bool:
    """Whether a problem of key ``k`` of this table was kept already."""
    from lab.profile.errors import key_path

    where = key_path([*key, k])
    return any(e.key == where for e in probs.errors)


def _arm_name(src: Source, t: Mapping[str, Any], key: KeyPath) -> str:
    name = typed(src, t["name"], (str,), [*key, "name"])
    problem = name_problem(name)
    if problem:
        raise src.error([*key, "name"], f"arm name {shown(name)}: {problem}")
    return str(name)


def _model(src: Source, t: dict[str, Any], key: KeyPath, allow_outside: bool) -> str | None:
    model = _text(src, t, "model", key)
    if model is None:
        return None
    return str(files.model_path(src, files.base_dir(src.path), model, [*key, "model"], allow_outside))


def _drafter(src: Source, t: Mapping[str, Any], key: KeyPath) -> str | None:
    drafter = t.get("drafter")
    if drafter is None:
        return None
    typed(src, drafter, (str,), [*key, "drafter"])
    # "" and "none" spell out a baseline arm
    return None if drafter.strip() in ("", "none") else str(drafter)


def _arm_options(src: Source, t: Mapping[str, Any], key: KeyPath) -> dict[str, Any]:
    options = table(src, t.get("options", {}), [*key, "options"])
    for k in ARM_OPTION_KEYS:
        if k in t:
            if k in options:
                raise src.error([*key, k], f"{k} is given twice: at the arm's level and in its options")
            options = {**options, k: t[k]}
    return dict(options)


def _plugins(src: Source, t: Mapping[str, Any], key: KeyPath, registry: Registry, backend: str, model: str | None,
             drafter: str | None, options: dict[str, Any] | None, drafter_options: dict[str, Any] | None,
             allow_outside: bool) -> tuple[str, dict[str, list[Any]], dict[str, list[Any]]]:
    """What the arm's backend and drafter plugins declare: its stack and its
    options swept into axes; the backend's problems and the drafter's said
    together. ``drafter`` "": the arm names one that was refused already."""
    probs = Problems()
    base = files.base_dir(src.path)
    try:
        bcls = registry.backend(backend)
    except KeyError as exc:
        raise src.error([*key, "backend"], str(exc.args[0])) from None
    stack = bcls.stack
    opt_axes: dict[str, list[Any]] = {}
    dopt_axes: dict[str, list[Any]] = {}
    # an arm attached to a running server by URL brings its own model
    if model is None and "model" not in t and options is not None and bcls.needs_model(options):
        probs.errors.append(src.error([*key, "model"], f"backend {backend!r} runs a target model: add model = \"...\""))
    if options is not None:
        axes = probs.attempt(check_options, src, options, bcls.options, [*key, "options"], f"backend {backend!r}")
        if axes is not None:
            probs.attempt(_model_paths, src, base, axes, bcls.options, [*key, "options"], allow_outside)
            opt_axes = axes
    if drafter:
        dcls = probs.attempt(_drafter_class, src, key, registry, drafter, backend, bcls, stack)
        if dcls is not None and drafter_options is not None:
            axes = probs.attempt(check_options, src, drafter_options, dcls.options, [*key, "drafter_options"],
                                 f"drafter {drafter!r}")
            if axes is not None:
                probs.attempt(_model_paths, src, base, axes, dcls.options, [*key, "drafter_options"], allow_outside)
                dopt_axes = axes
    elif drafter is None and drafter_options:
        probs.errors.append(src.error([*key, "drafter_options"], "drafter_options given but no drafter"))
    if drafter and t.get("n_max") is None:
        probs.errors.append(src.error([*key, "n_max"], "a drafter arm needs n_max (tokens drafted per step)"))
    probs.raise_any()
    return stack, opt_axes, dopt_axes


def _drafter_class(src: Source, key: KeyPath, registry: Registry, drafter: str, backend: str, bcls: Any,
                   stack: str) -> Any:
    try:
        dcls = registry.drafter(drafter)
    except KeyError as exc:
        raise src.error([*key, "drafter"], str(exc.args[0])) from None
    if not bcls.accepts_drafters:
        raise src.error([*key, "drafter"], f"backend {backend!r} does not run drafter plugins; use its own options")
    if dcls.stacks is not None and stack not in dcls.stacks:
        raise src.error([*key, "drafter"], f"drafter {drafter!r} drafts for {sorted(dcls.stacks)}, not {stack!r}")
    return dcls


def _deadlines(src: Source, raw: Any, key: KeyPath) -> Deadlines:
    """``deadlines = { load = 120, generate = 90 }``: seconds each plugin call may
    go without a sign of life (lab.base.profile.Deadlines); the rest keep their defaults."""
    if raw is None:
        return Deadlines()
    t = table(src, raw, key)
    no_unknown(src, t, DEADLINE_CALLS, key)
    got: dict[str, float] = {}
    for call, value in t.items():
        seconds = float(typed(src, value, (int, float), [*key, call]))
        why = out_of_range(seconds, DEADLINE_RANGE)
        if why:
            raise src.error([*key, call], why)
        got[call] = seconds
    return Deadlines(**got)


def _draft_policy(src: Source, raw: Any, drafter: str | None, key: KeyPath) -> str:
    """The arm's draft-length policy: one of :data:`lab.base.draft_policy.POLICIES`,
    and other than fixed only where the lab's own loop asks a drafter plugin."""
    if raw is None:
        return draft_policy.FIXED
    value = typed(src, raw, (str,), key)
    if value not in draft_policy.POLICIES:
        close = closest(value, draft_policy.POLICIES)
        hint = f"; did you mean {close!r}?" if close else ""
        raise src.error(key, f"unknown draft_policy {shown(value)}: use one of "
                             f"{', '.join(draft_policy.POLICIES)}{hint}")
    if value != draft_policy.FIXED and drafter is None:
        raise src.error(key, f"draft_policy {value!r} sets how many tokens the lab's own loop asks a drafter for: "
                             "give the arm a drafter (a server's own speculation keeps its n_max)")
    return value


def _model_paths(
    src: Source, base: Any, axes: dict[str, list[Any]], declared: Any, key: KeyPath, allow_outside: bool
) -> None:
    """Options a plugin marks ``model_ref`` (``draft_model``) follow the
    arm's ``model``: paths from the profile's directory."""
    refs = {o.name for o in declared if o.model_ref}
    for name, values in axes.items():
        if name in refs:
            axes[name] = [files.model_path(src, base, v, [*key, name], allow_outside) if isinstance(v, str) else v
                          for v in values]


def _n_max(src: Source, raw: Any, key: KeyPath) -> tuple[int | None, ...]:
    if raw is None:
        return (None,)
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise src.error(key, "an empty list sweeps nothing")
    for v in values:
        typed(src, v, (int,), key)
        why = out_of_range(v, N_MAX)
        if why:
            raise src.error(key, f"n_max {why}")
    return tuple(values)


def check_arm(src: Source, arm: ArmDraft, registry: Registry | None) -> None:
    """What one expanded arm's combination of values decides."""
    if registry is None:
        return
    key: list[str | int] = ["arms", arm.index]
    bcls = registry.backend(arm.backend)
    check_requires(src, arm.options, bcls.options, [*key, "options"], f"backend {arm.backend!r}")
    acceptance_key.check(src, arm, bcls.sets_acceptance(arm.options), bcls.is_speculative(arm.options, arm.drafter),
                         [*key, "acceptance"])
    _plugin_check(src, bcls.check_options, with_defaults(bcls.options, arm.options), [*key, "options"],
                  f"backend {arm.backend!r}", arm.options)
    if arm.drafter is not None:
        dcls = registry.drafter(arm.drafter)
        check_requires(src, arm.drafter_options, dcls.options, [*key, "drafter_options"], f"drafter {arm.drafter!r}")
        _plugin_check(src, dcls.check_options, with_defaults(dcls.options, arm.drafter_options),
                      [*key, "drafter_options"], f"drafter {arm.drafter!r}", arm.drafter_options)


def _plugin_check(src: Source, check: Any, options: dict[str, Any], key: KeyPath, owner: str,
                  given: Mapping[str, Any]) -> None:
    """A plugin's own cross-option check (``check_options``): its first
    problem refuses the arm, at the options table's line."""
    try:
        problems = check(options)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, named as such
        raise src.error(key, f"{owner}: its check_options failed: {type(exc).__name__}: {clean_text(str(exc))}") from None
    if not isinstance(problems, (list, tuple)):
        raise src.error(key, f"{owner}: check_options returned {type(problems).__name__}, not a list of problems")
    if problems:
        where = ", ".join(f"{k} = {v!r}" for k, v in given.items()) or "the defaults"
        raise src.error(key, f"{owner}: {clean_text(str(problems[0]))} (with {where})")
