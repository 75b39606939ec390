"""Built-in drafters: ngram (prompt lookup), oracle (replays the baseline), draft-model (a
smaller model of the same vocabulary), registered like any third-party drafter."""

from __future__ import annotations

from lab.kit.plugin import Plugin

plugin = Plugin(drafters=("lab_drafters.ngram:NgramDrafter", "lab_drafters.oracle:OracleDrafter",
                          "lab_drafters.draft_model:DraftModelDrafter"))
