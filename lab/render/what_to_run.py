"""The end of a report and of ``lab run``'s summary: what to run. For each
stack the run measured, the engine's own command line for its fastest
configuration, measured or predicted, with its speedup against that stack's
baseline and what the figure rests on; a stack where nothing pays gets its
baseline's command. The lines come from each backend's
``Backend.engine_command``; this module only chooses the configuration.

A predicted configuration is the same arm at another n_max, from the run's
acceptance per draft position priced by the probe (:mod:`lab.analysis.predict`).
It is shown only where it beats the best measured one by more than the
prediction missed this run's own measured speedups, and never past the
positions the run measured (an extrapolated n_max is a guess)."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from lab.base.economics import NEUTRAL_BAND, PAYS, STRUCTURAL, UNCERTAIN
from lab.base.profile import Arm, RunSettings

if TYPE_CHECKING:
    from lab.api import EngineCommand
    from lab.registry import Registry

MEASURED = "measured"
PREDICTED = "predicted"
TITLE = "What to run"


@dataclass(frozen=True)
class Choice:
    """One configuration: the arm it is (at ``n_max``), its speedup per
    prompt and over them (geometric mean), how it is known, and its line."""

    arm: str
    n_max: int | None
    speedups: Mapping[str, float]
    how: str  # MEASURED or PREDICTED
    basis: str  # what the figure rests on
    command: EngineCommand | None = None
    no_command: str = ""  # why there is no line
    kinds: Mapping[str, str] = field(default_factory=dict)  # the verdict per prompt (measured)
    miss: float | None = None  # predicted: how far the prediction missed this run's measured speedup

    @property
    def overall(self) -> float:
        return geomean(self.speedups.values())

    def figures(self) -> str:
        """"1.79x (prose)", or "0.63x (prose 0.50x, code 0.77x)"."""
        if len(self.speedups) == 1:
            return f"{self.overall:.2f}x ({next(iter(self.speedups))})"
        return f"{self.overall:.2f}x (" + ", ".join(f"{p} {v:.2f}x" for p, v in self.speedups.items()) + ")"


@dataclass(frozen=True)
class StackAdvice:
    """What to run on one stack: ``pick`` pays, else the baseline's line."""

    stack: str
    baseline: str | None
    baseline_tok_s: Mapping[str, float]
    baseline_command: EngineCommand | None
    baseline_no_command: str
    pick: Choice | None
    best_loser: Choice | None  # the fastest that did not pay, when nothing did
    only_on: tuple[tuple[str, Choice], ...] = ()  # (prompt, arm) that pays on that prompt alone
    predicted_pays: Choice | None = None  # nothing measured pays, a prediction does
    notes: tuple[str, ...] = ()
    runner_up: Choice | None = None  # the best measured, where the pick is a prediction


def geomean(values: Any) -> float:
    xs = [float(v) for v in values if v and v > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    from lab.registry import load_registry

    return load_registry()


# -- choosing -------------------------------------------------------------------


def _saved_arms(profile: Mapping[str, Any]) -> tuple[RunSettings, dict[str, Arm]]:
    run_fields = {f.name for f in dataclasses.fields(RunSettings)}
    run = RunSettings(**{k: v for k, v in (profile.get("run") or {}).items() if k in run_fields})
    # set acceptance is left out: a line never carries it
    arm_fields = {f.name for f in dataclasses.fields(Arm)} - {"acceptance", "deadlines"}
    arms = {}
    for a in profile.get("arms") or ():
        if isinstance(a, Mapping) and a.get("name"):
            try:
                arms[str(a["name"])] = Arm(**{k: v for k, v in a.items() if k in arm_fields})
            except TypeError:
                continue
    return run, arms


def _command(arm: Arm, run: RunSettings, registry: Registry, n_max: int | None = None) -> tuple[EngineCommand | None, str]:
    """The arm's line at ``n_max`` (None: its own), or why there is none."""
    from lab.api import with_defaults

    if arm.backend not in registry.backends:
        return None, f"backend {arm.backend} is not installed here, so its line is not known"
    if n_max is not None:
        arm = dataclasses.replace(arm, n_max=n_max)
    if arm.drafter is not None and arm.drafter in registry.drafters:
        # the drafter's declared defaults, as the arm ran with them
        arm = dataclasses.replace(arm, drafter_options=with_defaults(registry.drafter(arm.drafter).options,
                                                                      arm.drafter_options))
    try:
        got = registry.backend(arm.backend).engine_command(arm, run)
    except Exception as exc:  # noqa: BLE001 - a plugin's failure costs its line, never the report
        return None, f"backend {arm.backend} failed to give its line ({type(exc).__name__}: {exc})"
    if got is None:
        return None, f"backend {arm.backend} gives no command line of its engine's own"
    if not got.runnable:
        return None, "; ".join(got.notes) or f"no tool of {arm.backend}'s engine runs this arm"
    return got, ""


def _measured(arm: str, rows: Sequence[Mapping[str, Any]]) -> Choice | None:
    """The arm's measured speedups, or None where a prompt has none."""
    speedups: dict[str, float] = {}
    kinds: dict[str, str] = {}
    rounds = []
    for s in rows:
        value = s.get("speedup_geomean") or s.get("speedup")
        if not s.get("rounds") or not value:
            return None
        speedups[s["prompt"]] = float(value)
        kinds[s["prompt"]] = str(s.get("verdict_kind") or "")
        rounds.append(int(s["rounds"]))
    if not speedups:
        return None
    n = min(rounds)
    basis = f"measured: {n} paired round{'s' if n != 1 else ''} per prompt against the baseline's"
    return Choice(arm, rows[0].get("n_max"), speedups, MEASURED, basis, kinds=kinds)


def _pays(choice: Choice) -> bool:
    return (choice.overall >= 1 + NEUTRAL_BAND and STRUCTURAL not in choice.kinds.values()
            and UNCERTAIN not in choice.kinds.values())


def _predicted(preds: Sequence[Mapping[str, Any]], arms: Mapping[str, Arm], prompts: Sequence[str],
               measured_n: Mapping[str, set[int]], probe_words: Mapping[str, str]) -> list[Choice]:
    """Each arm group's best n_max not measured, from the prediction of
    the arm that measured the most draft positions."""
    by_arm: dict[str, dict[str, Mapping[str, Any]]] = {}
    for p in preds:
        by_arm.setdefault(p["arm"], {})[p["prompt"]] = p
    out: dict[tuple[str, int], tuple[int, Choice]] = {}
    for name, per_prompt in by_arm.items():
        arm = arms.get(name)
        if arm is None or set(per_prompt) != set(prompts) or not all(p["probe_matches"] for p in per_prompt.values()):
            continue
        # how far the prediction missed at the arm's own n_max, on this run
        misses = [abs(p["predicted"] / p["measured"] - 1) for p in per_prompt.values()
                  if p.get("predicted") and p.get("measured")]
        miss = max(misses) if misses else None
        positions = min(int(p.get("measured_positions") or 0) for p in per_prompt.values())
        curves = [{c["n_max"]: c for c in p["curve"] if not c.get("extrapolated")} for p in per_prompt.values()]
        common = set.intersection(*(set(c) for c in curves)) if curves else set()
        for n in sorted(common - measured_n.get(arm.group, set())):
            speedups = {prompt: float(curve[n]["speedup"]) for prompt, curve in zip(per_prompt, curves)}
            missed = "" if miss is None else f"; at the measured n_max {arm.n_max} it missed by {miss * 100:.0f}%"
            basis = (f"predicted, not measured: this run's acceptance per draft position ({name}, positions 1-"
                     f"{positions}) priced by {probe_words.get(name, 'the probe')}{missed}")
            choice = Choice(name, n, speedups, PREDICTED, basis, miss=miss)
            key = (arm.group, n)
            if key not in out or positions > out[key][0]:
                out[key] = (positions, choice)
    return [c for _, c in out.values()]


def _margin(choice: Choice) -> float:
    """How much a predicted speedup must beat another by: the band, or what
    the prediction missed by on this run, whichever is larger."""
    return max(NEUTRAL_BAND, choice.miss or 0.0)


def _pool(data: Mapping[str, Any]) -> list[Any]:
    """The run's probes, as the report reads them."""
    from lab.base import probe as probes

    saved = list(data.get("probes") or ()) or ([data["probe"]] if data.get("probe") is not None else [])
    return [v if isinstance(v, probes.Probe) else probes.Probe.from_json(v) for v in saved]


def _probe_words(row: Mapping[str, Any], pool: Sequence[Any]) -> str:
    """The probe that priced an arm's row, in words."""
    from lab.analysis.predict import probe_for

    p, _ = probe_for(row, pool)
    if p is None:
        return "the probe"
    return f"the probe's T(w) ({p.backend} / {p.model} by {p.method}, {p.origin_line()})"


def _predictions(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    from lab.analysis import run as analysis

    steps = data.get("steps")
    pool = _pool(data)
    if not steps or not pool:
        return []
    try:
        return analysis.predicted_for_rows(data["results"], steps, pool)
    except (ArithmeticError, ValueError, TypeError, KeyError):
        return []  # the Prediction section says why


def advise(data: Mapping[str, Any], registry: Registry | None = None) -> list[StackAdvice]:
    """What to run on each stack of a saved run (``load_for_report``'s form)."""
    from lab.analysis import run as analysis

    registry = registry or _registry()
    results = data.get("results") or []
    run, arms = _saved_arms(data.get("profile") or {})
    summaries = analysis.summarize(results)
    prompts = list(dict.fromkeys(s["prompt"] for s in summaries))
    stack_of: dict[str, str] = {}
    for r in results:
        stack_of.setdefault(r["arm"], str(r.get("stack") or r.get("backend") or ""))
    by_arm: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        by_arm.setdefault(s["arm"], []).append(s)
    preds = _predictions(data)
    pool = _pool(data) if preds else []
    first_row: dict[str, Mapping[str, Any]] = {}
    for r in results:
        first_row.setdefault(r["arm"], r)
    words = {name: _probe_words(first_row[name], pool) for name in {p["arm"] for p in preds} if name in first_row}

    def line(c: Choice) -> Choice:
        return _with_command(c, arms, run, registry)

    out = []
    for stack in dict.fromkeys(stack_of.values()):
        names = [a for a, st in stack_of.items() if st == stack]
        baselines = [a for a in names if by_arm.get(a) and by_arm[a][0]["is_baseline"]]
        measured: list[Choice] = []
        notes: list[str] = []
        left_out: dict[str, list[str]] = {}
        for name in names:
            rows = by_arm.get(name) or []
            if not rows or rows[0]["is_baseline"]:
                continue
            if any(s.get("set_acceptance") for s in rows):
                left_out.setdefault("their acceptance set by the profile rather than drafted", []).append(name)
                continue
            if _replays(arms.get(name), registry):
                left_out.setdefault("their drafter replays the baseline's output (an upper bound, not a "
                                    "configuration to run)", []).append(name)
                continue
            got = _measured(name, rows)
            if got is None:
                notes.append(f"{name} has no speedup to offer: {rows[0]['status']}")
                continue
            measured.append(line(got))
        runnable = [c for c in measured if c.command is not None]
        measured_n: dict[str, set[int]] = {}
        for c in measured:
            if c.arm in arms and c.n_max is not None:
                measured_n.setdefault(arms[c.arm].group, set()).add(int(c.n_max))
        paying = sorted((c for c in runnable if _pays(c)), key=lambda c: -c.overall)
        best = paying[0] if paying else None
        floor = best.overall if best else 1 + NEUTRAL_BAND
        predicted = [line(c) for c in _predicted([p for p in preds if p["arm"] in names], arms, prompts, measured_n,
                                                 words)]
        better = sorted((c for c in predicted if c.command is not None and c.overall > floor * (1 + _margin(c))),
                        key=lambda c: -c.overall)
        pick, runner_up, predicted_pays = best, None, None
        if better and best is not None:
            pick, runner_up = better[0], best
        elif better:
            predicted_pays = better[0]
        for c in measured:
            # a drafter only the lab's loop runs, faster than what an engine runs: worth a word
            if c.command is None and _pays(c) and (pick is None or c.overall > pick.overall):
                notes.append(f"{c.arm} pays {c.figures()} in the lab's loop, but no engine runs it: {c.no_command}")
        notes += [f"left out, {why}: {', '.join(names_)}" for why, names_ in left_out.items()]
        if not measured and not left_out and not notes:
            notes.append("no speculative arm ran on this stack")
        base = (arms[pick.arm].baseline if pick is not None and pick.arm in arms else None) or (
            baselines[0] if baselines else None)
        base_cmd, base_why = (None, "no baseline arm on this stack")
        if base is not None and base in arms:
            base_cmd, base_why = _command(arms[base], run, registry)
        base_tps = {s["prompt"]: float(s["tok_per_s"]) for s in by_arm.get(base or "", []) if s.get("tok_per_s")}
        loser = max((c for c in measured if not _pays(c)), key=lambda c: c.overall, default=None) if pick is None else None
        only_on: list[tuple[str, Choice]] = []
        if pick is None:
            for prompt in prompts:
                top = max((c for c in runnable if c.kinds.get(prompt) == PAYS), default=None,
                          key=lambda c: c.speedups.get(prompt, 0.0))
                if top is not None:
                    only_on.append((prompt, top))
        out.append(StackAdvice(stack, base, base_tps, base_cmd, base_why, pick, loser, tuple(only_on),
                               predicted_pays, tuple(notes), runner_up))
    return out


def _replays(arm: Arm | None, registry: Registry) -> bool:
    """Whether the arm's drafter replays a baseline's output (the oracle:
    ``Drafter.needs_baseline``), so its speedup is a bound, not a setting."""
    if arm is None or arm.drafter is None or arm.drafter not in registry.drafters:
        return False
    return bool(registry.drafter(arm.drafter).needs_baseline)


def _with_command(choice: Choice, arms: Mapping[str, Arm], run: RunSettings, registry: Registry) -> Choice:
    arm = arms.get(choice.arm)
    if arm is None:
        return dataclasses.replace(choice, no_command=f"arm {choice.arm} is not in the run's profile")
    command, why = _command(arm, run, registry, choice.n_max if choice.how == PREDICTED else None)
    return dataclasses.replace(choice, command=command, no_command=why)


# -- rendering --------------------------------------------------------------------


@dataclass(frozen=True)
class _Style:
    """How the section is written: Markdown for report.md, indented text
    for ``lab run``."""

    head: Callable[[str, str], list[str]]  # (stack, sentence) -> lines
    code: Callable[[str, bool], list[str]]  # (command line, nested) -> lines
    bullet: str
    strong: Callable[[str], str]


def _choice_words(c: Choice, strong: Callable[[str], str]) -> str:
    n = f" at n_max {c.n_max}" if c.n_max is not None else ""
    return f"{strong(c.arm + n)}: {c.figures()}, {c.basis}"


def _lines(advice: Sequence[StackAdvice], style: _Style) -> list[str]:
    out: list[str] = []
    b = style.bullet
    for a in advice:
        if a.pick is not None:
            c = a.pick
            sentence = _choice_words(c, style.strong)
            if c.how == PREDICTED:
                sentence += f". Measure it first: n_max = {c.n_max} in the profile"
            out += style.head(a.stack, sentence + ".")
            out += _command_lines(c.command, c.no_command, style)
            if a.runner_up is not None:
                out.append(f"{b}the best measured: {_choice_words(a.runner_up, style.strong)}")
                out += _command_lines(a.runner_up.command, a.runner_up.no_command, style, nested=True,
                                      said=c.command.notes if c.command else ())
        else:
            tps = ", ".join(f"{p} {v:.2f} tok/s" for p, v in a.baseline_tok_s.items())
            why = "nothing measured here pays" if a.best_loser is not None or a.only_on else (
                "no arm here measured a configuration to run")
            if a.best_loser is not None:
                why += f" (the fastest: {a.best_loser.arm}, {a.best_loser.figures()}"
                kinds = sorted(set(a.best_loser.kinds.values()))
                why += f", {' / '.join(kinds)})" if kinds else ")"
            run_base = style.strong("run the baseline") + (f" ({a.baseline}: {tps})" if tps else "")
            out += style.head(a.stack, f"{why}; {run_base}.")
            out += _command_lines(a.baseline_command, a.baseline_no_command, style)
            for prompt, c in a.only_on:
                out.append(f"{b}only on {prompt} does an arm pay: {c.arm}, {c.speedups[prompt]:.2f}x there")
                out += _command_lines(c.command, c.no_command, style, nested=True)
            if a.predicted_pays is not None:
                p = a.predicted_pays
                out.append(f"{b}{_choice_words(p, style.strong)}; measure it before relying on it (n_max = {p.n_max})")
                out += _command_lines(p.command, p.no_command, style, nested=True)
        out += [f"{b}{n}" for n in a.notes]
        out.append("")
    return out


def _command_lines(command: EngineCommand | None, why: str, style: _Style, nested: bool = False,
                   said: Sequence[str] = ()) -> list[str]:
    """A command's line and its notes (those not ``said`` already), or why there is none."""
    if command is None:
        return [f"{style.bullet}no command line: {why}"]
    return [*style.code(command.line(), nested), *(f"{style.bullet}{n}" for n in command.notes if n not in said)]


def markdown_lines(data: Mapping[str, Any], registry: Registry | None = None) -> list[str]:
    """``## What to run`` for the end of report.md (after a blank line,
    ending in one); nothing for a run with no stack."""
    try:
        advice = advise(data, registry)
    except Exception as exc:  # noqa: BLE001 - this section never costs a report
        return [f"## {TITLE}", "", f"Not worked out: {type(exc).__name__}: {exc}", ""]
    if not advice:
        return []
    run = (data.get("profile") or {}).get("run") or {}
    greedy = "greedy" if not run.get("temperature") else f"temperature {run.get('temperature')}"
    intro = (f"Each stack's fastest configuration as its engine's own command, against that stack's baseline, at "
             f"this run's settings ({greedy}, {run.get('max_tokens')} tokens, context {run.get('n_ctx')}); "
             "`<your prompt>` stands for yours.")

    style = _Style(head=lambda stack, sentence: [f"### {stack}", "", sentence[:1].upper() + sentence[1:]],
                   code=lambda line, nested: ["", "```sh", line, "```", ""], bullet="- ",
                   strong=lambda text: f"**{text}**")
    body = _lines(advice, style)
    while body and not body[-1]:
        body.pop()
    return [f"## {TITLE}", "", intro, "", *body, ""]


def text_lines(data: Mapping[str, Any], registry: Registry | None = None) -> list[str]:
    """The same, as ``lab run`` prints it after its table."""
    advice = advise(data, registry)
    if not advice:
        return []
    style = _Style(head=lambda stack, sentence: [f"  {stack}: {sentence}"],
                   code=lambda line, nested: [("      " if nested else "    ") + line], bullet="    - ",
                   strong=lambda text: text)
    return [f"{TITLE} (each stack's fastest configuration, as its engine's own command):",
            *(ln for ln in _lines(advice, style) if ln)]
