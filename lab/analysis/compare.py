"""What changed between two saved comparisons: per arm x prompt, tok/s,
speedup, acceptance, peak memory and verdict in run A and run B.

A speedup change is real when it leaves run A's interval (else the neutral
band); a tok/s change when it beats both runs' spread (at least TOKS_NOISE),
which for a baseline means the machine moved, said up front, as are differing
profiles. Stopped cells are neither failures nor verdict changes."""

from __future__ import annotations

from typing import Any, Mapping

from lab.analysis.run import summarize
from lab.base.cells import STOPPED_STATUSES
from lab.base.economics import NEUTRAL_BAND

MEMORY_CHANGE = 0.10
# the smallest tok/s move called real: one round has no spread, shared machines wander
TOKS_NOISE = 0.05
# Arm keys whose difference makes two arms of the same name different arms.
ARM_KEYS = ("backend", "model", "drafter", "n_max", "options", "drafter_options", "baseline")


def run_name(data: Mapping[str, Any]) -> str:
    return f"{data['profile'].get('name', '?')} ({data.get('started') or '?'})"


def compare(data_a: Mapping[str, Any], data_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    a = {(s["arm"], s["prompt"]): s for s in summarize(data_a["results"])}
    b = {(s["arm"], s["prompt"]): s for s in summarize(data_b["results"])}
    keys = list(a) + [k for k in b if k not in a]
    out = []
    for key in keys:
        sa, sb = a.get(key), b.get(key)
        row: dict[str, Any] = {"arm": key[0], "prompt": key[1], "in": "both" if sa and sb else ("A" if sa else "B")}
        for field in ("tok_per_s", "speedup", "acceptance_rate", "mean_accepted_len", "step_cost_tokens",
                      "peak_mem_bytes", "verdict_kind", "verdict", "status"):
            row[f"{field}_a"] = sa.get(field) if sa else None
            row[f"{field}_b"] = sb.get(field) if sb else None
        changes = []
        stopped = [side for side, s in (("A", sa), ("B", sb)) if s and _stopped(s)]
        if sa and sb and stopped:
            changes.append("not measured in " + " and ".join(stopped))
        elif sa and sb:
            sp_a, sp_b = sa.get("speedup"), sb.get("speedup")
            if sp_a is not None and sp_b is not None:
                ci = sa.get("speedup_ci")
                outside = (sp_b < ci[0] or sp_b > ci[1]) if ci else abs(sp_b - sp_a) > NEUTRAL_BAND
                if outside and abs(sp_b - sp_a) > NEUTRAL_BAND:
                    changes.append("speedup")
            moved = _toks_moved(sa, sb)
            if moved is not None:
                row["tok_per_s_change"], row["tok_per_s_noise"] = moved
                changes.append("tok/s")
            if sa.get("verdict_kind") != sb.get("verdict_kind"):
                changes.append("verdict")
            if sa.get("status") != sb.get("status"):
                changes.append("status")
            ra, rb = sa.get("acceptance_rate"), sb.get("acceptance_rate")
            if ra is not None and rb is not None and abs(rb - ra) >= 0.02:
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
            diff = _changed_keys(arms_a[name], arms_b[name], ARM_KEYS)
            if diff:
                out.append(f"arm {name} differs: {'; '.join(diff)}")
    prompts_a = {p["name"]: p for p in pa.get("prompts", [])}
    prompts_b = {p["name"]: p for p in pb.get("prompts", [])}
    if set(prompts_a) != set(prompts_b):
        out.append(f"prompts differ: A has {', '.join(prompts_a) or 'none'}; B has {', '.join(prompts_b) or 'none'}")
    for name in prompts_a:
        if name in prompts_b and _changed_keys(prompts_a[name], prompts_b[name], ("text", "file", "system")):
            out.append(f"prompt {name} has other text in B")
    run_a, run_b = pa.get("run") or {}, pb.get("run") or {}
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
        if "tok/s" in r["changed"] and (r["arm"] in base_arms or r.get("verdict_kind_a") == "baseline"):
            out.append(
                f"baseline {r['arm']} on {r['prompt']} moved {r['tok_per_s_change'] * 100:+.0f}% "
                f"(noise ±{r['tok_per_s_noise'] * 100:.0f}%): the speedups of the arms measured against it "
                "moved with the machine, not only with their drafters")
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
    out: dict[str, Any] = {k: machine[k] for k in ("cpu", "cpu_count", "memory_bytes", "platform", "machine")
                           if machine.get(k) is not None}
    gpus = sorted({str(r["gpu_name"]) for r in data.get("results") or () if isinstance(r, Mapping) and r.get("gpu_name")})
    if gpus:
        out["gpus"] = gpus
    return out


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
    return out


