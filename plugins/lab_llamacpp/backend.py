"""The ``llamacpp`` backend: baseline decoding and the lab's speculative loop
for drafter plugins, on llama.cpp in this process."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from lab import api
from lab.base.events import Emit, Status, StatusChanged, arm_cell
from lab.base.machine import available_cores
from lab.kit import models
from lab.kit.loading import resolve_target
from lab.kit.prompting import RenderedPrompt, render_prompt
from lab.kit.speculative import LoopStats, TraceStep, generate
from lab_llamacpp.target import LlamaTarget, close_engine, wants_gpu_pick

if TYPE_CHECKING:
    from lab.api import Drafter, DrafterContext
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings
    from lab_llamacpp.engine import Context, Model


# llama-bench's repetitions of the reference's tg test (it reports their mean)
REFERENCE_REPETITIONS = 3


class LlamaCppBackend(
    api.Backend, api.Drafting, api.DraftModelHost, api.Probing, api.Referencing, api.DivergenceExplaining
):
    name = "llamacpp"
    stack = "llamacpp"
    description = "llama.cpp in process (llama-cpp-python low-level API); runs drafter plugins"
    accepts_drafters = True
    # llama.cpp's libraries load with the package: before numpy in the arm's process
    native_preload = ("llama_cpp",)
    gpu_layers_option = "n_gpu_layers"
    options = (
        api.Option("n_gpu_layers", int, 0, "layers offloaded to the GPU (-ngl)", min=-1),
        api.Option("n_batch", int, 512, "logical batch size for prompt processing (-b)", min=1, max=65536),
        api.Option("extra_bufts", bool, True, "let llama.cpp repack weights for faster CPU kernels (--no-repack turns it off)"),
        api.Option("batch_invariant", bool, False,
               "never decode a token alone (pad it to two rows), so greedy speculation is token-identical to the "
               "baseline on the CPU kernels; it slows every one-token decode (0.55x on SmolLM2 with 2 threads), "
               "so speeds are not the engine's own: for checking losslessness, not for verdicts"),
        api.Option("gpu_pick", str, "auto",
               "greedy picks by llama.cpp's backend sampler inside the decode (no logits copied to the host, no "
               "host arg-max): auto = on when layers are offloaded to a GPU, the run is greedy and the arm drafts "
               "(a baseline's one-row decodes pick on the host, which costs less there)",
               choices=("auto", "on", "off")),
    )

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        return True  # lab check refuses an arm without one

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> api.MissingEngine | None:
        from lab.kit.checks import import_failure

        # importing llama_cpp loads its shared library: both are checked
        why = import_failure("llama_cpp")
        return api.MissingEngine("llama_cpp", why, "bash scripts/setup.sh llamacpp") if why else None

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        return True  # the lab's own loop decides (lab.kit.speculative.acceptor)

    @classmethod
    def reference_tool(cls, arm_options: Mapping[str, Any]) -> str | None:
        return "llama-bench tg"

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> api.EngineCommand | None:
        """llama-server with the speculative type of the arm's drafter
        (:mod:`lab_llamacpp.engine_line`)."""
        from lab_llamacpp.engine_line import inprocess_command

        return inprocess_command(arm, run, api.with_defaults(cls.options, arm.options))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """The target's context as load() makes it (n_outputs_max left at
        n_batch, n_ubatch at most 512, the library's full-size sliding-window
        cache, repacking per extra_bufts, a sampler in the graph where
        gpu_pick puts one), and a draft model a drafter runs here (its own
        context at the drafter's n_ctx, batch 512)."""
        from lab.base.footprint import LLAMA_CPP, MemoryNeeds, ModelLoad

        if arm.model is None:
            return None
        opts = api.with_defaults(cls.options, arm.options)
        layers = int(opts["n_gpu_layers"])
        n_batch, padded = int(opts["n_batch"]), bool(opts["batch_invariant"])
        pick, greedy = str(opts["gpu_pick"]), run.temperature <= 0

        def picks(n_layers: int, verifies: bool) -> bool:
            # wants_gpu_pick without asking llama.cpp (no engine is imported here)
            return pick == "on" or (pick == "auto" and greedy and n_layers != 0 and verifies)

        target = ModelLoad(
            "target", arm.model, run.n_ctx + (1 if padded else 0), n_ubatch=min(n_batch, 512), n_outputs=n_batch,
            n_verify=(arm.n_max or 0) + 1 + (1 if padded else 0), swa_full=True, repack=bool(opts["extra_bufts"]),
            gpu_layers=None if layers < 0 else layers, device_sampling=picks(layers, arm.drafter is not None),
        )
        loads = [target]
        draft = arm.drafter_options.get("model") if arm.drafter is not None else None
        if isinstance(draft, str):
            d_layers = arm.drafter_options.get("n_gpu_layers")
            d_layers = layers if d_layers is None else int(d_layers)
            loads.append(ModelLoad("draft", draft, int(arm.drafter_options.get("n_ctx") or 0) or run.n_ctx,
                                   n_ubatch=512, n_outputs=512, swa_full=True, repack=True,
                                   gpu_layers=None if d_layers < 0 else d_layers,
                                   device_sampling=picks(d_layers, True)))
        # this arm's own process (a fresh interpreter: llama.cpp, numpy and the
        # lab imported) before any model: its RSS measured on Linux x86-64
        return MemoryNeeds(LLAMA_CPP, tuple(loads), accelerated=layers != 0, process_bytes=125 << 20,
                           process_before_load=50 << 20)

    def __init__(self, arm: Arm, ctx: api.BackendContext) -> None:
        super().__init__(arm, ctx)
        self.model: Model | None = None
        self.context: Context | None = None
        self.drafter: Drafter | None = None
        self.stats = LoopStats()
        self.gpu_pick = False
        self.gpu_pick_verifies = False
        self.gpu_pick_one_row = False
        # how the last verify-cost measurement was taken (probe_notes)
        self._probe_notes: dict[str, Any] = {}
        # the switch and cell tables by (table, depth, widths): timed once, whatever the cycles
        self._probe_tables: dict[tuple[Any, ...], Any] = {}
        # (prompt, output, baseline, batches) -> the divergence evidence found
        self._explained: dict[tuple[Any, ...], dict[str, Any] | None] = {}

    def load(self, emit: Emit) -> None:
        from lab_llamacpp import engine

        path = resolve_target(self.arm, self.name, emit)
        cell = arm_cell(self.arm.name)
        opts = self.arm.options
        self.model = engine.Model(str(path), n_gpu_layers=int(opts.get("n_gpu_layers", 0)), extra_bufts=bool(opts.get("extra_bufts", True)))
        threads = self.ctx.run.threads or available_cores()
        emit(StatusChanged(cell, Status.LOADING, phase="creating context", progress=0.7))
        setting, layers = str(opts.get("gpu_pick", "auto")), int(opts.get("n_gpu_layers", 0))
        # built to pick on the device where it could, as the probe measures it
        self.gpu_pick_verifies = wants_gpu_pick(setting, layers, self.ctx.run.temperature)
        self.gpu_pick_one_row = wants_gpu_pick(setting, layers, self.ctx.run.temperature, verifies=False)
        self.gpu_pick = self.gpu_pick_verifies if self.arm.drafter is not None else self.gpu_pick_one_row
        try:
            self.context = engine.Context(self.model, self.ctx.run.n_ctx, int(opts.get("n_batch", 512)), threads,
                                          batch_invariant=bool(opts.get("batch_invariant", False)),
                                          outputs_per_seq=self._outputs_per_seq() if self.gpu_pick_verifies else 0)
        except engine.LlamaError as exc:
            raise api.EngineOOM(str(exc)) from exc

    def _outputs_per_seq(self) -> int:
        from lab_llamacpp.gpu_pick import OUTPUTS_PER_SEQ

        # A verify pass picks n_max + 1 rows; a padded lone row adds one.
        return max(OUTPUTS_PER_SEQ, (self.arm.n_max or 0) + 2)

    def attach_drafter(self, drafter: Drafter) -> None:
        self.drafter = drafter

    def draft_model(self, options: Mapping[str, Any], ctx: DrafterContext) -> Drafter:
        from lab_llamacpp.draft_model import LlamaDraftModel

        # A draft model sits where its target does unless the arm says otherwise.
        if options.get("n_gpu_layers") is None:
            options = {**options, "n_gpu_layers": int(self.arm.options.get("n_gpu_layers", 0))}
        options = {"gpu_pick": str(self.arm.options.get("gpu_pick", "auto")), **options}
        return LlamaDraftModel(options, ctx)

    def tokenize(self, text: str) -> list[int]:
        assert self.model is not None
        return self.model.tokenize(text)

    def vocab_size(self) -> int:
        assert self.model is not None
        return self.model.n_vocab

    def rendered_prompt(self, request: api.GenerationRequest) -> RenderedPrompt:
        """The cell's prompt as the lab renders it for every stack (see
        lab.kit.prompting), from the model file this arm loaded."""
        assert self.model is not None
        return render_prompt(self.model.path, request.prompt, request.system, request.chat_template)

    def prompt_ids(self, request: api.GenerationRequest, rendered: RenderedPrompt | None = None) -> list[int]:
        assert self.model is not None
        rendered = rendered or self.rendered_prompt(request)
        return self.model.tokenize(rendered.text, add_special=rendered.add_special, parse_special=rendered.parse_special)

    def generate(self, request: api.GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> api.Generation:
        from lab_llamacpp import engine

        assert self.context is not None
        self.context.set_sampling(engine.Sampling(request.temperature, request.seed, request.ignore_eos))
        target: LlamaTarget
        if self.gpu_pick:
            from lab_llamacpp.gpu_pick import GpuPickTarget

            # At a temperature it detaches the backend chain and samples on the host.
            target = GpuPickTarget(self.context, request.temperature, request.ignore_eos)
        else:
            target = LlamaTarget(self.context, request.temperature, request.ignore_eos)
        rendered = self.rendered_prompt(request)
        ids = self.prompt_ids(request, rendered)
        trace: list[TraceStep] | None = [] if self._checks_divergence(request) else None
        try:
            gen = generate(target, ids, request, emit, cancelled, self.drafter, self.stats, trace)
            if trace is not None:
                self._explain_divergence(request, target, ids, trace, gen)
        except engine.LlamaError as exc:
            if "KV cache full" in str(exc):
                raise api.EngineOOM(str(exc)) from exc
            raise
        gen.engine_bytes = self.engine_bytes()
        gen.engine_report.update(rendered.report())
        redos = getattr(target, "host_redos", 0)
        if redos:
            # a masked token won a device pick: that pass was decoded again
            # with host logits, and the cell picked on the host after it
            gen.engine_report["host_redos"] = redos
        return gen

    # -- why a greedy cell left its baseline (DivergenceExplaining) -----------------
    def _checks_divergence(self, request: api.GenerationRequest) -> bool:
        # Greedy cells only (sampled ones differ by design); picks on the
        # GPU leave no host logits to compare.
        return (self.drafter is not None and request.temperature <= 0 and not request.cell.is_warmup
                and not self.gpu_pick)

    def _explain_divergence(self, request: api.GenerationRequest, target: LlamaTarget, prompt_ids: Sequence[int],
                            trace: list[TraceStep], gen: api.Generation) -> None:
        """After the cell's clocks stopped: the evidence for why its output
        left the baseline's, in ``engine_report["divergence"]``."""
        from lab_llamacpp import divergence

        assert self.drafter is not None
        baseline = self.drafter.ctx.reference(request.cell.prompt, request.cell.round)
        if baseline is None:
            return
        notes = self.divergence_notes()
        # The cell's own prompt and length, so the reproduction meets the same tokens.
        notes["repro"] += (f" --prompt {shlex.quote(self.rendered_prompt(request).text)} --tokens {len(baseline)}"
                           " --configs default,pad")
        # A later round that decoded the same batches to the same output
        # against the same baseline replays to the same evidence: reuse it.
        key = (tuple(prompt_ids), tuple(gen.ids), tuple(baseline), tuple(trace))
        if key in self._explained:
            evidence = self._explained[key]
            if evidence is not None:
                evidence = {**evidence, "check_s": 0.0, "same_as_earlier_round": True}
        else:
            evidence = divergence.explain(target, prompt_ids, trace, gen.ids, baseline, notes)
            self._explained[key] = evidence
        if evidence is not None:
            gen.engine_report["divergence"] = evidence

    def divergence_notes(self) -> dict[str, Any]:
        model = self.arm.model or "MODEL"
        threads = self.ctx.run.threads or available_cores()
        return {
            # the script ships with the source, not with an installed lab
            "repro": f"python -m benchmarks.lossless_repro --model {model} --width {(self.arm.n_max or 4) + 1} "
                     f"--threads {threads}",
            "bit_exact": "options = { batch_invariant = true } on this arm and its baseline (and extra_bufts = false "
                         "for Q4_0, Q8_0 and K-quant weights): token-identical, at 0.55x the engine's decode speed "
                         "(SmolLM2, 2 threads)",
            "batch_invariant": bool(self.arm.options.get("batch_invariant", False)),
        }

    def pauses_between_steps(self) -> bool:
        return True  # lab.kit.speculative.generate: decode is synchronous

    def engine_bytes(self) -> int | None:
        if self.model is None:
            return None
        total = self.model.size_bytes
        if self.context is not None:
            total += self.context.state_bytes()
        if self.drafter is not None:
            total += self.drafter.memory_bytes() or 0
        return total

    def close(self) -> None:
        self.context, self.model = close_engine(self.context, self.model)

    def report(self) -> dict[str, Any]:
        opts = self.arm.options
        return {
            "loop_overhead_s": self.stats.overhead_s(), "steps": self.stats.steps,
            # what decides whether outputs can be bit-identical (see engine.py)
            "batch_invariant": bool(opts.get("batch_invariant", False)),
            "extra_bufts": bool(opts.get("extra_bufts", True)),
            "gpu_pick": self.gpu_pick,
        }

    # -- the engine's own figure ([run] reference) ------------------------------
    def reference_needs_load(self) -> bool:
        return False  # llama-bench loads the model itself: measured once the arm's copy is freed

    def measure_reference(self, request: api.GenerationRequest, prompt_tokens: int | None) -> dict[str, Any]:
        """llama-bench tg of ``max_tokens`` decodes at the prompt's depth,
        with the arm's threads, GPU layers, batch sizes, repacking and flash
        attention (the context's default, auto, as llama-bench's)."""
        from lab.kit.llama_tools import bench_tg_argv, find_llama_tool, missing_tool_hint, run_bench_tg

        found = find_llama_tool("llama-bench")
        if found is None:
            raise RuntimeError(missing_tool_hint("llama-bench"))
        if self.arm.model is None:
            raise ValueError("the reference needs a model")
        opts = self.opts
        # as load() builds the context (engine.Context: n_ubatch, flash attention left at auto)
        threads, layers = self.ctx.run.threads or available_cores(), int(opts["n_gpu_layers"])
        n_batch, repack, depth = int(opts["n_batch"]), bool(opts["extra_bufts"]), int(prompt_tokens or 0)
        n_ubatch = min(n_batch, 512)
        settings = {"threads": threads, "n_gpu_layers": layers, "n_batch": n_batch, "n_ubatch": n_ubatch,
                    "flash_attn": "auto", "repack": repack, "depth": depth}
        argv = bench_tg_argv(
            found[0], str(models.resolve(self.arm.model)), request.max_tokens, threads, n_gpu_layers=layers,
            depth=depth, n_batch=n_batch, n_ubatch=n_ubatch, flash_attn="auto", repack=repack,
            repetitions=REFERENCE_REPETITIONS,
        )
        row = run_bench_tg(argv)
        out: dict[str, Any] = {
            "tool": "llama-bench tg", "tok_per_s": float(row["avg_ts"]), "counts": "decodes",
            "n_tokens": request.max_tokens, "command": shlex.join(argv), "settings": settings,
            "samples_tok_per_s": row.get("samples_ts"), "build": row.get("build_number"),
        }
        if opts.get("batch_invariant"):
            out["note"] = "the arm pads every lone token to two rows (batch_invariant): not the engine's own decode"
        return out

    # -- verify cost (lab probe) ----------------------------------------------
    # decode: each width's passes back to back; decode-interleaved: widths
    # alternating pass by pass (see lab_llamacpp.probe for why it differs on a GPU)
    probe_methods = ("decode", "decode-interleaved", "batched-bench")
    # The prefix decoded before the timed passes is the depth; llama-batched-bench
    # shares one prompt among its sequences, a depth it would multiply by the width.
    probe_depth_methods = ("decode", "decode-interleaved")

    def probe_needs_load(self, method: str) -> bool:
        return method.startswith("decode")

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        return self._verify_cost(widths, method, None)

    def measure_verify_cost_at_depth(self, widths: Sequence[int], depth: int, method: str | None = None) -> list[float]:
        method = method or self.probe_methods[0]
        if method not in self.probe_depth_methods:
            raise ValueError(f"probe method {method!r} cannot place a KV depth; use {', '.join(self.probe_depth_methods)}")
        return self._verify_cost(widths, method, depth)

    def _verify_cost(self, widths: Sequence[int], method: str | None, depth: int | None) -> list[float]:
        from lab_llamacpp import probe

        method = method or self.probe_methods[0]
        if method in ("decode", "decode-interleaved"):
            if self.context is None:
                raise RuntimeError("load() the backend before measuring by decode")
            order = "interleaved" if method == "decode-interleaved" else "consecutive"
            depth = probe.PREFIX_TOKENS if depth is None else depth
            self._probe_notes = {
                "prefix_tokens": depth, "inner_passes": probe.BLOCK_PASSES,
                "threads": self.ctx.run.threads or available_cores(), "order": order,
                "n_gpu_layers": int(self.arm.options.get("n_gpu_layers", 0)), "gpu_pick": self.gpu_pick_verifies,
                "one_row_pick": "device" if self.gpu_pick_one_row else "host",
            }
            if not self.gpu_pick_verifies:
                seconds = probe.decode_pass_seconds(self.context, widths, order=order, depth=depth)
                self._switches(widths, depth, order)
                self._cells(widths, depth, order)
                return seconds
            from lab_llamacpp.gpu_pick import backend_greedy, host_greedy

            # wider passes pick in the graph as the loop's verifies do; T(1) is
            # a baseline token, decoded as the baseline decodes it
            by_width: dict[int, float] = {}
            one = [w for w in widths if w == 1 and not self.gpu_pick_one_row]
            if one:
                host_greedy(self.context)
                by_width[1] = probe.decode_pass_seconds(self.context, one, order=order, depth=depth)[0]
            rest = [w for w in widths if w not in by_width]
            if rest:
                backend_greedy(self.context)
                by_width.update(zip(rest, probe.decode_pass_seconds(self.context, rest, order=order, depth=depth)))
            # a drafting arm picks every pass, plain decodes too, with the backend chain
            backend_greedy(self.context)
            self._switches(widths, depth, order)
            self._cells(widths, depth, order, one_row_on_host=bool(one))
            return [by_width[w] for w in widths]
        if method == "batched-bench":
            if self.arm.model is None:
                raise ValueError("the probe needs a model")
            threads = self.ctx.run.threads or available_cores()
            seconds, notes = probe.batched_bench_seconds(str(models.resolve(self.arm.model)), widths, threads)
            self._probe_notes = {**notes, "threads": threads}
            return seconds
        raise ValueError(f"unknown probe method {method!r}; use {', '.join(self.probe_methods)}")

    def _switches(self, widths: Sequence[int], depth: int, order: str) -> None:
        """On a GPU, the passes that change width as a drafting arm runs
        them (``lab_llamacpp.probe.switch_pass_seconds``); nothing on the CPU."""
        from lab_llamacpp import probe

        if order != "consecutive" or not int(self.arm.options.get("n_gpu_layers", 0)) or max(widths) < 2:
            return
        assert self.context is not None
        # timed once per depth and widths: the driver calls again each cycle
        key = ("switch_s", depth, tuple(sorted(widths)))
        if key not in self._probe_tables:
            self._probe_tables[key] = probe.switch_pass_seconds(self.context, sorted(widths), depth=depth)
        self._probe_notes["switch_s"] = self._probe_tables[key]

    def _cells(self, widths: Sequence[int], depth: int, order: str, one_row_on_host: bool = False) -> None:
        """On a GPU, each width's passes as a run's cell decodes them
        (``lab_llamacpp.probe.cell_pass_seconds``); nothing on the CPU."""
        from lab_llamacpp import probe

        if order != "consecutive" or not int(self.arm.options.get("n_gpu_layers", 0)):
            return
        assert self.context is not None
        key = ("cell_s", depth, tuple(sorted(widths)))
        if key in self._probe_tables:
            self._probe_notes["cell_s"] = self._probe_tables[key]
            return
        widths = sorted(widths)
        got: dict[str, list[float]] = {}
        if one_row_on_host and 1 in widths:
            from lab_llamacpp.gpu_pick import backend_greedy, host_greedy

            host_greedy(self.context)
            got.update(probe.cell_pass_seconds(self.context, [1], depth=depth))
            backend_greedy(self.context)
        got.update(probe.cell_pass_seconds(self.context, [w for w in widths if str(w) not in got], depth=depth))
        self._probe_notes["cell_s"] = self._probe_tables[key] = {"passes": probe.CELL_PASSES, "widths": got}

    def probe_notes(self) -> dict[str, Any]:
        return dict(self._probe_notes)
