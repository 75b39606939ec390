"""The report's "Engines beside the lab's loop" section on saved rows: which
lab arm each engine arm is set beside, tokens that part, and the tok/s
ratios (tests/test_mac_engines.py runs the real engines)."""

from __future__ import annotations

from typing import Any

from lab.render import engines


def _arm(name: str, backend: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "backend": backend, "model": "m", "n_max": 3, "drafter": None, "options": {},
            "drafter_options": {}, **extra}


def _row(arm: str, rnd: int, tps: float, ids: list[int], lab_loop: dict[str, Any] | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {"output_ids": ids}
    if lab_loop is not None:
        report |= {"lab_loop": lab_loop, "loop_differences": ["adaptive block"], "engine": "eng 1.0"}
    return {"arm": arm, "prompt": "p", "round": rnd, "status": "ok", "tok_per_s": tps, "n_max": 3,
            "text": "x", "engine_report": report}


LOOP = {"backend": "mlx-dflash", "drafter": None, "options": {"draft": "d", "draft_bits": 0}}


def test_an_engine_arm_is_set_beside_the_lab_arm_on_the_same_draft() -> None:
    profile = {"arms": [_arm("other", "mlx-dflash", options={"draft": "e"}),
                        _arm("lab", "mlx-dflash", options={"draft": "d", "timing": "fused"}),
                        _arm("eng", "zlab-dflash", options={"draft": "d"})]}
    results = [_row("lab", 1, 100.0, [1, 2, 3]), _row("eng", 1, 50.0, [1, 2, 3], LOOP),
               _row("lab", 2, 90.0, [1, 2, 3]), _row("eng", 2, 100.0, [1, 9, 3], LOOP)]
    found = engines.pairs(profile, results)
    assert [(p.engine_arm, p.lab_arm) for p in found] == [("eng", "lab")]
    steps = [{"arm": a, "prompt": "p", "round": 1, "drafted": 3, "accepted": acc, "landed": acc + 1}
             for a, acc in (("lab", 3), ("lab", 1), ("eng", 3), ("eng", 0))]
    text = "\n".join(engines.markdown_lines({"profile": profile, "results": results, "steps": steps}))
    # conditional per position: lab kept 3 then 1 of 3, the engine 3 then 0
    assert "| eng (zlab-dflash) | lab | p | 1 | identical (3) | 1.00/0.50, 0.50/1.00, 1.00/1.00 | 2.00 |" in text
    assert "| eng (zlab-dflash) | lab | p | 2 | part at token 1 |" in text
    assert "- lab over eng: min 0.90, median 1.45, max 2.00 (2 cells)" in text
    assert "- eng (eng 1.0): adaptive block" in text


def test_no_pair_without_the_same_draft_model_or_depth() -> None:
    results = [_row("lab", 1, 100.0, [1]), _row("eng", 1, 50.0, [1], LOOP)]
    for lab in (_arm("lab", "mlx-dflash", options={"draft": "e"}), _arm("lab", "mlx-dflash", options={"draft": "d"}, n_max=2),
                _arm("lab", "mlx", options={"draft": "d"})):
        profile = {"arms": [lab, _arm("eng", "zlab-dflash", options={"draft": "d"})]}
        assert engines.pairs(profile, results) == []
        assert engines.markdown_lines({"profile": profile, "results": results}) == []
