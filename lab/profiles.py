"""Profiles: arms x prompts x rounds, read from TOML into frozen dataclasses.

A broken profile gives one ProfileError that names the file, the line where
it can be found, and the key path (``arms[2].options.n_max``). Unknown keys
are rejected; plugin options are checked against what the plugin declares.
A list given for a non-list option sweeps it: one arm per value.
"""

from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from lab.api import Option
    from lab.plugins import Registry


class ProfileError(ValueError):
    def __init__(self, path: str, key: str, message: str, line: int | None = None) -> None:
        self.path = path
        self.key = key
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line else path
        at = f" [{key}]" if key else ""
        super().__init__(f"{where}:{at} {message}")


@dataclass(frozen=True)
class RunSettings:
    max_tokens: int = 400
    temperature: float = 0.0
    seed: int = 0
    rounds: int = 2
    warmup: int = 1
    chat_template: bool = True
    ignore_eos: bool = True
    n_ctx: int = 4096
    threads: int = 0
    memory_interval_s: float = 0.1
    # A saved verify-cost probe (lab probe --out FILE) the analysis predicts from.
    probe: str | None = None


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    system: str | None = None


@dataclass(frozen=True)
class Arm:
    name: str
    backend: str
    model: str | None
    drafter: str | None
    n_max: int | None
    options: Mapping[str, Any]
    drafter_options: Mapping[str, Any]
    baseline: str | None  # name of this arm's baseline; None for a baseline arm
    is_baseline: bool
    stack: str
    group: str  # the profile entry a sweep came from
    sweep: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    description: str
    run: RunSettings
    prompts: tuple[Prompt, ...]
    arms: tuple[Arm, ...]
    source: str

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def ordered_arms(self) -> list[Arm]:
        """Baselines first (speculative arms and the oracle need their
        tokens), then the rest in profile order."""
        return [a for a in self.arms if a.is_baseline] + [a for a in self.arms if not a.is_baseline]


_TOP_KEYS = {"profile", "run", "prompts", "arms"}
_PROFILE_KEYS = {"name", "description"}
_PROMPT_KEYS = {"name", "text", "system", "file"}
_ARM_KEYS = {
    "name", "backend", "model", "drafter", "n_max", "options", "drafter_options", "baseline",
}
_RUN_TYPES: dict[str, tuple[type, ...]] = {
    "max_tokens": (int,),
    "temperature": (float, int),
    "seed": (int,),
    "rounds": (int,),
    "warmup": (int,),
    "chat_template": (bool,),
    "ignore_eos": (bool,),
    "n_ctx": (int,),
    "threads": (int,),
    "memory_interval_s": (float, int),
    "probe": (str,),
}


class _Locator:
    """Finds the line of a key path in TOML source. tomllib keeps no
    positions, so this scans headers and ``key =`` lines; it is exact for the
    ordinary layouts profiles use and returns None when unsure."""

    _header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def find(self, path: Sequence[str | int]) -> int | None:
        section: list[str] = []
        counts: dict[str, int] = {}
        # Walk all lines tracking the current table; match on the deepest
        # table prefix of ``path`` then the key.
        want_tables, key = self._split(path)
        best: int | None = None
        for lineno, raw in enumerate(self.lines, start=1):
            m = self._header.match(raw)
            if m:
                name = m.group(2).replace('"', "").replace("'", "").replace(" ", "")
                parts = name.split(".")
                if m.group(1) == "[[":
                    idx = counts.get(name, -1) + 1
                    counts[name] = idx
                    section = parts[:-1] + [f"{parts[-1]}#{idx}"]
                else:
                    # A sub-table of the last array element: [arms.options]
                    if len(parts) > 1 and f"{parts[0]}" in counts:
                        section = [f"{parts[0]}#{counts[parts[0]]}"] + parts[1:]
                    else:
                        section = parts
                if section == want_tables and key is None:
                    return lineno
                continue
            if key is None:
                continue
            stripped = raw.split("#", 1)[0]
            km = re.match(r"^\s*([A-Za-z0-9_\-\"']+)\s*=", stripped)
            if not km:
                continue
            k = km.group(1).strip("\"'")
            if section == want_tables and k == key:
                return lineno
            # inline table form: options = { n_max = 3 }
            if (
                len(want_tables) >= 1
                and section == want_tables[:-1]
                and k == want_tables[-1]
                and re.search(rf"\b{re.escape(key)}\s*=", stripped)
            ):
                best = lineno
        return best

    @staticmethod
    def _split(path: Sequence[str | int]) -> tuple[list[str], str | None]:
        tables: list[str] = []
        items = list(path)
        key: str | None = None
        i = 0
        while i < len(items):
            item = items[i]
            if i + 1 < len(items) and isinstance(items[i + 1], int):
                tables.append(f"{item}#{items[i + 1]}")
                i += 2
                continue
            if i == len(items) - 1:
                key = str(item)
            else:
                tables.append(str(item))
            i += 1
        return tables, key


def _keystr(path: Sequence[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class _Reader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.locator = _Locator(text)

    def error(self, key: Sequence[str | int], message: str) -> ProfileError:
        return ProfileError(self.path, _keystr(key), message, self.locator.find(key))

    def table(self, value: Any, key: Sequence[str | int]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {_tname(value)}")
        return value

    def unknown(self, table: Mapping[str, Any], allowed: set[str], key: Sequence[str | int]) -> None:
        for k in table:
            if k not in allowed:
                hint = _closest(k, allowed)
                raise self.error([*key, k], f"unknown key {k!r}" + (f"; did you mean {hint!r}?" if hint else f"; allowed: {', '.join(sorted(allowed))}"))

    def typed(self, value: Any, types: tuple[type, ...], key: Sequence[str | int]) -> Any:
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok:
            want = " or ".join(t.__name__ for t in types)
            raise self.error(key, f"expected {want}, got {_tname(value)} {value!r}")
        return value


def _tname(value: Any) -> str:
    names: dict[type, str] = {dict: "table", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


def _closest(word: str, options: Iterable[str]) -> str | None:
    import difflib

    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return found[0] if found else None



def load_profile(path: str | Path, registry: Registry | None = None) -> Profile:
    """Read and validate a profile. With a registry, backend and drafter names
    and their options are checked too (the runner always passes one)."""
    p = Path(path)
    spath = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(spath, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(spath, "", f"cannot read: {exc}") from None
    return parse_profile(text, spath, registry, default_name=p.stem)


def parse_profile(
    text: str, path: str = "<profile>", registry: Registry | None = None, default_name: str = "profile"
) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise ProfileError(path, "", f"not valid TOML: {exc}", int(m.group(1)) if m else None) from None
    r = _Reader(path, text)
    r.unknown(data, _TOP_KEYS, [])

    meta = r.table(data.get("profile", {}), ["profile"])
    r.unknown(meta, _PROFILE_KEYS, ["profile"])
    name = r.typed(meta.get("name", default_name), (str,), ["profile", "name"])
    description = r.typed(meta.get("description", ""), (str,), ["profile", "description"])

    run = _read_run(r, data.get("run", {}))
    prompts = _read_prompts(r, data.get("prompts"), Path(path).parent)
    arms = _read_arms(r, data.get("arms"), run, registry)
    return Profile(name, path, description, run, prompts, arms, text)


def _read_run(r: _Reader, raw: Any) -> RunSettings:
    t = r.table(raw, ["run"])
    r.unknown(t, set(_RUN_TYPES), ["run"])
    values: dict[str, Any] = {}
    for k, v in t.items():
        values[k] = r.typed(v, _RUN_TYPES[k], ["run", k])
    if "temperature" in values:
        values["temperature"] = float(values["temperature"])
    if "memory_interval_s" in values:
        values["memory_interval_s"] = float(values["memory_interval_s"])
    settings = RunSettings(**values)
    checks = [
        ("max_tokens", settings.max_tokens >= 1, "must be at least 1"),
        ("rounds", settings.rounds >= 1, "must be at least 1"),
        ("warmup", settings.warmup >= 0, "must be 0 or more"),
        ("temperature", settings.temperature >= 0, "must be 0 or more"),
        ("n_ctx", settings.n_ctx >= 64, "must be at least 64"),
        ("threads", settings.threads >= 0, "must be 0 (auto) or more"),
        ("memory_interval_s", settings.memory_interval_s > 0, "must be positive"),
    ]
    for key, ok, msg in checks:
        if not ok:
            raise r.error(["run", key], msg)
    return settings


def _read_prompts(r: _Reader, raw: Any, base: Path) -> tuple[Prompt, ...]:
    if raw is None:
        raise r.error(["prompts"], "a profile needs at least one [[prompts]] entry")
    if not isinstance(raw, list) or not raw:
        raise r.error(["prompts"], "expected an array of tables ([[prompts]])")
    out: list[Prompt] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        key: list[str | int] = ["prompts", i]
        t = r.table(item, key)
        r.unknown(t, _PROMPT_KEYS, key)
        if "name" not in t:
            raise r.error([*key, "name"], "missing key 'name'")
        name = r.typed(t["name"], (str,), [*key, "name"])
        if name in names:
            raise r.error([*key, "name"], f"duplicate prompt name {name!r}")
        names.add(name)
        if ("text" in t) == ("file" in t):
            raise r.error([*key, "text"], "give exactly one of 'text' or 'file'")
        if "file" in t:
            fpath = base / r.typed(t["file"], (str,), [*key, "file"])
            try:
                text = fpath.read_text(encoding="utf-8")
            except OSError as exc:
                raise r.error([*key, "file"], f"cannot read prompt file: {exc}") from None
        else:
            text = r.typed(t["text"], (str,), [*key, "text"])
        if not text.strip():
            raise r.error([*key, "text"], "prompt text is empty")
        system = t.get("system")
        if system is not None:
            r.typed(system, (str,), [*key, "system"])
        out.append(Prompt(name, text, system))
    return tuple(out)


def _check_options(
    r: _Reader, values: Mapping[str, Any], declared: Sequence[Option], key: list[str | int], owner: str
) -> dict[str, list[Any]]:
    """Validate option values; return each option's list of sweep values."""
    by_name = {o.name: o for o in declared}
    swept: dict[str, list[Any]] = {}
    for k, v in values.items():
        if k not in by_name:
            hint = _closest(k, list(by_name))
            allowed = ", ".join(sorted(by_name)) or "none"
            raise r.error([*key, k], f"{owner} has no option {k!r}" + (f"; did you mean {hint!r}?" if hint else f"; it accepts: {allowed}"))
        opt = by_name[k]
        vals = v if isinstance(v, list) and opt.type is not list else [v]
        if not vals:
            raise r.error([*key, k], "an empty list sweeps nothing")
        for one in vals:
            types: tuple[type, ...] = (opt.type,) if opt.type is not float else (float, int)
            r.typed(one, types, [*key, k])
            if opt.choices is not None and one not in opt.choices:
                raise r.error([*key, k], f"{one!r} is not one of {list(opt.choices)}")
        swept[k] = [float(x) if opt.type is float else x for x in vals]
    for opt in declared:
        if opt.required and opt.name not in values:
            raise r.error([*key, opt.name], f"{owner} requires option {opt.name!r}")
    return swept


def _read_arms(r: _Reader, raw: Any, run: RunSettings, registry: Registry | None) -> tuple[Arm, ...]:
    if raw is None:
        raise r.error(["arms"], "a profile needs at least one [[arms]] entry")
    if not isinstance(raw, list) or not raw:
        raise r.error(["arms"], "expected an array of tables ([[arms]])")
    expanded: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        key: list[str | int] = ["arms", i]
        t = r.table(item, key)
        r.unknown(t, _ARM_KEYS, key)
        for required in ("name", "backend"):
            if required not in t:
                raise r.error([*key, required], f"missing key {required!r}")
        name = r.typed(t["name"], (str,), [*key, "name"])
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise r.error([*key, "name"], "arm names use letters, digits, '_', '.', '-'")
        backend = r.typed(t["backend"], (str,), [*key, "backend"])
        model = t.get("model")
        if model is not None:
            r.typed(model, (str,), [*key, "model"])
        drafter = t.get("drafter")
        if drafter is not None:
            r.typed(drafter, (str,), [*key, "drafter"])
            if drafter in ("", "none"):
                drafter = None
        baseline_name = t.get("baseline")
        if baseline_name is not None:
            r.typed(baseline_name, (str,), [*key, "baseline"])
        options = r.table(t.get("options", {}), [*key, "options"])
        drafter_options = r.table(t.get("drafter_options", {}), [*key, "drafter_options"])
        n_max_raw = t.get("n_max")
        n_max_vals: list[Any] = [None]
        if n_max_raw is not None:
            n_max_vals = n_max_raw if isinstance(n_max_raw, list) else [n_max_raw]
            if not n_max_vals:
                raise r.error([*key, "n_max"], "an empty list sweeps nothing")
            for v in n_max_vals:
                r.typed(v, (int,), [*key, "n_max"])
                if v < 1:
                    raise r.error([*key, "n_max"], "n_max must be at least 1")

        stack = backend
        opt_sweeps: dict[str, list[Any]] = {k: [v] for k, v in options.items()}
        dopt_sweeps: dict[str, list[Any]] = {k: [v] for k, v in drafter_options.items()}
        if registry is not None:
            try:
                bcls = registry.backend(backend)
            except KeyError as exc:
                raise r.error([*key, "backend"], str(exc.args[0])) from None
            stack = bcls.stack
            opt_sweeps = _check_options(r, options, bcls.options, [*key, "options"], f"backend {backend!r}")
            if drafter is not None:
                try:
                    dcls = registry.drafter(drafter)
                except KeyError as exc:
                    raise r.error([*key, "drafter"], str(exc.args[0])) from None
                if not bcls.accepts_drafters:
                    raise r.error([*key, "drafter"], f"backend {backend!r} does not run drafter plugins; use its own options")
                if dcls.stacks is not None and stack not in dcls.stacks:
                    raise r.error([*key, "drafter"], f"drafter {drafter!r} drafts for {sorted(dcls.stacks)}, not {stack!r}")
                dopt_sweeps = _check_options(r, drafter_options, dcls.options, [*key, "drafter_options"], f"drafter {drafter!r}")
            elif drafter_options:
                raise r.error([*key, "drafter_options"], "drafter_options given but no drafter")
            if drafter is not None and n_max_raw is None:
                raise r.error([*key, "n_max"], "a drafter arm needs n_max (tokens drafted per step)")

        axes: list[tuple[str, str, list[Any]]] = [("n_max", "n_max", n_max_vals)]
        axes += [("options", k, v) for k, v in opt_sweeps.items()]
        axes += [("drafter_options", k, v) for k, v in dopt_sweeps.items()]
        swept_axes = [(a, k) for a, k, v in axes if len(v) > 1]
        for combo in itertools.product(*[v for _, _, v in axes]):
            values = {(a, k): val for (a, k, _), val in zip(axes, combo)}
            sweep = {k: values[(a, k)] for a, k in swept_axes}
            arm_name = name + "".join(f"-{k.replace('_', '')}{v}" for k, v in sweep.items()) if sweep else name
            if arm_name in seen:
                raise r.error([*key, "name"], f"duplicate arm name {arm_name!r}")
            seen.add(arm_name)
            expanded.append(
                dict(
                    index=i, name=arm_name, backend=backend, model=model, drafter=drafter,
                    n_max=values[("n_max", "n_max")],
                    options={k: values[("options", k)] for _, k, _ in axes if ("options", k) in values},
                    drafter_options={k: values[("drafter_options", k)] for _, k, _ in axes if ("drafter_options", k) in values},
                    baseline_name=baseline_name, stack=stack, group=name, sweep=sweep,
                )
            )

    # Which arms are baselines: registry decides when it is there.
    def speculative(a: dict[str, Any]) -> bool:
        if registry is not None:
            return registry.backend(a["backend"]).is_speculative(a["options"], a["drafter"])
        return a["drafter"] is not None

    names = {a["name"] for a in expanded}
    arms: list[Arm] = []
    for a in expanded:
        is_base = not speculative(a)
        base: str | None = None
        if a["baseline_name"] is not None:
            if a["baseline_name"] not in names:
                raise r.error(["arms", a["index"], "baseline"], f"no arm named {a['baseline_name']!r}")
            base = a["baseline_name"]
            is_base = False
        elif not is_base:
            for b in expanded:
                if not speculative(b) and b["stack"] == a["stack"] and b["model"] == a["model"]:
                    base = b["name"]
                    break
        if a["drafter"] == "oracle" and base is None:
            raise r.error(["arms", a["index"], "drafter"], "the oracle replays its stack's baseline: add a baseline arm with the same backend and model")
        arms.append(
            Arm(
                name=a["name"], backend=a["backend"], model=a["model"], drafter=a["drafter"],
                n_max=a["n_max"], options=a["options"], drafter_options=a["drafter_options"],
                baseline=base, is_baseline=is_base, stack=a["stack"], group=a["group"], sweep=a["sweep"],
            )
        )
    return tuple(arms)
