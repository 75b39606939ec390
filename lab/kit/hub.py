"""Hub references (:mod:`lab.kit.hub_ref`) resolved to files on disk,
through huggingface_hub and into its own cache, the one mlx-lm, llama.cpp
and the rest share: a file fetched here is never fetched or kept twice.

- :func:`in_cache`: what the cache holds for a reference, asking nobody.
- :func:`plan`: the files, their sizes and which are missing, from the cache
  first or from the hub's current revision.
- :func:`check_room`: the free disk against what is to fetch, before the first byte.
- :func:`fetch`: the missing files, one progress bar each; a cut connection
  resumes where it stopped (huggingface_hub asks for the rest by range).
- :func:`local_path`: all of that for one reference (:func:`lab.kit.models.resolve`).

A reference the cache holds resolves without the hub, so a filled cache
works offline as it is. ``HF_HUB_OFFLINE=1`` keeps every step off the
network; ``HF_ENDPOINT`` and ``HF_HUB_CACHE`` / ``HF_HOME`` are
huggingface_hub's own settings, read when a step runs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

from lab.kit.hub_ref import Choice, HubRef, NoSuchFile, choose, size_words

REVISION = "main"
# Left free on the cache's disk after a fetch: a full disk fails whatever
# writes next, the run's own files included.
SPARE_BYTES = 256 * 10**6
# Files below this are listed together when a plan is printed.
SMALL_FILE = 10**6

# What a fetch reports as it goes: (file in the repository, bytes so far, of bytes)
Seen = Callable[[str, int, "int | None"], None]


class HubError(Exception):
    """A reference that cannot be resolved: the message says why, ``fix``
    what to do."""

    def __init__(self, ref: str, why: str, fix: str = "") -> None:
        self.ref = ref
        self.why = why
        self.fix = fix
        super().__init__(f"{ref}: {why}" + (f" ({fix})" if fix else ""))


class HubUnreachable(HubError):
    """The hub did not answer (no network, a refused connection, a timeout)."""


class NoRoom(HubError):
    """Less free disk than the fetch needs."""

    def __init__(self, needed: int, free: int, where: Path) -> None:
        self.needed = needed
        self.free = free
        self.where = where
        super().__init__(
            "models", f"{size_words(needed)} to fetch, {size_words(free)} free on the disk of {where} "
            f"(and {size_words(SPARE_BYTES)} kept spare)",
            "free space there, or set HF_HUB_CACHE to a directory on a larger disk")


def _true(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, now or when
    huggingface_hub was imported."""
    if _true(os.environ.get("HF_HUB_OFFLINE")) or _true(os.environ.get("TRANSFORMERS_OFFLINE")):
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def endpoint() -> str:
    """The hub's address: ``HF_ENDPOINT``, else huggingface_hub's default."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or constants.ENDPOINT


def _timeout() -> float:
    """Seconds to wait for the hub's answer to a listing (huggingface_hub's
    ``HF_HUB_ETAG_TIMEOUT``, its wait for a file's metadata): a network that
    drops packets must not hold a command for ever."""
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)
    except ValueError:
        return 10.0


def cache_dir() -> Path:
    """huggingface_hub's cache: ``HF_HUB_CACHE``, ``HF_HOME``/hub, else its default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or would: its nearest
    existing parent). The one place the lab reads free disk."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def repo_dir(repo: str) -> Path:
    """Where the cache keeps ``repo`` (huggingface_hub's layout)."""
    return cache_dir() / ("models--" + repo.replace("/", "--"))


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int | None
    local: Path | None  # where the cache holds it; None: to fetch


@dataclass(frozen=True)
class Plan:
    """What one reference loads: its files at one commit, which the cache
    holds, and the path an engine opens. ``source`` is "cache" or "hub";
    ``note`` says why the cache stood in for the hub."""

    ref: HubRef
    commit: str
    files: tuple[HubFile, ...]
    load: str
    source: str
    note: str = ""

    @property
    def snapshot(self) -> Path:
        return repo_dir(self.ref.repo) / "snapshots" / self.commit

    @property
    def path(self) -> Path:
        """The file (or, for a directory reference, the directory) an engine opens."""
        return self.snapshot / self.load if self.load else self.snapshot

    @property
    def missing(self) -> tuple[HubFile, ...]:
        return tuple(f for f in self.files if f.local is None)

    @property
    def total_bytes(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if None in sizes else sum(s for s in sizes if s is not None)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size or 0 for f in self.missing)


def _listing_on_disk(snapshot: Path) -> list[tuple[str, int | None]]:
    """The files a cached snapshot holds (a link whose blob is gone is none)."""
    out: list[tuple[str, int | None]] = []
    for f in sorted(snapshot.rglob("*")):
        if f.is_file():
            out.append((f.relative_to(snapshot).as_posix(), f.stat().st_size))
    return out


def _cached_tree(repo: str, commit: str) -> list[tuple[str, int | None]] | None:
    """The repository's whole listing at ``commit`` as huggingface_hub
    recorded it when it fetched there, if it did: the files the hub had,
    not only those fetched."""
    try:
        from huggingface_hub import get_cached_repo_tree
    except ImportError:  # an older huggingface_hub keeps no listing
        return None
    try:
        return [(f.path, f.size) for f in get_cached_repo_tree(repo, revision=commit, cache_dir=cache_dir())]
    except Exception:  # noqa: BLE001 - no listing cached (or an unreadable one): the snapshot's files stand in
        return None


def _commits(repo: str) -> list[str]:
    """The cached commits of ``repo``, the one ``main`` points at first,
    then the newest."""
    base = repo_dir(repo)
    snaps = base / "snapshots"
    if not snaps.is_dir():
        return []
    found = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    names = [p.name for p in found]
    try:
        main = (base / "refs" / REVISION).read_text(encoding="utf-8").strip()
    except OSError:
        main = ""
    return [main, *(n for n in names if n != main)] if main in names else names


def _complete(snapshot: Path, choice: Choice) -> bool:
    """Every file of ``choice`` is in ``snapshot``, and a directory's
    sharded weights are all there (its index names them)."""
    if not all((snapshot / f).is_file() for f in choice.files):
        return False
    index = snapshot / "model.safetensors.index.json"
    if choice.load == "" and index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError):
            return False
        return all((snapshot / s).is_file() for s in shards)
    return True


def in_cache(ref: HubRef) -> Plan | None:
    """The cached copy of ``ref``, complete, without a word to the hub; None
    when the cache lacks any of its files."""
    for commit in _commits(ref.repo):
        snapshot = repo_dir(ref.repo) / "snapshots" / commit
        tree = _cached_tree(ref.repo, commit)
        try:
            choice = choose(ref, tree if tree is not None else _listing_on_disk(snapshot))
        except NoSuchFile:
            continue
        if _complete(snapshot, choice):
            files = tuple(HubFile(f, (snapshot / f).stat().st_size, snapshot / f) for f in choice.files)
            return Plan(ref, commit, files, choice.load, "cache")
    return None


def _hub_error(ref: HubRef, exc: Exception) -> HubError:
    """huggingface_hub's error for ``ref`` in the lab's words."""
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return HubError(ref.text, f"{ref.repo} is gated: its files need its terms accepted on the hub",
                        "accept them on the repository's page, then log in here: hf auth login")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(ref.text, f"no such repository {ref.repo} on {endpoint()} (or it is private: log in with "
                                  "hf auth login)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(ref.text, f"{ref.repo} has no branch {REVISION}")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return HubUnreachable(ref.text, "HF_HUB_OFFLINE is set")
    if isinstance(exc, errors.HfHubHTTPError):
        return HubError(ref.text, f"the hub refused: {' '.join(str(exc).split())[:300]}")
    return HubUnreachable(ref.text, f"the hub at {endpoint()} cannot be reached ({type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:200]})")


def ask_hub(ref: HubRef) -> Plan:
    """``ref`` at the hub's current revision: its files, their sizes, and
    which the cache already holds. HubError when the repository or the
    file is not there (naming what is), HubUnreachable when the hub does
    not answer."""
    if offline():
        raise HubUnreachable(ref.text, "HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint()).model_info(ref.repo, files_metadata=True, timeout=_timeout())
    except Exception as exc:  # noqa: BLE001 - every failure becomes a HubError the caller can say
        raise _hub_error(ref, exc) from None
    # a name that would step out of the snapshot directory is no file of it
    listing = [(s.rfilename, s.size) for s in (info.siblings or []) if _inside(s.rfilename)]
    if not info.sha:
        raise HubError(ref.text, f"the hub gave no revision for {ref.repo}")
    try:
        choice = choose(ref, listing)
    except NoSuchFile as exc:
        raise HubError(ref.text, str(exc)) from None
    snapshot = repo_dir(ref.repo) / "snapshots" / info.sha
    sizes = dict(listing)
    files = tuple(HubFile(f, sizes.get(f), snapshot / f if (snapshot / f).is_file() else None) for f in choice.files)
    return Plan(ref, info.sha, files, choice.load, "hub")


def _inside(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and "\\" not in name and all(p not in ("", ".", "..") for p in parts)


def plan(ref: HubRef, ask: bool = False) -> Plan:
    """What ``ref`` loads. ``ask=False`` (check, run): the cache when it
    holds the reference, the hub only for what it lacks. ``ask=True``
    (fetch): the hub's current revision, the cache standing in (and
    saying so) when the hub cannot be reached."""
    if not ask:
        cached = in_cache(ref)
        if cached is not None:
            return cached
        if offline():
            raise HubUnreachable(ref.text, "not in the cache, and HF_HUB_OFFLINE is set",
                                 "fetch it where the hub can be reached, or unset HF_HUB_OFFLINE")
        return ask_hub(ref)
    try:
        return ask_hub(ref)
    except HubUnreachable as exc:
        cached = in_cache(ref)
        if cached is None:
            raise
        return replace(cached, note=f"{exc.why}: the cached copy stands")


def distinct_missing(plans: Iterable[Plan]) -> list[tuple[str, HubFile]]:
    """Each missing file once, however many references need it."""
    seen: dict[tuple[str, str, str], HubFile] = {}
    for p in plans:
        for f in p.missing:
            seen.setdefault((p.ref.repo, p.commit, f.name), f)
    return [(repo, f) for (repo, _, _), f in seen.items()]


def check_room(plans: Sequence[Plan]) -> None:
    """NoRoom, with the numbers, when the cache's disk cannot take what the
    plans still miss (and :data:`SPARE_BYTES` more)."""
    needed = sum(f.size or 0 for _, f in distinct_missing(plans))
    if not needed:
        return
    where = cache_dir()
    free = free_bytes(where)
    if needed + SPARE_BYTES > free:
        raise NoRoom(needed, free, where)


def _bar_class(name: str, out: TextIO | None, seen: Seen | None) -> Any:
    """A progress bar huggingface_hub draws a download with (its
    ``tqdm_class``): ``name`` on ``out``, each step reported to ``seen``
    (none drawn where ``HF_HUB_DISABLE_PROGRESS_BARS`` is set)."""
    from huggingface_hub.utils import tqdm

    quiet = out is None
    interval = 0.5 if (out is not None and out.isatty()) else 10.0
    label = name if len(name) <= 40 else "…" + name[-39:]

    class Bar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs.update(desc=label, file=out, disable=quiet, mininterval=interval)
            super().__init__(*args, **kwargs)
            self.done = int(kwargs.get("initial") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            self.done += int(n or 0)
            if seen is not None:
                seen(name, self.done, self.total)
            return super().update(n)  # type: ignore[no-any-return]

    return Bar


def fetch(p: Plan, out: TextIO | None = None, seen: Seen | None = None) -> Plan:
    """Fetch what ``p`` misses into the cache (a bar per file on ``out``,
    progress to ``seen``) and return the reference as the cache now holds
    it. Callers check the room first (:func:`check_room`)."""
    from huggingface_hub import hf_hub_download

    if offline() and p.missing:
        raise HubUnreachable(p.ref.text, "HF_HUB_OFFLINE is set", "unset it to fetch")
    for f in p.missing:
        try:
            hf_hub_download(p.ref.repo, f.name, revision=REVISION, cache_dir=cache_dir(), endpoint=endpoint(),
                            tqdm_class=_bar_class(f.name, out, seen))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a HubError the caller can say
            raise _hub_error(p.ref, exc) from None
    if p.missing:
        _record_listing(p)
    done = in_cache(p.ref)
    if done is None:
        raise HubError(p.ref.text, f"fetched, yet the cache at {cache_dir()} does not hold every file "
                                   f"({', '.join(f.name for f in p.files)})")
    return done


def _record_listing(p: Plan) -> None:
    """Leave the repository's listing and ``refs/main`` in the cache as
    huggingface_hub's own snapshot download does (every file is there, so
    nothing more is fetched): other tools given the repository's name then
    find it offline, and the cache knows the files it was chosen from."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(p.ref.repo, revision=REVISION, allow_patterns=[f.name for f in p.files],
                          cache_dir=cache_dir(), endpoint=endpoint(), tqdm_class=_bar_class("", None, None))
    except Exception:  # noqa: BLE001 - the files are fetched; only the record for other tools is lost
        pass


def local_path(ref: HubRef, fetch_missing: bool = True, out: TextIO | None = None) -> Path:
    """The path an engine opens for ``ref``: from the cache, else fetched
    (the disk checked first) when ``fetch_missing``."""
    cached = in_cache(ref)
    if cached is not None:
        return cached.path
    if not fetch_missing:
        raise HubError(ref.text, f"not in the hub cache at {cache_dir()}", f"fetch it: lab fetch {ref.text}")
    p = plan(ref)
    check_room([p])
    out = sys.stderr if out is None else out  # the stream of the moment, not of import time
    print(f"lab: fetching {ref.text}: {len(p.missing)} file(s), {size_words(p.missing_bytes)} into "
          f"{cache_dir()}", file=out, flush=True)
    return fetch(p, out=out).path


def small_files(files: Sequence[HubFile]) -> tuple[list[HubFile], list[HubFile]]:
    """(files worth a line each, small ones listed together)."""
    big = [f for f in files if f.size is None or f.size >= SMALL_FILE]
    return big, [f for f in files if f not in big]
