"""What changed between two saved comparisons: per arm x prompt, tok/s,
speedup, acceptance, peak memory and verdict in run A and run B, and the
conclusion that leads the comparison.

A change counts only beyond both runs' noise: a speedup when the ranges of
A's and B's paired rounds (their intervals where they have one, each
widened by the neutral band) do not overlap; a verdict's kind when its
speedup so moved, or a side measured nothing; acceptance (counted, not
timed) by two points. A tok/s move beyond both runs' spread is timing, not
a change of the cell: for a baseline it means the machine moved, which the
conclusion and a warning say. Stopped cells are neither failures nor
verdict changes; cells only one run measured are not counted."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from lab.analysis.run import ran_paired, summarize
from lab.base.cells import STOPPED_STATUSES
from lab.base.economics import EVEN, LOSES, NEUTRAL_BAND, PAYS, STRUCTURAL, UNCERTAIN
from lab.base.profile import RunSettings

MEMORY_CHANGE = 0.10
# the smallest tok/s move called real: one round has no spread, shared machines wander
TOKS_NOISE = 0.05
# the smallest acceptance move called real, in points: acceptance is counted, not timed
ACCEPTANCE_CHANGE = 0.02
# Arm keys whose difference makes two arms of the same name different arms.
ARM_KEYS = ("backend", "model", "drafter", "n_max", "options", "drafter_options", "baseline")
# verdicts that measured something: a change between two of them is a change in kind only beyond noise
MEASURED_KINDS = (PAYS, EVEN, LOSES, STRUCTURAL, UNCERTAIN)


def run_name(data: Mapping[str, Any]) -> str:
    return f"{data['profile'].get('name', '?')} ({data.get('started') or '?'})"


def noise_range(s: Mapping[str, Any], band: float = NEUTRAL_BAND) -> tuple[float, float] | None:
    """Where a cell's speedup may lie by its own run's noise: its paired
    rounds' range, its interval where it has one, widened by the neutral
    band (one round has no spread of its own)."""
    xs = [float(x) for x in s.get("speedups") or ()] or ([float(s["speedup"])] if s.get("speedup") is not None else [])
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    ci = s.get("speedup_ci")
    if ci:
        lo, hi = min(lo, float(ci[0])), max(hi, float(ci[1]))
    return lo * (1 - band), hi * (1 + band)


def compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    a = {(s["arm"], s["prompt"]): s for s in summarize(data_a["results"], ran_paired(data_a))}
    b = {(s["arm"], s["prompt"]): s for s in summarize(data_b["results"], ran_paired(data_b))}
    keys = list(a) + [k for k in b if k not in a]
    out = []
    for key in keys:
        sa, sb = a.get(key), b.get(key)
        row: dict[str, Any] = {"arm": key[0], "prompt": key[1], "in": "both" if sa and sb else ("A" if sa else "B")}
        for field in ("tok_per_s", "speedup", "speedups", "acceptance_rate", "mean_accepted_len", "step_cost_tokens",
                      "peak_mem_bytes", "verdict_kind", "verdict", "status", "is_baseline"):
            row[f"{field}_a"] = sa.get(field) if sa else None
            row[f"{field}_b"] = sb.get(field) if sb else None
        changes: list[str] = []
        # what moved, but within a run's noise or with the machine: said, not counted
        row["within_noise"] = []
        row["timing"] = []
        stopped = [side for side, s in (("A", sa), ("B", sb)) if s and _stopped(s)]
        if sa and sb and stopped:
            changes.append("not measured in " + " and ".join(stopped))
        elif sa and sb:
            na, nb = noise_range(sa), noise_range(sb)
            row["speedup_noise_a"], row["speedup_noise_b"] = na, nb
            beyond = na is not None and nb is not None and (nb[0] > na[1] or na[0] > nb[1])
            if beyond:
                changes.append("speedup")
            moved = _toks_moved(sa, sb)
            if moved is not None:
                row["tok_per_s_change"], row["tok_per_s_noise"] = moved
                row["timing"].append("tok/s")
            ka, kb = sa.get("verdict_kind"), sb.get("verdict_kind")
            if ka != kb:
                if beyond or ka not in MEASURED_KINDS or kb not in MEASURED_KINDS:
                    changes.append("verdict")
                else:
                    row["within_noise"].append("verdict")
            if sa.get("status") != sb.get("status"):
                changes.append("status")
            ra, rb = sa.get("acceptance_rate"), sb.get("acceptance_rate")
            if ra is not None and rb is not None and abs(rb - ra) >= ACCEPTANCE_CHANGE:
                changes.append("acceptance")
            ma, mb = sa.get("peak_mem_bytes"), sb.get("peak_mem_bytes")
            # RSS wanders by a few MiB between runs; flag what a user would act on.
            if ma and mb and abs(mb - ma) / ma >= MEMORY_CHANGE and abs(mb - ma) >= 16 * 2**20:
                changes.append("memory")
        else:
            changes.append("only in " + row["in"])
        row["changed"] = changes
        out.append(row)
    return out


def counted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shared cells whose change counts."""
    return [r for r in rows if r["in"] == "both" and r["changed"]]


def count_line(rows: list[dict[str, Any]]) -> str:
    """How many cells changed, of those both runs measured, and what counts."""
    shared = [r for r in rows if r["in"] == "both"]
    only = {side: sum(1 for r in rows if r["in"] == side) for side in ("A", "B")}
    apart = "; ".join(f"{n} only in {side}" for side, n in only.items() if n)
    head = (f"{len(counted(rows))} of {len(shared)} shared cells changed" if shared else "No shared cells")
    return (head + (f" ({apart}, not counted)" if apart else "") + ". A change counts only beyond both runs' "
            "noise: a speedup when the ranges of A's and B's paired rounds (their intervals where they have one, "
            f"widened by ±{NEUTRAL_BAND * 100:.0f}%) do not overlap, a verdict when its speedup so moved, acceptance "
            f"by {ACCEPTANCE_CHANGE * 100:.0f} points; tok/s alone is timing.")


def _cells(data: Mapping[str, Any]) -> str:
    arms = list(dict.fromkeys(str(r["arm"]) for r in data.get("results") or ()))
    prompts = list(dict.fromkeys(str(r["prompt"]) for r in data.get("results") or ()))
    return f"{', '.join(arms) or 'no arms'} on {', '.join(prompts) or 'no prompts'}"


def conclusion(data_a: Mapping[str, Any], data_b: Mapping[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    """One sentence that leads the comparison: acceptance, timing, and
    whether any cell changed in kind beyond both runs' noise."""
    rows = compare(data_a, data_b) if rows is None else rows
    shared = [r for r in rows if r["in"] == "both"]
    if not shared:
        return (f"No cells in common, so nothing to compare cell by cell: A measured {_cells(data_a)}; "
                f"B measured {_cells(data_b)}.")
    measured = [r for r in shared if not any(c.startswith("not measured") for c in r["changed"])]
    accepted = [r for r in measured if "acceptance" in r["changed"]]
    drafting = [r for r in measured if r["acceptance_rate_a"] is not None and r["acceptance_rate_b"] is not None]
    if accepted:
        shown = ", ".join(f"{r['arm']} / {r['prompt']} {r['acceptance_rate_a'] * 100:.1f}% → "
                          f"{r['acceptance_rate_b'] * 100:.1f}%" for r in accepted[:3])
        more = f" and {len(accepted) - 3} more" if len(accepted) > 3 else ""
        acceptance = f"acceptance changed in {len(accepted)} of {len(drafting)} cells ({shown}{more})"
    else:
        acceptance = "acceptance unchanged"
    bases = [r for r in measured if (r.get("is_baseline_a") or r.get("verdict_kind_a") == "baseline")]
    moved = [r for r in bases if "tok/s" in r["timing"]]
    if moved:
        timing = "timing moved with the machine (baselines: " + ", ".join(
            f"{r['arm']} / {r['prompt']} {r['tok_per_s_change'] * 100:+.0f}%" for r in moved) + ")"
    else:
        timing = "timing within both runs' noise"
    kinds = [r for r in measured if "verdict" in r["changed"]]
    if kinds:
        kind = "; ".join(f"{r['arm']} / {r['prompt']} changed"
                         + ("" if UNCERTAIN in (r["verdict_kind_a"], r["verdict_kind_b"]) else " in kind")
                         + f": {r['verdict_kind_a']} → {r['verdict_kind_b']}"
                         + (", beyond both runs' noise" if "speedup" in r["changed"] else "") for r in kinds)
    else:
        kind = "no change in kind"
    out = f"{acceptance}; {timing}: {kind}."
    speed = [r for r in measured if "speedup" in r["changed"] and "verdict" not in r["changed"]]
    if speed:
        out += (f" Speedups moved beyond both runs' noise without changing kind in {len(speed)} cells ("
                + ", ".join(f"{r['arm']} / {r['prompt']} {r['speedup_a']:.2f}x → {r['speedup_b']:.2f}x"
                            for r in speed[:3]) + (", ..." if len(speed) > 3 else "") + ").")
    noisy = [r for r in measured if "verdict" in r["within_noise"]]
    if noisy:
        out += (" Within noise: " + ", ".join(f"{r['arm']} / {r['prompt']} {r['verdict_kind_a']} → "
                                               f"{r['verdict_kind_b']}" for r in noisy) + ".")
    return out


def _stopped(s: Mapping[str, Any]) -> bool:
    """No round of the cell was measured: every one was cancelled or skipped."""
    return not s.get("rounds") and all(part in STOPPED_STATUSES for part in str(s.get("status") or "").split("/"))


def _toks_moved(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> tuple[float, float] | None:
    """(relative change, noise) when the median tok/s moved beyond both runs'
    spread over their rounds, else None."""
    a, b = sa.get("tok_per_s"), sb.get("tok_per_s")
    if not a or b is None:
        return None
    noise = max(TOKS_NOISE, sa.get("tok_per_s_spread") or 0.0, sb.get("tok_per_s_spread") or 0.0)
    change = (b - a) / a
    return (change, noise) if abs(change) > noise else None


def _changed_keys(a: Mapping[str, Any], b: Mapping[str, Any], keys: Any) -> list[str]:
    return [f"{k} {a.get(k)!r} → {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


_RUN_DEFAULTS = {f.name: f.default for f in fields(RunSettings)}
# an arm's keys a profile may leave out, and what leaving them out means
_ARM_DEFAULTS: dict[str, Any] = {"options": {}, "drafter_options": {}}


def _run_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """A run's ``[run]`` settings as they took effect: a key the run did
    not save (saved before it existed), or saved as null where the setting
    has a value by default, is its default; the order is the one the cells
    ran in (a run saved before paired order ran arm by arm)."""
    run = (data.get("profile") or {}).get("run") or {}
    out = dict(_RUN_DEFAULTS)
    for key, value in (run.items() if isinstance(run, Mapping) else ()):
        if value is not None or _RUN_DEFAULTS.get(key) is None:
            out[key] = value
    out["order"] = "paired" if ran_paired(data) else "arms"
    return out


def _arm(arm: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (arm.get(k) if arm.get(k) is not None else _ARM_DEFAULTS.get(k)) for k in ARM_KEYS}


def profile_differences(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[str]:
    """How the two runs' profiles differ: arms, prompts, run settings."""
    pa, pb = data_a.get("profile") or {}, data_b.get("profile") or {}
    out = []
    arms_a = {a["name"]: a for a in pa.get("arms", [])}
    arms_b = {a["name"]: a for a in pb.get("arms", [])}
    only_a = [n for n in arms_a if n not in arms_b]
    only_b = [n for n in arms_b if n not in arms_a]
    if only_a or only_b:
        out.append(f"arms differ: only in A: {', '.join(only_a) or 'none'}; only in B: {', '.join(only_b) or 'none'}")
    for name in arms_a:
        if name in arms_b:
            diff = _changed_keys(_arm(arms_a[name]), _arm(arms_b[name]), ARM_KEYS)
            if diff:
                out.append(f"arm {name} differs: {'; '.join(diff)}")
    prompts_a = {p["name"]: p for p in pa.get("prompts", [])}
    prompts_b = {p["name"]: p for p in pb.get("prompts", [])}
    if set(prompts_a) != set(prompts_b):
        out.append(f"prompts differ: A has {', '.join(prompts_a) or 'none'}; B has {', '.join(prompts_b) or 'none'}")
    for name in prompts_a:
        if name in prompts_b and _changed_keys(prompts_a[name], prompts_b[name], ("text", "file", "system")):
            out.append(f"prompt {name} has other text in B")
    run_a, run_b = _run_settings(data_a), _run_settings(data_b)
    diff = _changed_keys(run_a, run_b, sorted(set(run_a) | set(run_b)))
    if diff:
        out.append(f"run settings differ: {'; '.join(diff)}")
    return out


def warnings(data_a: Mapping[str, Any], data_b: Mapping[str, Any], rows: list[dict[str, Any]] | None = None) -> list[str]:
    """What a reader must know before trusting the cell-by-cell changes."""
    rows = compare(data_a, data_b) if rows is None else rows
    out = [f"the profiles differ, so cells are not like for like: {d}" for d in profile_differences(data_a, data_b)]
    base_arms = {a["name"] for a in (data_a.get("profile") or {}).get("arms", []) if a.get("is_baseline")}
    for r in rows:
        if "tok/s" in r["timing"] and (r["arm"] in base_arms or r.get("verdict_kind_a") == "baseline"):
            out.append(
                f"baseline {r['arm']} on {r['prompt']} moved {r['tok_per_s_change'] * 100:+.0f}% "
                f"(noise ±{r['tok_per_s_noise'] * 100:.0f}%): its tok/s and its arms' moved with the machine; "
                "their speedups count as changed only beyond both runs' noise")
    identity = identity_differences(data_a, data_b)
    if identity:
        out.append("the runs come from different machines: " + "; ".join(identity))
    conditions = condition_differences(data_a, data_b)
    if conditions:
        out.append("the runs ran under other conditions: " + "; ".join(conditions))
    return out


def machine_identity(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's machine is, apart from how it ran: CPU model, cores,
    memory, GPUs (from its rows), OS and architecture; a key the run did
    not record is absent (an older run directory)."""
    machine = data.get("machine") if isinstance(data.get("machine"), Mapping) else {}
    assert isinstance(machine, Mapping)
    out: dict[str, Any] = {k: machine[k] for k in ("cpu", "cpu_count", "memory_bytes", "machine")
                           if machine.get(k) is not None}
    if machine.get("platform"):
        out["platform"] = os_name(str(machine["platform"]))
    gpus = sorted({str(r["gpu_name"]) for r in data.get("results") or () if isinstance(r, Mapping) and r.get("gpu_name")})
    if gpus:
        out["gpus"] = gpus
    return out


def os_name(platform: str) -> str:
    """The operating system of a platform string (``Linux-6.18.44-...-x86_64-with-glibc2.36``:
    Linux): the machine's identity; its release and build are a condition
    (:func:`condition_differences`)."""
    return platform.split("-", 1)[0]


# What each identity key is called in words.
_IDENTITY_WORDS = {"cpu": "CPU", "cpu_count": "cores", "memory_bytes": "memory", "platform": "OS",
                   "machine": "architecture", "gpus": "GPU"}


def _said(key: str, value: Any) -> str:
    if value is None:
        return "not recorded"
    if key == "memory_bytes" and isinstance(value, (int, float)):
        return f"{value / 2**30:.1f} GiB"
    if key == "gpus":
        return ", ".join(value) if value else "none"
    return str(value)


def identity_differences(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[str]:
    """How the two runs' machines differ, in words (``CPU 'X' in A, 'Y' in
    B``); a key only one run recorded is not a difference, except GPUs
    (a run on the CPU records none)."""
    a, b = machine_identity(data_a), machine_identity(data_b)
    out = []
    for key, word in _IDENTITY_WORDS.items():
        if key == "gpus":
            va, vb = a.get(key, []), b.get(key, [])
        elif key not in a or key not in b:
            continue
        else:
            va, vb = a[key], b[key]
        if va != vb:
            out.append(f"{word} {_said(key, va)} in A, {_said(key, vb)} in B")
    return out


# Other processes' busy cores two runs may differ by and still ran alike.
LOAD_SLACK_CORES = 0.5


def condition_differences(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[str]:
    """How the two runs ran differently on their machines, in words: the
    cores ``threads = 0`` gave the engines, the other work beside them,
    the Python."""
    def threads(data: Mapping[str, Any]) -> Mapping[str, Any]:
        machine = data.get("machine") if isinstance(data.get("machine"), Mapping) else {}
        t = machine.get("threads") if isinstance(machine, Mapping) else None
        return t if isinstance(t, Mapping) else {}

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    ta, tb = threads(data_a), threads(data_b)
    out = []
    if number(ta.get("used")) and number(tb.get("used")) and ta["used"] != tb["used"]:
        out.append(f"threads = 0 gave the engines {ta['used']} of {ta.get('cores', '?')} cores in A and "
                   f"{tb['used']} of {tb.get('cores', '?')} in B")
    oa, ob = ta.get("others_cores"), tb.get("others_cores")
    if isinstance(oa, (int, float)) and isinstance(ob, (int, float)) and abs(oa - ob) > LOAD_SLACK_CORES:
        out.append(f"other processes kept {oa:.2f} cores busy as A started and {ob:.2f} as B did")
    busy_a = sum(1 for r in data_a.get("results") or () if isinstance(r, Mapping) and r.get("contended"))
    busy_b = sum(1 for r in data_b.get("results") or () if isinstance(r, Mapping) and r.get("contended"))
    if bool(busy_a) != bool(busy_b):
        out.append(f"{busy_a} cells ran beside other work in A, {busy_b} in B")
    ma, mb = data_a.get("machine") or {}, data_b.get("machine") or {}
    if isinstance(ma, Mapping) and isinstance(mb, Mapping) and ma.get("python") and mb.get("python") \
            and ma["python"] != mb["python"]:
        out.append(f"Python {ma['python']} in A, {mb['python']} in B")
    if isinstance(ma, Mapping) and isinstance(mb, Mapping) and ma.get("platform") and mb.get("platform") \
            and ma["platform"] != mb["platform"] and os_name(str(ma["platform"])) == os_name(str(mb["platform"])):
        out.append(f"OS build {ma['platform']} in A, {mb['platform']} in B")
    return out


