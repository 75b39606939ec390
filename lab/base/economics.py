"""The arithmetic of one speculative step: priced in baseline tokens it
costs C and lands at most n_max + 1 (the max yield). C is the break-even
mean accepted length, a C at or above the max yield can never pay (a
structural loss), and with d drafts a step the acceptance that breaks even
is (C - 1) / d."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from lab.base import metrics

# Within this band a speedup is too close to 1 to call either way.
NEUTRAL_BAND = 0.02

PAYS = "pays"
EVEN = "break-even"
LOSES = "loses"
STRUCTURAL = "structural loss"
FAILED = "failed"
CANCELLED = "cancelled"
SKIPPED = "skipped"
BASELINE = "baseline"
NO_STEPS = "no steps"
NO_BASELINE = "no baseline"
# paired rounds that disagree, or cells far apart on a busy machine (lab.base.verdict.judge)
UNCERTAIN = "uncertain"


@dataclass(frozen=True)
class StepEconomics:
    """One arm's step priced against its baseline."""

    step_s: float
    baseline_token_s: float
    n_max: int | None
    mean_accepted_len: float | None = None
    drafted_per_step: float | None = None

    @property
    def cost_tokens(self) -> float:
        """Step cost in baseline-token equivalents."""
        return self.step_s / self.baseline_token_s

    @property
    def max_yield(self) -> int | None:
        return metrics.max_yield(self.n_max)

    @property
    def break_even_len(self) -> float:
        """Mean accepted length a step must exceed to pay."""
        return self.cost_tokens

    @property
    def structural(self) -> bool:
        y = self.max_yield
        return y is not None and self.cost_tokens >= y

    @property
    def needed_acceptance(self) -> float | None:
        """Acceptance rate that lands exactly the step's cost; above 1 means
        unreachable. Drafts of n_max tokens are assumed when the drafted count
        per step is unknown."""
        d = self.drafted_per_step or self.n_max
        if not d:
            return None
        return max(0.0, (self.cost_tokens - 1.0) / d)


def from_totals(
    gen_s: float, n_tokens: int, accepted: int, baseline_tok_per_s: float, n_max: int,
    drafted: int | None = None,
) -> StepEconomics:
    """The write-ups' hand arithmetic from server totals: every step lands its
    accepted tokens plus one, so steps = tokens - accepted, and a step's
    seconds are the generation seconds over the steps."""
    steps = n_tokens - accepted
    if steps <= 0:
        raise ValueError(f"{n_tokens} tokens with {accepted} accepted leaves no steps")
    return StepEconomics(
        step_s=gen_s / steps,
        baseline_token_s=1.0 / baseline_tok_per_s,
        n_max=n_max,
        mean_accepted_len=metrics.mean_accepted_len(n_tokens, steps),
        drafted_per_step=(drafted / steps) if drafted else None,
    )


def economics(row: Mapping[str, Any]) -> StepEconomics | None:
    """Economics of a result row (or a summary row with the same keys), None
    when it has no steps or no baseline to price them against."""
    step_s = row.get("step_s")
    cost = row.get("step_cost_tokens")
    if not step_s or not cost:
        return None
    steps = row.get("steps")
    drafted = row.get("drafted")
    n_max = row.get("n_max")
    if n_max is None and row.get("max_yield"):
        n_max = int(row["max_yield"]) - 1
    return StepEconomics(
        step_s=float(step_s),
        baseline_token_s=float(step_s) / float(cost),
        n_max=n_max,
        mean_accepted_len=row.get("mean_accepted_len"),
        drafted_per_step=(drafted / steps) if drafted and steps else None,
    )


@dataclass(frozen=True)
class Call:
    """A verdict as data: its kind and the one line that explains it."""

    kind: str
    line: str


def classify(row: Mapping[str, Any], band: float = NEUTRAL_BAND) -> Call:
    """The arithmetic's verdict of a row (or a summary with the same keys)
    from its own speedup and step cost, with its notes. Whether it holds at
    any load, and whether paired rounds that disagree leave it uncertain,
    is :func:`lab.base.verdict.judge`'s."""
    return annotate(row, measured_call(row, band))


def annotate(row: Mapping[str, Any], call: Call) -> Call:
    """A verdict with the notes its row calls for: set acceptance, output
    that loops."""
    measured = call.kind in (PAYS, EVEN, LOSES, STRUCTURAL, UNCERTAIN)
    if measured and row.get("set_acceptance"):
        call = Call(call.kind, f"{call.line} [{set_acceptance_note(row['set_acceptance'])}]")
    if row.get("degenerate_output") and (measured or call.kind == BASELINE):
        call = Call(call.kind, f"{call.line} [{DEGENERATE_NOTE}]")
    return call


# beside the verdict of a row whose output loops or writes template markers
DEGENERATE_NOTE = "degenerate output: acceptance is not representative"


def set_acceptance_note(setting: Mapping[str, Any]) -> str:
    """What a verdict says of a row whose acceptance was set: the drafter's
    cost is real, its acceptance is the profile's."""
    rates = setting.get("rates") if isinstance(setting, Mapping) else None
    if isinstance(rates, (list, tuple)) and all(isinstance(r, (int, float)) for r in rates):
        return f"acceptance set: mean length {1.0 + sum(float(r) for r in rates):.2f}"
    return "acceptance set"


def measured_call(row: Mapping[str, Any], band: float = NEUTRAL_BAND, structural: bool = True) -> Call:
    """The verdict one speedup and one step cost make, without notes;
    ``structural`` False: a cost at the yield ceiling does not decide (a
    measured gain that the cost contradicts)."""
    status = row.get("status")
    if status in (CANCELLED, SKIPPED):
        # Stopped on purpose: nothing was measured, and nothing failed.
        return Call(str(status), f"{status}: not measured")
    if status != "ok":
        detail = str(row.get("detail") or "").strip().splitlines()
        return Call(FAILED, f"failed: {status}" + (f" ({detail[0][:80]})" if detail else ""))
    if row.get("is_baseline"):
        return Call(BASELINE, "baseline")
    if not row.get("steps"):
        return Call(NO_STEPS, "no speculative steps: the drafter proposed nothing")
    speedup = row.get("speedup")
    econ = economics(row)
    if speedup is None or econ is None:
        return Call(NO_BASELINE, "no baseline to compare against")
    cost = econ.cost_tokens
    length = econ.mean_accepted_len
    len_txt = f"{length:.2f}" if length is not None else "?"
    if structural and econ.structural:
        return Call(
            STRUCTURAL,
            f"structural loss: {speedup:.2f}x; a step costs {cost:.2f} baseline tokens but lands at most "
            f"{econ.max_yield}, so no acceptance rate can pay",
        )
    if speedup >= 1 + band:
        return Call(PAYS, f"pays: {speedup:.2f}x, landing {len_txt} tokens per step at a cost of {cost:.2f}")
    if speedup > 1 - band:
        return Call(EVEN, f"break-even: {speedup:.2f}x, landing {len_txt} tokens per step at a cost of {cost:.2f}")
    if length is not None and length > cost:
        return Call(
            LOSES,
            f"loses outside the steps: {speedup:.2f}x although a step lands {len_txt} tokens at a cost of "
            f"{cost:.2f}; the time goes to tokens drafted for nothing or loop overhead",
        )
    need = econ.needed_acceptance
    rate = row.get("acceptance_rate")
    need_txt = f", i.e. {need * 100:.0f}% acceptance" if need is not None else ""
    rate_txt = f" ({rate * 100:.0f}% accepted)" if rate is not None else ""
    return Call(
        LOSES,
        f"loses at this acceptance: {speedup:.2f}x, lands {len_txt} tokens per step{rate_txt}; "
        f"break-even needs {cost:.2f}{need_txt}",
    )
