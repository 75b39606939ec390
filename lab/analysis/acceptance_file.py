"""The portable acceptance file: a run's measured acceptance per draft
position (per arm x prompt and arm x category, with what made it), and apart
the source machine's own costs, for another machine's probe to price::

    {"kind": "speclab.acceptance", "version": 1, "created": ...,
     "source": {"run": ..., "profile": ..., "started": ..., "machine": {...}, "probe": {...} | null},
     "entries": [{"scope": "prompt" | "category", "arm": ..., "prompt": ... | "category": ...,
                  "backend", "target", "drafter", "drafter_model", "drafter_options", "n_max",
                  "temperature", "prompts", "prompt_sha256", "reached": [...], "accepted": [...],
                  "conditional": [...], "unconditional": [...],   # for people; ignored when loading
                  "costs": {each of COSTS: a number} | null}]}

:func:`predict_on` prices one entry through :func:`lab.analysis.predict.predict`
and says where each input came from."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from lab.analysis import predict
from lab.analysis.measured_acceptance import PositionAcceptance, per_position
from lab.base import rundir
from lab.base.probe import Probe

KIND = "speclab.acceptance"
VERSION = 1
ACCEPTANCE_FILE = rundir.ACCEPTANCE_FILE
# A profile is a few kilobytes; the cap keeps a wrong file from being read whole.
MAX_BYTES = 8 * 1024 * 1024
PROMPT = "prompt"
CATEGORY = "category"


class AcceptanceFileError(ValueError):
    """A profile that cannot be read or used, with a message for users."""


# the source run's predict.ArmInputs as a file keeps them; all but the first four are 0 in older files
COSTS = ("baseline_token_s", "draft_s_per_token", "loop_s_per_step", "plain_share", "switch_in_share",
         "switch_out_share", "cell_tokens", "catch_up_s", "catch_up_per_token", "second_in_share", "second_out_share")
REQUIRED_COSTS = 4


@dataclass(frozen=True)
class Entry:
    scope: str  # PROMPT or CATEGORY
    arm: str
    name: str  # the prompt's or the category's
    backend: str
    target: str
    drafter: str | None
    drafter_model: str | None
    n_max: int | None
    temperature: float | None
    prompts: tuple[str, ...]
    prompt_sha256: tuple[str, ...]
    positions: PositionAcceptance
    costs: predict.ArmInputs | None  # the source run's, on its machine; n_max is the entry's

    @property
    def label(self) -> str:
        return f"{self.arm} / {self.name}" if self.scope == PROMPT else f"{self.arm} / category {self.name}"


@dataclass(frozen=True)
class AcceptanceFile:
    source: Mapping[str, Any]
    entries: tuple[Entry, ...]
    created: str = ""

    def source_line(self) -> str:
        """The run and machine the acceptance was measured on, in words."""
        s = self.source
        return f"run {s.get('run') or '?'} (profile {s.get('profile') or '?'}, started {s.get('started') or '?'}) " \
               f"on {machine_words(s.get('machine'))}"


def machine_words(machine: Any) -> str:
    """A saved machine record in a few words: CPU, cores, GPUs where known."""
    if not isinstance(machine, Mapping) or not machine:
        return "an unrecorded machine"
    parts = [str(machine.get("cpu") or machine.get("machine") or "a CPU")]
    if machine.get("cpu_count"):
        parts.append(f"{machine['cpu_count']} cores")
    gpus = machine.get("gpus")
    if isinstance(gpus, (list, tuple)) and gpus:
        names = [str(g.get("name") if isinstance(g, Mapping) else g) for g in gpus]
        parts.append("GPU " + ", ".join(names))
    if machine.get("platform"):
        parts.append(str(machine["platform"]))
    return ", ".join(parts)


def probe_machine_words(probe: Probe) -> str:
    """Where a probe measured: its machine record (and the GPUs its cache
    identity names), and whether the model ran offloaded to a GPU."""
    machine = dict(probe.machine)
    identity = probe.origin.get("identity")
    if isinstance(identity, Mapping) and isinstance(identity.get("machine"), Mapping):
        machine.setdefault("gpus", identity["machine"].get("gpus"))
    where = machine_words(machine)
    return where + ("; model offloaded to the GPU" if probe.on_gpu else "; model on the CPU")


# -- building one from a run ---------------------------------------------------------

def _counts(pa: PositionAcceptance) -> dict[str, Any]:
    return {"reached": list(pa.reached), "accepted": list(pa.accepted), "conditional": list(pa.conditional),
            "unconditional": list(pa.unconditional)}


def _costs(rows: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
    inputs = predict.arm_inputs(rows, steps)
    return None if inputs is None else {key: getattr(inputs, key) for key in COSTS}


def _entry(scope: str, arm: str, name: str, rows: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
           arm_def: Mapping[str, Any], temperature: Any) -> dict[str, Any] | None:
    if not steps:
        return None
    pa = per_position(steps)
    if not pa.reached:
        return None
    first = rows[0]
    options = dict(arm_def.get("drafter_options") or {})
    prompts = sorted({str(r["prompt"]) for r in rows})
    hashes = sorted({str(r["prompt_sha256"]) for r in rows if r.get("prompt_sha256")})
    key = "prompt" if scope == PROMPT else "category"
    return {
        "scope": scope, "arm": arm, key: name, "backend": first.get("backend"),
        "target": first.get("model") or arm_def.get("model"), "drafter": first.get("drafter"),
        "drafter_model": options.get("model") if isinstance(options.get("model"), str) else None,
        "drafter_options": options, "n_max": first.get("n_max"), "temperature": temperature,
        "prompts": prompts, "prompt_sha256": hashes, **_counts(pa), "costs": _costs(rows, steps),
    }


def build(data: Mapping[str, Any], run_name: str) -> dict[str, Any]:
    """The profile of a loaded run (:func:`lab.render.report.load_for_report`'s
    data: results, steps and probes)."""
    results = [r for r in data.get("results") or () if int(r.get("round", 1)) >= 1]
    steps = [s for s in data.get("steps") or () if int(s.get("round", 1)) >= 1]
    profile = data.get("profile") or {}
    temperature = (profile.get("run") or {}).get("temperature")
    arm_defs = {str(a.get("name")): a for a in profile.get("arms") or () if isinstance(a, Mapping)}
    entries: list[dict[str, Any]] = []
    arms = list(dict.fromkeys(r["arm"] for r in results if not r.get("is_baseline")))
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm]
        for prompt in dict.fromkeys(r["prompt"] for r in rows):
            mine = [r for r in rows if r["prompt"] == prompt]
            got = _entry(PROMPT, arm, prompt, mine, [s for s in steps if s["arm"] == arm and s["prompt"] == prompt],
                         arm_defs.get(arm, {}), temperature)
            if got:
                entries.append(got)
        for category in dict.fromkeys(str(r["category"]) for r in rows if r.get("category")):
            mine = [r for r in rows if r.get("category") == category]
            names = {r["prompt"] for r in mine}
            got = _entry(CATEGORY, arm, category, mine,
                         [s for s in steps if s["arm"] == arm and s["prompt"] in names], arm_defs.get(arm, {}), temperature)
            if got:
                entries.append(got)
    probes = data.get("probes") or ([data["probe"]] if data.get("probe") is not None else [])
    first_probe = probes[0] if probes else None
    return {
        "kind": KIND, "version": VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "source": {
            "run": run_name, "profile": profile.get("name"), "started": data.get("started"),
            # the run's record, with what its probe adds (the CPU's name)
            "machine": {**(dict(first_probe.machine) if first_probe is not None else {}), **dict(data.get("machine") or {})},
            "probe": None if first_probe is None else {
                "backend": first_probe.backend, "model": first_probe.model, "method": first_probe.method,
                "machine": dict(first_probe.machine), "on_gpu": first_probe.on_gpu},
        },
        "entries": entries,
    }


def save(profile: Mapping[str, Any], path: str | Path) -> Path:
    from lab.base.strictjson import dumps

    p = Path(path)
    if p.is_dir():
        p = p / ACCEPTANCE_FILE
    p.write_text(dumps(dict(profile), indent=1) + "\n", encoding="utf-8")
    return p


# -- reading one back ----------------------------------------------------------------

def _counts_of(value: Any, key: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise AcceptanceFileError(f"{where}: {key} must be a list of counts (integers of at least 0)")
    return tuple(value)


def _number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise AcceptanceFileError(f"{where}: costs.{key} must be a number of at least 0")
    return float(value)


def _entry_of(raw: Any, i: int, path: str) -> Entry:
    where = f"{path}: entry {i + 1}"
    if not isinstance(raw, Mapping):
        raise AcceptanceFileError(f"{where} is not an object")
    scope = raw.get("scope")
    if scope not in (PROMPT, CATEGORY):
        raise AcceptanceFileError(f"{where}: scope must be {PROMPT!r} or {CATEGORY!r}, got {scope!r}")
    for key in ("arm", scope, "backend", "target"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            raise AcceptanceFileError(f"{where}: {key} must be a name")
    reached = _counts_of(raw.get("reached"), "reached", where)
    accepted = _counts_of(raw.get("accepted"), "accepted", where)
    if len(reached) != len(accepted) or not reached:
        raise AcceptanceFileError(f"{where}: reached and accepted must give the same positions, at least one")
    if any(a > r for a, r in zip(accepted, reached)):
        raise AcceptanceFileError(f"{where}: a position accepted more drafts than reached it")
    costs = None
    c = raw.get("costs")
    if c is not None:
        if not isinstance(c, Mapping):
            raise AcceptanceFileError(f"{where}: costs must be an object or null")
        costs = predict.ArmInputs(n_max=None, **{k: 0.0 if i >= REQUIRED_COSTS and c.get(k) is None
                                                 else _number(c.get(k), k, where) for i, k in enumerate(COSTS)})
        if costs.baseline_token_s <= 0 or costs.plain_share >= 1:
            raise AcceptanceFileError(f"{where}: costs need a baseline token above 0 s and a plain share below 1")
        if not all(0 <= x <= 1 for x in (costs.switch_in_share, costs.switch_out_share,
                                         costs.second_in_share, costs.second_out_share)):
            raise AcceptanceFileError(f"{where}: switch shares are shares of passes, 0 to 1")
        if costs.cell_tokens < 0:
            raise AcceptanceFileError(f"{where}: cell_tokens counts tokens, 0 or more")
        if costs.catch_up_s < 0 or not 0 <= costs.catch_up_per_token <= costs.draft_s_per_token:
            raise AcceptanceFileError(f"{where}: catch_up_s is seconds, 0 or more, and catch_up_per_token a part "
                                         "of draft_s_per_token")
    n_max = raw.get("n_max")
    temperature = raw.get("temperature")
    return Entry(
        scope=str(scope), arm=str(raw["arm"]), name=str(raw[scope]), backend=str(raw["backend"]),
        target=str(raw["target"]), drafter=str(raw["drafter"]) if raw.get("drafter") else None,
        drafter_model=str(raw["drafter_model"]) if raw.get("drafter_model") else None,
        n_max=n_max if isinstance(n_max, int) and not isinstance(n_max, bool) else None,
        temperature=float(temperature) if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) else None,
        prompts=tuple(str(x) for x in raw.get("prompts") or ()),
        prompt_sha256=tuple(str(x) for x in raw.get("prompt_sha256") or ()),
        positions=PositionAcceptance(reached, accepted), costs=costs,
    )


def from_json(data: Any, path: str = "acceptance profile") -> AcceptanceFile:
    if not isinstance(data, Mapping) or data.get("kind") != KIND:
        kind = data.get("kind") if isinstance(data, Mapping) else type(data).__name__
        hint = " (a probe: pass it as --probe)" if kind == "speclab.probe" else ""
        raise AcceptanceFileError(f"{path}: not a speclab acceptance profile (kind {kind!r}){hint}; "
                                     "`lab acceptance RUN_DIR -o FILE` writes one")
    if data.get("version") != VERSION:
        raise AcceptanceFileError(f"{path}: acceptance profile version {data.get('version')!r}, this lab reads {VERSION}")
    raw = data.get("entries")
    if not isinstance(raw, list):
        raise AcceptanceFileError(f"{path}: entries must be a list")
    found = data.get("source")
    source: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
    return AcceptanceFile(source, tuple(_entry_of(e, i, path) for i, e in enumerate(raw)),
                             str(data.get("created") or ""))


def load(path: str | Path) -> AcceptanceFile:
    """An acceptance profile file, or the acceptance.json of a run directory."""
    from lab.base.rundir import JsonFileError, read_saved

    try:
        p, data, beyond = read_saved(path, ACCEPTANCE_FILE, MAX_BYTES, "acceptance profile")
    except JsonFileError as exc:
        if exc.kind == JsonFileError.MISSING:
            raise AcceptanceFileError(f"{exc.path}: no acceptance profile here "
                                      "(`lab acceptance RUN_DIR -o FILE` writes one)") from None
        raise AcceptanceFileError(str(exc)) from None
    if beyond:
        raise AcceptanceFileError(f"{p}: malformed acceptance profile (numbers out of range in it)")
    return from_json(data, str(p))


# -- pricing one on another machine ----------------------------------------------------

OTHER_MACHINE = "the acceptance file's run, on its machine, not the probe's"


@dataclass(frozen=True)
class CrossPrediction:
    entry: Entry
    inputs: predict.ArmInputs
    predictions: tuple[predict.Prediction, ...]
    best: predict.Prediction | None
    draft_from: str  # where the draft's seconds came from, in words
    loop_from: str
    warnings: tuple[str, ...]


def inputs_for(entry: Entry, probe: Probe, draft_probe: Probe | None = None,
               loop_s_per_step: float | None = None) -> tuple[predict.ArmInputs, str, str]:
    """The inputs :func:`lab.analysis.predict.predict` takes for this entry
    on the probe's machine, and where draft and loop seconds came from: the
    draft probe or ``loop_s_per_step`` where given, else the source run's
    costs in baseline tokens, marked as the other machine's estimate."""
    if entry.costs is None:
        raise AcceptanceFileError(f"{entry.label}: the acceptance file has no costs for this entry "
                                     "(its run had no baseline to price steps against)")
    token_s = probe.pass_seconds(1)
    c = entry.costs
    if probe.prices_steps:
        # the probe's T(w) is a whole step (draft and loop inside): predict adds neither
        inside = f"inside the probe's whole steps ({probe.priced_by})"
        draft_s, draft_from, loop_s, loop_from = 0.0, inside, 0.0, inside
    else:
        if entry.drafter_model and draft_probe is not None:
            draft_s = draft_probe.drafted_token_s
            picks = " with device picks, as the drafter picks there" if draft_s != draft_probe.pass_seconds(1) else ""
            draft_from = (f"the draft probe: {draft_probe.model} on {probe_machine_words(draft_probe)}, "
                          f"one-row pass {draft_s * 1000:.3f} ms{picks}")
        else:
            ratio = c.draft_s_per_token / c.baseline_token_s
            draft_s = ratio * token_s
            draft_from = (f"{OTHER_MACHINE}: {ratio:.3f} baseline tokens per drafted token there"
                          + (" (no --draft-probe of the draft model given)" if entry.drafter_model else ""))
        if loop_s_per_step is not None:
            loop_s, loop_from = loop_s_per_step, f"given: {loop_s_per_step * 1e6:.0f} us per step on this machine"
        else:
            ratio = c.loop_s_per_step / c.baseline_token_s
            loop_s = ratio * token_s
            loop_from = f"{OTHER_MACHINE}: {ratio:.3f} baseline tokens per step there (--loop-us gives this machine's)"
    catch_s, catch_per_token, _ = _catch_up(entry, probe, draft_probe)
    # the text's shares and the cell's length stay the source run's; seconds are this machine's
    inputs = dataclasses.replace(c, baseline_token_s=token_s, draft_s_per_token=draft_s, n_max=entry.n_max,
                                 loop_s_per_step=loop_s, catch_up_s=catch_s, catch_up_per_token=catch_per_token)
    return inputs, draft_from, loop_from


def _catch_up(entry: Entry, probe: Probe, draft_probe: Probe | None) -> tuple[float, float, str]:
    """A model drafter's catch-up after a step that kept all its drafts, on
    the probe's machine: (seconds, its share of the draft's seconds per
    token, where it came from), from the draft probe or else the file's run."""
    c = entry.costs
    if probe.prices_steps:
        return 0.0, 0.0, f"inside the probe's whole steps ({probe.priced_by})"
    if not entry.drafter_model:
        return 0.0, 0.0, "none: the drafter is no model"
    token_s = probe.pass_seconds(1)
    if draft_probe is not None:
        two = draft_probe.t_ratio(2)
        if two is not None:
            switching = draft_probe.switch_ratio(2)
            extra = max(0.0, two - 1.0) + (sum(switching) if switching else 0.0)
            seconds = extra * draft_probe.pass_seconds(1)
            how = ("its two-row pass beyond a one-row one and the two passes that change shape" if switching
                   else "its two-row pass beyond a one-row one; it timed no passes that change shape (a CPU's "
                        "probe, or one from before it timed them)")
            return seconds, 0.0, (f"the draft probe's machine: {seconds * 1000:.3f} ms a step after one that kept all, "
                                  f"at each n_max's chance of keeping all: {how}")
    if c is None or c.catch_up_s <= 0:
        return 0.0, 0.0, ("not priced: the draft probe has no two-row pass and the acceptance file's run showed none"
                          if draft_probe is not None else "none seen in the acceptance file's run")
    ratio = c.catch_up_s / c.baseline_token_s
    # with the draft's seconds carried from the file, so is the part of them the catch-up made
    part = c.catch_up_per_token / c.baseline_token_s * token_s if draft_probe is None else 0.0
    return ratio * token_s, part, (f"{OTHER_MACHINE}: {ratio:.3f} baseline tokens a step after one that kept all there, "
                                   "at each n_max's chance of keeping all")


def catch_up_words(entry: Entry, probe: Probe, draft_probe: Probe | None = None) -> str:
    """Where a model drafter's catch-up was priced from, in words."""
    return _catch_up(entry, probe, draft_probe)[2]


def switch_words(entry: Entry, probe: Probe) -> str:
    """Where the cost of passes that switch width came from, in words: the
    shares of such passes from the acceptance file's run (the text's and the
    drafter's), their price from the probe's machine, at the entry's n_max."""
    c = entry.costs
    if probe.prices_steps:
        return f"inside the probe's whole steps ({probe.priced_by})"
    if c is None or not (c.switch_in_share or c.switch_out_share):
        return "none counted in the acceptance file's run (every pass as wide as the one before, or a file from " \
               "before the loop counted them)"
    shares = (f"{c.switch_in_share:.0%} of passes a step after another width, {c.switch_out_share:.0%} a plain "
              "decode after a step (the acceptance file's run)")
    if c.second_in_share or c.second_out_share:
        shares += (f", and {c.second_in_share:.0%} / {c.second_out_share:.0%} the step / plain decode right after "
                   "such a switch")
    width = (entry.n_max or 1) + 1
    ratios = probe.switch_ratio(width)
    if ratios is None:
        return shares + "; priced at 0: the probe timed no passes that switch width (on a CPU nothing is rebuilt)"
    priced = (f"; the probe's machine: {ratios[0]:.2f} / {ratios[1]:.2f} baseline tokens more for such a "
              f"pass at w = {width}")
    second = probe.second_ratio(width)
    if second is not None:
        priced += f", {second[0]:.2f} / {second[1]:.2f} for the pass after it"
    elif c.second_in_share or c.second_out_share:
        priced += "; the pass after it at 0: the probe did not time it"
    return shares + priced


def cell_words(entry: Entry, probe: Probe) -> str:
    """Where a cell's first passes were priced from, in words: the cell's
    length from the acceptance file's run (a setting of that run), their
    cost from the probe's machine."""
    c = entry.costs
    if probe.prices_steps:
        return f"inside the probe's whole steps ({probe.priced_by})"
    width = (entry.n_max or 1) + 1
    starts = probe.cell_start_ratio(1), probe.cell_start_ratio(width)
    if starts[0] is None or starts[1] is None:
        return "not priced: the probe timed no cells (on a CPU nothing is captured)"
    if c is None or c.cell_tokens <= 0:
        return "not priced: the acceptance file does not say how long its cells were (a file from before it did)"
    return (f"cells of {c.cell_tokens:.0f} tokens after the prompt's (the acceptance file's run); the probe's machine: "
            f"{starts[1]:.2f} baseline tokens a cell for its first passes at w = {width}, {starts[0]:.2f} for "
            "the baseline's")


def predict_on(entry: Entry, probe: Probe, draft_probe: Probe | None = None,
               loop_s_per_step: float | None = None) -> CrossPrediction:
    if draft_probe is not None:
        # its passes price the draft: a curve no machine could produce prices nothing
        draft_probe.require_trusted()
    inputs, draft_from, loop_from = inputs_for(entry, probe, draft_probe, loop_s_per_step)
    preds = tuple(predict.predict(entry.positions, probe, inputs))
    warns: list[str] = []
    if probe.model != entry.target:
        warns.append(f"the probe measured {probe.model}, but this acceptance was measured with target {entry.target}: "
                     "the prediction prices another model's steps")
    if probe.backend != entry.backend:
        warns.append(f"the probe ran on backend {probe.backend}, the acceptance on {entry.backend}")
    if draft_probe is not None and entry.drafter_model and draft_probe.model != entry.drafter_model:
        warns.append(f"the draft probe measured {draft_probe.model}, but this drafter is {entry.drafter_model}")
    return CrossPrediction(entry, inputs, preds, predict.best(preds), draft_from, loop_from, tuple(warns))
