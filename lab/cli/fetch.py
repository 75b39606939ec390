"""``lab fetch PROFILE | REFERENCE ...``: the hub models a profile names
(or the references given) fetched ahead into huggingface_hub's cache, what
each arm will load printed first: files, sizes, where the cache keeps them.

``lab check`` lists the same without fetching (:func:`check_models`) and
``lab run`` fetches what is missing before its first arm
(:func:`fetch_for_run`): one look-up, :func:`look`, for all three."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from lab.base.textsafe import printable
from lab.cli.context import EXIT_SIGINT, EXIT_SIGTERM, Context, checked_profile, sigterm_as_interrupt
from lab.kit import hub, hub_ref
from lab.kit.hub_ref import HubRef, size_words
from lab.profile.model_uses import ModelUse, model_uses

DESCRIPTION = (
    "Fetch the hub models a profile names (org/repo:QUANT, org/repo/file.gguf, org/repo) into huggingface_hub's "
    "cache, after printing what each arm will load: files, sizes, cache paths. The free disk is checked before the "
    "first byte; a cut connection resumes; files fetched whole stay when a fetch is stopped. HF_HUB_OFFLINE=1 "
    "fetches nothing; HF_ENDPOINT and HF_HUB_CACHE are huggingface_hub's own settings. `lab run` fetches what is "
    "missing on start; `lab check` lists it without fetching.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="+", metavar="PROFILE|REFERENCE",
                   help="a profile (.toml), or hub references such as org/repo:Q4_K_M")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


@dataclass(frozen=True)
class Looked:
    """One hub reference looked up: its plan, or why there is none."""

    ref: HubRef
    plan: hub.Plan | None = None
    error: hub.HubError | None = None


def is_hub(text: str) -> HubRef | None:
    """The hub reference ``text`` is, unless a path spelled the same exists
    (the path wins, as :func:`lab.kit.models.resolve` decides)."""
    ref = hub_ref.parse(text)
    if ref is None or Path(os.path.expanduser(text)).exists():
        return None
    return ref


def look(texts: Iterable[str], ask: bool) -> dict[str, Looked]:
    """Each distinct hub reference among ``texts``, looked up from the
    cache first (``ask``: from the hub's current revision)."""
    out: dict[str, Looked] = {}
    for text in texts:
        ref = is_hub(text) if text not in out else None
        if ref is None:
            continue
        try:
            out[text] = Looked(ref, plan=hub.plan(ref, ask=ask))
        except hub.HubError as exc:
            out[text] = Looked(ref, error=exc)
    return out


def _where(use: ModelUse) -> str:
    return f"arm {use.arm}: {use.key} " if use.arm else ""


def _first_uses(uses: Sequence[ModelUse]) -> dict[str, ModelUse]:
    first: dict[str, ModelUse] = {}
    for u in uses:
        first.setdefault(u.ref, u)
    return first


def _state(p: hub.Plan) -> str:
    if not p.missing:
        return "cached"
    if len(p.missing) == len(p.files):
        return "to fetch"
    return f"{len(p.missing)} of {len(p.files)} files to fetch ({size_words(p.missing_bytes)})"


def _plan_lines(p: hub.Plan, indent: str) -> list[str]:
    big, small = hub.small_files(p.files)
    lines = [f"{indent}{printable(f.name)}  {size_words(f.size)}  {'cached' if f.local else 'to fetch'}" for f in big]
    if small:
        fetched = sum(1 for f in small if f.local)
        lines.append(f"{indent}{len(small)} small files ({size_words(sum(f.size or 0 for f in small))}), "
                     f"{fetched} cached")
    lines.append(f"{indent}opens {printable(str(p.path))}")
    if p.note:
        lines.append(f"{indent}({printable(p.note)})")
    return lines


def _other_model(text: str) -> str:
    """What a model that is no hub reference is, in a few words."""
    path = Path(os.path.expanduser(text))
    if path.exists():
        from lab.kit.models import model_file_bytes

        return f"on disk ({size_words(model_file_bytes(str(path)))})"
    return "built in" if hub_ref.parse(text) is None else ""


def print_uses(uses: Sequence[ModelUse], looked: dict[str, Looked]) -> None:
    """Per arm, each model it loads; a hub reference's files the first time it appears."""
    shown: set[str] = set()
    arm = None
    for u in uses:
        if u.arm != arm:
            arm = u.arm
            print(f"arm {printable(u.arm)} ({printable(u.backend)})" if u.arm else "references")
        found = looked.get(u.ref)
        if found is None:
            print(f"  {u.key}  {printable(u.ref)}  {_other_model(u.ref)}")
            continue
        if u.ref in shown:
            print(f"  {u.key}  {printable(u.ref)}  (as above)")
            continue
        shown.add(u.ref)
        print(f"  {u.key}  {printable(u.ref)}")
        if found.plan is not None:
            for line in _plan_lines(found.plan, "    "):
                print(line)
        else:
            assert found.error is not None
            print(f"    {printable(found.error.why)}")


def _refused(looked: dict[str, Looked], uses: Sequence[ModelUse], unreachable_too: bool) -> list[str]:
    """A line per reference that cannot load (the hub said no; or, with
    ``unreachable_too``, it could not be asked and the cache lacks it)."""
    first = _first_uses(uses)
    out = []
    for text, found in looked.items():
        if found.error is None or (isinstance(found.error, hub.HubUnreachable) and not unreachable_too):
            continue
        fix = f" ({found.error.fix})" if found.error.fix else ""
        out.append(f"{_where(first[text])}{printable(text)}: {printable(found.error.why)}{fix}")
    return out


def fetch_plans(plans: Sequence[hub.Plan], quiet: bool, then: str) -> int | None:
    """Fetch what ``plans`` miss, the disk checked first; None when all is
    in the cache, else the exit status (2 refused, 1 failed, 130 / 143 stopped)."""
    missing = hub.distinct_missing(plans)
    if not missing:
        return None
    needed = sum(f.size or 0 for _, f in missing)
    where = hub.cache_dir()
    try:
        hub.check_room(plans)
    except hub.NoRoom as exc:
        print(f"lab: not enough disk: {printable(exc.why)}; {exc.fix}; nothing was "
              f"{'fetched or run' if then == 'run' else 'fetched'}", file=sys.stderr)
        return 2
    print(f"lab: fetching {len(missing)} file(s), {size_words(needed)}, into {printable(str(where))} "
          f"({size_words(hub.free_bytes(where))} free)", file=sys.stderr, flush=True)
    start = time.monotonic()
    term: list[int] = []
    try:
        with sigterm_as_interrupt() as term:
            for p in plans:
                if p.missing:
                    hub.fetch(p, out=None if quiet else sys.stderr)
    except KeyboardInterrupt:
        print(f"\nlab: {'terminated (SIGTERM)' if term else 'interrupted'}; the files fetched whole stay in the "
              "cache, and fetching again goes on from there", file=sys.stderr)
        return EXIT_SIGTERM if term else EXIT_SIGINT
    except hub.HubError as exc:
        print(f"lab: {printable(exc)}", file=sys.stderr)
        return 1
    print(f"lab: fetched {len(missing)} file(s), {size_words(needed)}, in {time.monotonic() - start:.0f} s",
          file=sys.stderr)
    return None


def run(args: argparse.Namespace, ctx: Context) -> int:
    uses: list[ModelUse] = []
    for target in args.targets:
        if target.endswith(".toml") or Path(target).is_file():
            profile = checked_profile(target, ctx.registry)
            if profile is None:
                return 2
            uses += model_uses(profile, ctx.registry)
        elif is_hub(target) is not None:
            uses.append(ModelUse("", "", "reference", target))
        else:
            print(f"lab: {printable(target)} is neither a profile nor a hub reference (org/repo:QUANT, "
                  "org/repo/path/file.gguf, org/repo)", file=sys.stderr)
            return 2
    looked = look((u.ref for u in uses), ask=True)
    print(f"hub {printable(hub.endpoint())}, cache {printable(str(hub.cache_dir()))}"
          + ("; HF_HUB_OFFLINE is set" if hub.offline() else ""))
    print_uses(uses, looked)
    refused = _refused(looked, uses, unreachable_too=True)
    if refused:
        for line in refused:
            print(f"lab: {line}", file=sys.stderr)
        print("lab: nothing was fetched", file=sys.stderr)
        return 2
    plans = [found.plan for found in looked.values() if found.plan is not None]
    status = fetch_plans(plans, args.quiet, then="fetch")
    if status is not None:
        return status
    if plans:
        print("every file is in the cache")
    return 0


def check_models(profile_path: str, uses: Sequence[ModelUse]) -> int | None:
    """``lab check``'s lines for the hub models: each reference's size and
    whether the cache holds it, the hub asked only for what it lacks.
    None when it is fine to run, else 2 (a reference that does not exist,
    or not enough disk for what is missing)."""
    looked = look((u.ref for u in uses), ask=False)
    if not looked:
        return None
    print(f"hub models (cache {printable(str(hub.cache_dir()))}):")
    for text, found in looked.items():
        if found.plan is not None:
            p = found.plan
            print(f"  {printable(text)}: {len(p.files)} file(s), {size_words(p.total_bytes)}, {_state(p)}")
        else:
            assert found.error is not None
            print(f"  {printable(text)}: {printable(found.error.why)}")
    refused = _refused(looked, uses, unreachable_too=False)
    for line in refused:
        print(f"lab: {line}", file=sys.stderr)
    plans = [found.plan for found in looked.values() if found.plan is not None]
    needed = sum(f.size or 0 for _, f in hub.distinct_missing(plans))
    unknown = [t for t, f in looked.items() if isinstance(f.error, hub.HubUnreachable)]
    if needed:
        free = hub.free_bytes(hub.cache_dir())
        print(f"to fetch: {size_words(needed)}, {size_words(free)} free on the cache's disk; `lab run` fetches it "
              f"first, or now: lab fetch {printable(profile_path)}")
        try:
            hub.check_room(plans)
        except hub.NoRoom as exc:
            print(f"lab: not enough disk: {printable(exc.why)}; {exc.fix}", file=sys.stderr)
            return 2
    if unknown:
        print(f"not in the cache and not looked up ({len(unknown)}): `lab run` cannot load them until they are "
              f"fetched: lab fetch {printable(profile_path)}")
    return 2 if refused else None


def fetch_for_run(profile_path: str, uses: Sequence[ModelUse], quiet: bool) -> int | None:
    """Before a run: every hub model the cache lacks, fetched (the disk
    checked first); None to go on, else the exit status, nothing run."""
    looked = look((u.ref for u in uses), ask=False)
    refused = _refused(looked, uses, unreachable_too=True)
    if refused:
        for line in refused:
            print(f"lab: {line}", file=sys.stderr)
        print(f"lab: nothing was run; fetch the models where the hub can be reached (lab fetch "
              f"{printable(profile_path)}), or fix the references", file=sys.stderr)
        return 2
    return fetch_plans([f.plan for f in looked.values() if f.plan is not None], quiet, then="run")
