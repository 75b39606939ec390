"""The bandwidth roofline of plain decoding: each baseline token reads about
every weight once, so B bytes per second decode at most B / model bytes
tokens per second; how close a baseline gets says how much room is left."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Roofline:
    model_bytes: int
    bandwidth_bytes_s: float
    bandwidth_source: str
    baseline_tok_per_s: float | None = None

    @property
    def bound_tok_per_s(self) -> float:
        return self.bandwidth_bytes_s / self.model_bytes

    @property
    def fraction(self) -> float | None:
        if self.baseline_tok_per_s is None:
            return None
        return self.baseline_tok_per_s / self.bound_tok_per_s

    def line(self) -> str:
        text = (
            f"{self.model_bytes / 2**20:.0f} MiB read per token at {self.bandwidth_bytes_s / 1e9:.1f} GB/s "
            f"({self.bandwidth_source}) bounds plain decoding at {self.bound_tok_per_s:.0f} tok/s"
        )
        if self.fraction is not None and self.baseline_tok_per_s is not None:
            used = self.model_bytes * self.baseline_tok_per_s
            text += (
                f"; the baseline's {self.baseline_tok_per_s:.1f} tok/s reaches {self.fraction * 100:.0f}% of it "
                f"(model bytes × tok/s ÷ bandwidth = {used / 1e9:.2f} ÷ {self.bandwidth_bytes_s / 1e9:.1f} GB/s "
                f"= {self.fraction:.2f})"
            )
            if self.fraction > 1:
                # Possible when the weights fit in a last-level cache or the
                # measured bandwidth is below the device's peak.
                text += " (above the bound: the weights stay in cache or the bandwidth given is below the peak)"
        return text
