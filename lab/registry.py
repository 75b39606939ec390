"""Finding, loading and listing plugins.

A plugin that fails to import or register is a listed load error
(``LAB_PLUGINS_STRICT=1`` makes it fatal; ``LAB_BLOCK_PLUGINS=a,b`` skips
entry points)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import traceback
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Iterable, Iterator, NoReturn

import pluggy

from lab import hookspecs
from lab.api import CAPABILITIES, Backend, Builder, Check, Drafter, Drafting, ModelBuilder, Option, Probing
from lab.kit import models as model_refs

# lab.models: model-only plugins (a lab_register_models hook)
GROUPS = ("lab.backends", "lab.drafters", "lab.models")


class PluginLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class LoadError:
    entry_point: str
    group: str
    error: str
    traceback: str = ""


@dataclass
class Registry:
    """Backends, drafters and model builders by name, plus what failed to
    load. The facade app code calls instead of the hooks."""

    backends: dict[str, type[Backend]] = field(default_factory=dict)
    drafters: dict[str, type[Drafter]] = field(default_factory=dict)
    models: dict[str, ModelBuilder] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    _pm: pluggy.PluginManager | None = field(default=None, repr=False, compare=False)

    def backend(self, name: str) -> type[Backend]:
        try:
            return self.backends[name]
        except KeyError:
            raise KeyError(self._unknown("backend", name, self.backends)) from None

    def drafter(self, name: str) -> type[Drafter]:
        try:
            return self.drafters[name]
        except KeyError:
            raise KeyError(self._unknown("drafter", name, self.drafters)) from None

    def drafter_backends(self, dcls: type[Drafter]) -> list[str]:
        """The installed backends with the Drafting capability on a stack the
        drafter ``dcls`` drafts for."""
        stacks = dcls.stacks
        return sorted(name for name, cls in self.backends.items()
                      if cls.accepts_drafters and (stacks is None or cls.stack in stacks))

    def doctor_checks(self) -> list[Check]:
        """Every loaded plugin's ``lab_doctor_checks``, in load order; a hook
        that raises becomes a failed check named after its plugin."""
        checks: list[Check] = []
        if self._pm is None:
            return checks
        for impl in self._pm.hook.lab_doctor_checks.get_hookimpls():
            try:
                impl.function(register=checks.append)
            except Exception as exc:  # noqa: BLE001 - a plugin's failure is data
                checks.append(Check(impl.plugin_name, False, f"its checks failed: {type(exc).__name__}: {exc}"))
        return checks

    def _unknown(self, kind: str, name: str, known: Iterable[str]) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        msg = f"unknown {kind} {name!r}; {hint}installed: {', '.join(sorted(known)) or 'none'}"
        failed = [e.entry_point for e in self.errors]
        if failed:
            msg += f" (failed to load: {', '.join(failed)}; see `lab plugins`)"
        return msg


def _strict() -> bool:
    return os.environ.get("LAB_PLUGINS_STRICT", "") not in ("", "0")


def _blocked() -> set[str]:
    raw = os.environ.get("LAB_BLOCK_PLUGINS", "")
    return {part.strip() for part in raw.split(",") if part.strip()}


class PluginExited(Exception):
    """A plugin called ``os._exit`` while it loaded: its load error, not the lab's end."""


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """While a plugin's module imports and its hooks register, ``os._exit``
    raises instead of ending the process (nothing else can be caught: the
    lab would end with no word of which plugin was loading)."""
    real = os._exit

    def refused(status: int) -> NoReturn:
        raise PluginExited(f"it called os._exit({status}) while it loaded; the lab refused to end")

    os._exit = refused
    try:
        yield
    finally:
        os._exit = real


class _CtrlC:
    """Whether a SIGINT or SIGTERM really arrived while plugins loaded:
    anything a plugin raises is a load error, but a user's Ctrl-C (or the
    lab's SIGTERM, which the program raises as a KeyboardInterrupt) must
    still stop the lab, so a KeyboardInterrupt goes on up only with a signal
    behind it (or off the main thread, where none can be watched)."""

    def __init__(self) -> None:
        self.seen = False
        self.watching = False

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        try:
            before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        except (ValueError, OSError):  # pragma: no cover - no signals here
            yield
            return

        def heard(signum: int, frame: Any) -> None:
            self.seen = True
            was = before[signal.Signals(signum)]
            if callable(was):
                was(signum, frame)
            elif signum == signal.SIGTERM and was == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as if never watched: end now
                os.kill(os.getpid(), signal.SIGTERM)
            elif was != signal.SIG_IGN:
                raise KeyboardInterrupt

        for s in before:
            signal.signal(s, heard)
        self.watching = True
        try:
            yield
        finally:
            self.watching = False
            for s, was in before.items():
                signal.signal(s, was)

    def plugins_own(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a plugin's code, is the plugin's failure
        (a load error) rather than the user stopping the lab."""
        if isinstance(exc, KeyboardInterrupt):
            return self.watching and not self.seen
        return True


def load_registry(extra_plugins: Iterable[object] = ()) -> Registry:
    """Load every entry point in GROUPS, then ``extra_plugins`` (objects with
    hookimpls, used by tests), and collect what they register."""
    pm = pluggy.PluginManager("lab")
    pm.add_hookspecs(hookspecs)
    registry = Registry(_pm=pm)
    blocked = _blocked()
    ctrl_c = _CtrlC()
    with ctrl_c.watch():
        _load_all(pm, registry, blocked, ctrl_c, extra_plugins)
    # Model references resolve through what this registry loaded.
    model_refs.install(registry.models)
    return registry


def _load_all(pm: pluggy.PluginManager, registry: Registry, blocked: set[str], ctrl_c: _CtrlC,
              extra_plugins: Iterable[object]) -> None:

    def fail(ep_name: str, group: str, exc: BaseException) -> None:
        err = LoadError(ep_name, group, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        if _strict():
            raise PluginLoadError(f"plugin {ep_name!r} ({group}) failed: {err.error}") from exc
        registry.errors.append(err)

    def register_all(plugin: object, label: str, group: str) -> None:
        def add_backend(cls: type[Backend]) -> None:
            _check(cls, Backend, registry.backends, label, registry.origins)
            if cls.accepts_drafters != issubclass(cls, Drafting):
                raise TypeError(f"{label} registered {cls.__name__}: accepts_drafters must be true exactly "
                                "for a Drafting backend")
            registry.backends[cls.name] = cls
            registry.origins[f"backend:{cls.name}"] = label

        def add_drafter(cls: type[Drafter]) -> None:
            _check(cls, Drafter, registry.drafters, label, registry.origins)
            registry.drafters[cls.name] = cls
            registry.origins[f"drafter:{cls.name}"] = label

        def add_model(ref: str, builder: Builder, filename: str, version: str = "1") -> None:
            known = registry.models.get(ref)
            if known is not None and known.builder is not builder:
                owner = registry.origins.get(f"model:{ref}", "another plugin")
                raise ValueError(f"model {ref!r} is already registered by {owner}")
            registry.models[ref] = ModelBuilder(ref, builder, filename, str(version))
            registry.origins[f"model:{ref}"] = label

        # only this plugin's own hookimpls, so an error is charged to it
        try:
            name = pm.register(plugin, name=label)
        except ValueError as exc:  # the same module or name under another entry point
            fail(label, group, exc)
            return
        try:
            # a hook whose name no hookspec has (a misspelling) would be ignored without a word
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            pm.unregister(plugin)
            fail(label, group, exc)
            return
        if not pm.get_hookcallers(plugin):
            pm.unregister(plugin)
            fail(label, group, TypeError(
                "implements no lab hook (lab_register_backends, lab_register_drafters, lab_register_models, "
                "lab_doctor_checks; see lab.hookspecs)"))
            return
        hooks: tuple[tuple[Any, Callable[..., None]], ...] = (
            (pm.hook.lab_register_backends, add_backend),
            (pm.hook.lab_register_drafters, add_drafter),
            (pm.hook.lab_register_models, add_model),
        )
        # a plugin registers whole or not at all: what it added before its error goes
        before = (dict(registry.backends), dict(registry.drafters), dict(registry.models), dict(registry.origins))
        try:
            with _exit_refused():
                for hook, register in hooks:
                    for impl in hook.get_hookimpls():
                        if impl.plugin_name == name:
                            impl.function(register=register)
        except BaseException as exc:  # a plugin's failure is data, SystemExit included
            registry.backends, registry.drafters, registry.models, registry.origins = before
            pm.unregister(plugin)
            if not ctrl_c.plugins_own(exc):
                raise
            fail(label, group, exc)

    seen: set[str] = set()
    # built-ins register first, so a plugin clashing with one is the one refused
    ordered = [(group, ep) for builtin in (True, False) for group in GROUPS
               for ep in _entry_points(group) if _is_builtin(ep) == builtin]
    for group, ep in ordered:
        if ep.name in blocked or ep.value in seen:
            continue
        seen.add(ep.value)
        try:
            with _exit_refused():
                plugin = ep.load()
        except BaseException as exc:  # SystemExit at import included (see _CtrlC)
            if not ctrl_c.plugins_own(exc):
                raise
            fail(ep.name, group, exc)
            continue
        label = ep.name if pm.get_plugin(ep.name) is None else f"{ep.name} ({group})"
        register_all(plugin, label, group)
    for i, plugin in enumerate(extra_plugins):
        label = getattr(plugin, "__name__", f"extra-{i}")
        if pm.is_registered(plugin) or pm.get_plugin(label) is not None:
            continue
        register_all(plugin, label, "extra")


def _entry_points(group: str) -> list[EntryPoint]:
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


# The distribution that ships the lab and its built-in plugins.
LAB_DISTRIBUTION = "speclab"


def _is_builtin(ep: EntryPoint) -> bool:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or ""
    return name.lower().replace("_", "-") == LAB_DISTRIBUTION


def _check(cls: type, base: type, known: dict[str, type], label: str, origins: dict[str, str] | None = None) -> None:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{label} registered {cls!r}, which is not a {base.__name__}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{label} registered {cls.__name__} without a name")
    if name in known and known[name] is not cls:
        kind = base.__name__.lower()
        owner = (origins or {}).get(f"{kind}:{name}", "another plugin")
        raise ValueError(f"{kind} name {name!r} is already registered by {owner}")
    held_to_contract(cls, base, label)
    if base is Backend and issubclass(cls, Probing):
        held_to_contract(cls, Probing, label)


def held_to_contract(cls: type, base: type, label: str) -> None:
    """The one place the lab inspects a plugin class: every capability in
    ``lab.api.CAPABILITIES`` has its declared kind and every option is an
    ``Option``, else a load error that names it."""
    for attr, kind in CAPABILITIES[base].items():
        value = getattr(cls, attr, None)
        if isinstance(kind, str):  # METHOD
            ok, want = callable(value), "a method"
        else:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            ok, want = isinstance(value, kinds), " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        if not ok:
            raise TypeError(f"{label} registered {cls.__name__}: {attr} must be {want} (see lab.api.{base.__name__}), "
                            f"got {type(value).__name__}")
    seen: set[str] = set()
    for opt in cls.options:  # type: ignore[attr-defined]
        if not isinstance(opt, Option):
            raise TypeError(f"{label} registered {cls.__name__}: its options must be lab.api.Option, "
                            f"got {_short(opt)}")
        problem = opt.problem()
        if problem is None and opt.name in seen:
            problem = "declared twice"
        if problem is not None:
            raise TypeError(f"{label} registered {cls.__name__}: option {_short(getattr(opt, 'name', '?'))}: {problem}")
        seen.add(opt.name)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."
