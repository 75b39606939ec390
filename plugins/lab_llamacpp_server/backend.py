"""llama-server backends: the server runs the speculative loop, the lab
reads per-step truth from its log, stream and /metrics. ``llamacpp-mtp`` and
``llamacpp-dflash`` fix the spec type of ``llamacpp-server``; all three share
one stack, so each compares against a server baseline of the same model."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from lab.api import (
    BackendContext,
    EngineCommand,
    EngineFailure,
    Generation,
    GenerationRequest,
    MissingEngine,
    Option,
    Probing,
    Referencing,
)
from lab.base.events import Emit, Status, StatusChanged, TokenEvent, arm_cell, now
from lab.base.set_acceptance import draw_seed
from lab.kit import models
from lab.kit.llama_tools import build_command
from lab.kit.prompting import OFF, RenderedPrompt, render_prompt
from lab.kit.server import attach
from lab.kit.server.attach import ATTACH_OPTIONS
from lab.kit.server.client import HttpFailure, raise_for_status
from lab.kit.server.concurrency import CONCURRENCY_OPTIONS, StreamRecord, stream_summary
from lab.kit.server.lifecycle import ServerBackend
from lab.kit.server.process import ServerProcess, free_port
from lab.kit.server.sse import STREAM_OPTIONS, parse_sse_lines
from lab_llamacpp_server import crosscheck, failures
from lab_llamacpp_server.binary import ServerInfo, ServerNotFound, locate, server_info
from lab_llamacpp_server.client import LlamaServerClient
from lab_llamacpp_server.command import (
    COMMON_OPTIONS,
    NEEDS_DRAFT_MODEL,
    STATEFUL_SPEC_TYPES,
    refuse_options,
    server_args,
    warn_options,
)
from lab_llamacpp_server.concurrency import generate_streamed
from lab_llamacpp_server.logparse import ImplStats
from lab_llamacpp_server.metrics import device_bytes
from lab_llamacpp_server.serverlog import RequestLog, ServerLog
from lab_llamacpp_server.steps import LiveSteps
from lab_llamacpp_server.stream import Chunk, StepTracker, StreamError, consume, generation

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings

STACK = "llamacpp-server"
# prompt_template of an attached server's rows when its model file is not here
SERVER_TEMPLATE = "server"
# The most a request's log may lag behind its final chunk: a limit for a
# server that stopped logging, not a wait (the wait ends at the release line).
LOG_WAIT_S = 60.0
# bare requests of a reference ([run] reference); it is their median
REFERENCE_REQUESTS = 3


class LlamaServerBackend(ServerBackend[LlamaServerClient], Probing, Referencing):
    name = "llamacpp-server"
    stack = STACK
    description = "llama-server with any --spec-type it accepts; per-step truth from its log, stream and /metrics"
    options: ClassVar[tuple[Option, ...]] = (
        Option("spec_type", str, "none", "--spec-type: none, draft-simple, draft-mtp, draft-dflash, ngram-mod, ...",
               requires=tuple((t, ("draft_model",)) for t in sorted(NEEDS_DRAFT_MODEL))),
        Option("draft_model", str, None, "-md: draft model (path, embedded:... or tiny:...)", model_ref=True),
        *COMMON_OPTIONS,
        *ATTACH_OPTIONS,
        *CONCURRENCY_OPTIONS,
        *STREAM_OPTIONS,
    )
    fixed_spec_type: ClassVar[str | None] = None
    # The server is another process, but on the same cores.
    gpu_layers_option = "n_gpu_layers"
    # whole steps through the server itself (lab_llamacpp_server.probe)
    probe_methods: ClassVar[tuple[str, ...]] = ("server-steps",)
    # its figures are whole requests' steps: a run's probe sends requests of the run's length
    probe_times_requests: ClassVar[bool] = True

    @classmethod
    def refuse_options(cls, arm_options: Mapping[str, Any]) -> tuple[str, str] | None:
        return refuse_options(arm_options) or attach.refuse_key(arm_options)

    @classmethod
    def warn_options(cls, arm_options: Mapping[str, Any]) -> list[str]:
        return warn_options(arm_options)

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        if arm_options.get("url"):
            return None  # an attached server is already running
        try:
            locate(arm_options.get("server"))
        except ServerNotFound as exc:
            return MissingEngine("llama-server", str(exc).split(": run `")[0], build_command())
        return None

    @classmethod
    def needs_model(cls, arm_options: Mapping[str, Any]) -> bool:
        """lab check refuses an arm without a model, unless it attaches to a
        running server by URL (that server brings its own)."""
        return not arm_options.get("url")

    @classmethod
    def spec_type_of(cls, arm_options: Mapping[str, Any]) -> str:
        if cls.fixed_spec_type is not None:
            return cls.fixed_spec_type
        return str(arm_options.get("spec_type") or "none")

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return cls.spec_type_of(arm_options) != "none"

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        # --spec-synth-rates is a flag of a server the lab starts
        return not arm_options.get("url")

    @classmethod
    def probe_refusal(cls, arm_options: Mapping[str, Any]) -> str | None:
        from lab_llamacpp_server.probe import refusal

        return refusal(cls.spec_type_of(arm_options), arm_options)

    @classmethod
    def reference_tool(cls, arm_options: Mapping[str, Any]) -> str | None:
        return "bare /completion"

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """llama-server's command line for the arm: :mod:`.engine_line`."""
        from lab_llamacpp_server.engine_line import server_command

        return server_command(arm, run, cls.spec_type_of(arm.options))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """The server the lab starts for this arm (an attached one is not
        estimated): see :mod:`lab_llamacpp_server.memory`."""
        from lab_llamacpp_server.memory import server_memory_needs

        if arm.options.get("url") or arm.model is None:
            return None
        spec = cls.spec_type_of(arm.options)
        ref = arm.options.get("draft_model") or arm.options.get("mtp_model")
        draft = str(ref) if ref and (spec in NEEDS_DRAFT_MODEL or spec == "draft-mtp") else None
        return server_memory_needs(arm.options, spec, arm.n_max, run, arm.model, draft,
                                   embedded_mtp=spec == "draft-mtp" and draft is None)

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self._probe_notes: dict[str, Any] = {}
        self.info: ServerInfo | None = None
        self.port = 0
        self.base_url = ""
        self.spec_type = self.spec_type_of(arm.options)
        # the model file the prompt's template comes from, and the last prompt sent
        self.model_path = ""
        self.rendered = RenderedPrompt("", OFF)
        self.server_log = ServerLog()
        # the server's cumulative per-implementation counters after the last request
        self._stats_last: dict[str, ImplStats] = {}
        self._totals: dict[str, float] = {}
        # an attached server (its base URL: self.attached): its kind and what it said about itself
        self.server_kind: str | None = None
        self.server_props: dict[str, Any] = {}
        self.concurrency = int(arm.options.get("concurrency") or 1)
        self._draft_path: str | None = None

    @property
    def speculative(self) -> bool:
        return self.spec_type != "none"

    # -- options ------------------------------------------------------------------
    def opt(self, key: str) -> Any:
        return self.arm.options.get(key)

    def draft_model_ref(self) -> str | None:
        return self.opt("draft_model")

    def server_args(self, model_path: str, draft_path: str | None) -> list[str]:
        """The server's command line after the binary (see :mod:`.command`)."""
        run = self.ctx.run
        options = dict(self.arm.options)
        if self.concurrency > 1:
            # a slot per stream, each with the context one stream would get
            options["parallel"] = max(int(options.get("parallel") or 1), self.concurrency)
            options["ctx_size"] = int(options.get("ctx_size") or run.n_ctx) * options["parallel"]
        return server_args(
            options, self.spec_type, self.arm.n_max, n_ctx=run.n_ctx, threads=run.threads,
            port=self.port, model_path=model_path, draft_path=draft_path, set_rates=self.arm.set_rates,
        )

    # -- life cycle ---------------------------------------------------------------
    def load(self, emit: Emit) -> None:
        cell = arm_cell(self.arm.name)
        if self.opt("url"):
            self._attach(emit)
            return
        emit(StatusChanged(cell, Status.LOADING, phase="locating llama-server"))
        try:
            self.info = server_info(self.opt("server"))
        except ServerNotFound as exc:
            raise EngineFailure(str(exc)) from exc
        if self.speculative and self.info.spec_types and self.spec_type not in self.info.spec_types:
            raise EngineFailure(
                f"llama-server {self.info.path} (b{self.info.build}) does not accept --spec-type {self.spec_type}; "
                f"it accepts: {', '.join(self.info.spec_types)}"
            )
        if self.arm.model is None:
            raise EngineFailure(f"arm {self.arm.name}: {self.name} needs model = ...")
        emit(StatusChanged(cell, Status.LOADING, phase="resolving models"))
        model_path = str(models.resolve(self.arm.model))
        self.model_path = model_path
        draft_ref = self.draft_model_ref()
        if self.spec_type in NEEDS_DRAFT_MODEL and draft_ref is None:
            raise EngineFailure(f"arm {self.arm.name}: --spec-type {self.spec_type} needs a draft model (draft_model = ...)")
        draft_path = str(models.resolve(draft_ref)) if draft_ref else None
        self._draft_path = draft_path
        if draft_path is not None and self.spec_type in ("draft-dflash", "draft-dspark") and self.arm.n_max:
            from lab_llamacpp_server.dflash_block import max_draft

            most, why = max_draft(draft_path, self.spec_type)
            if self.arm.n_max > most:
                # the server would clamp n_max (and refuse set rates past it): the row would not be the arm asked for
                raise EngineFailure(f"arm {self.arm.name}: n_max {self.arm.n_max} is more than this draft can "
                                    f"propose: {why}; set n_max <= {most}")
        self._start(emit, model_path, draft_path)

    def _start(self, emit: Emit, model_path: str, draft_path: str | None) -> None:
        """Start the arm's server and wait until it serves."""
        assert self.info is not None
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        argv = [self.info.path, *self.server_args(model_path, draft_path)]
        log_dir = self.ctx.run_dir or os.path.join(os.getcwd(), "runs", "_server-logs")
        log_path = os.path.join(log_dir, f"llama-server-{self.arm.name}.log")
        limit_mb = self.opt("memory_limit_mb")
        server = ServerProcess(
            argv, log_path, env={"LLAMA_TRACE": "1"}, on_line=self.server_log.on_line,
            address_space_limit=int(limit_mb) * 1024 * 1024 if limit_mb else None,
        )
        client = LlamaServerClient(self.base_url)
        given = self.opt("health_timeout_s")
        timeout = 300.0 if given is None else float(given)  # 0 is refused by the profile check, never "default"
        served = self.launch(server, client, emit, what="llama-server", port=self.port, ready=client.healthy,
                             timeout=timeout, interval=0.1, not_ready="llama-server not healthy")
        if not served:
            raise failures.exited_while_loading(server, self.server_log.load_oom)
        if self.speculative and self.server_log.spec_failed:
            raise EngineFailure(
                f"llama-server started without speculative decoding ({self.server_log.spec_failed[0].strip()})",
                server.excerpt(30),
            )
        self._totals = client.metrics()

    @classmethod
    def round_state(cls, arm_options: Mapping[str, Any]) -> str:
        # A server the lab did not start cannot be restarted: its state is
        # the drift guard's to catch.
        if arm_options.get("url"):
            return "none"
        # cache_prompt is off, so only the speculative tables carry over, and
        # no HTTP call (a slot erase included) reaches them.
        return "restart" if cls.spec_type_of(arm_options) in STATEFUL_SPEC_TYPES else "none"

    def reset_round(self, emit: Emit) -> None:
        if type(self).round_state(self.arm.options) != "restart" or self.server is None:
            return
        # the new server gets a new port and client; close() stops it as any
        self.close()
        self.server_log = ServerLog()
        self._stats_last = {}
        self._start(emit, self.model_path, self._draft_path)

    def _attach(self, emit: Emit) -> None:
        """Use the running server the arm names: the lab starts nothing,
        so it can neither restart nor stop it, and reads it over HTTP only."""
        cell = arm_cell(self.arm.name)
        where = self.attach_target()
        self.base_url = where.base_url
        client = self._client = LlamaServerClient(where.base_url, where.headers)
        emit(StatusChanged(cell, Status.LOADING, phase=f"attaching to {where.base_url}", progress=0.5))
        given = self.opt("health_timeout_s")
        try:
            client.wait_healthy(lambda: True, 300.0 if given is None else float(given), lambda: None)
        except TimeoutError as exc:
            raise EngineFailure(f"arm {self.arm.name}: no server ready at {where.base_url} ({exc})") from exc
        try:
            self.server_kind, self.server_props = attach.detect(client)
        except attach.AttachError as exc:
            raise EngineFailure(f"arm {self.arm.name}: {exc}") from exc
        if self.server_kind != attach.LLAMA_SERVER:
            raise EngineFailure(
                f"arm {self.arm.name}: the server at {where.base_url} is {self.server_kind}, not llama-server; "
                "use the backend that reads it (vllm for a vLLM server)"
            )
        self._totals = client.metrics()
        self.ctx.log(f"{self.arm.name}: attached to {self.server_kind} at {where.base_url} {self.server_props}")

    def engine_bytes(self) -> int | None:
        return self.server_log.engine_bytes or None

    # -- the probe: the server prices its own steps --------------------------------
    def probe_needs_load(self, method: str) -> bool:
        # it starts a server per width itself, each stopped before the next
        return False

    def measure_verify_cost(self, widths: Sequence[int], method: str | None = None) -> list[float]:
        """Width 1: the baseline server's seconds per token; width w: the
        arm's server's seconds per step at n_max = w - 1 and full set
        acceptance (see :mod:`lab_llamacpp_server.probe`)."""
        from lab_llamacpp_server import probe

        if (method or self.probe_methods[0]) not in self.probe_methods:
            raise ValueError(f"{self.name} measures by {', '.join(self.probe_methods)}, not {method!r}")
        seconds, self._probe_notes = probe.measure(type(self), LlamaServerBackend, self.arm, self.ctx, widths)
        return seconds

    def probe_notes(self) -> dict[str, Any]:
        return dict(self._probe_notes)

    # -- generation ---------------------------------------------------------------
    def _streamed(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        """A cell read from the stream alone: an attached server (no log of
        ours) or several streams at once (the log interleaves them)."""
        import httpx

        client = self._client
        assert client is not None, "generate() before load()"
        if self.server is not None and not self.server.alive():
            raise self._failed("llama-server is not running")
        try:
            prompt = self._prompt(request)
            timeout = self.opt("concurrency_timeout_s")
            gen = generate_streamed(
                client, self._body(prompt, request), request, emit, cancelled, speculative=self.speculative,
                concurrency=self.concurrency, timeout_s=600.0 if timeout is None else float(timeout),
                exclusive_metrics=self.attached is None,
            )
        except (httpx.HTTPError, HttpFailure, StreamError) as exc:
            if self.server is None:
                raise EngineFailure(f"{self.attached}: {type(exc).__name__}: {exc}") from exc
            raise self._failed(exc) from exc
        except EngineFailure as exc:
            if self.server is not None and not self.server.alive():
                raise self._failed(exc) from exc
            raise
        if self.server is not None:
            gen.engine_report["engine_buffers"] = dict(self.server_log.buffers)
            gen.engine_bytes = self.engine_bytes()
        gen.engine_report.update(self.rendered.report())
        gen.engine_report["attached"] = self.attached
        checks = gen.engine_report.get("checks") or {}
        if checks and not all(checks.values()):
            self.ctx.log(f"{self.arm.name} {request.cell}: count cross-check failed: {checks}")
        return gen

    @staticmethod
    def _body(prompt: str | list[int], request: GenerationRequest) -> dict[str, Any]:
        return {
            "prompt": prompt,
            "n_predict": request.max_tokens,
            "temperature": request.temperature,
            # the request's seed also seeds the server's set-acceptance draws: one sequence per cell
            "seed": request.seed if request.acceptance is None else draw_seed(request.seed, request.cell.prompt, request.cell.round),
            "ignore_eos": request.ignore_eos,
            "stream": True,
            "timings_per_token": True,
            "return_tokens": True,
            # every round processes its prompt: no reuse of the previous round's KV
            "cache_prompt": False,
        }

    def _running(self) -> tuple[ServerProcess, LlamaServerClient]:
        assert self.server is not None and self._client is not None, "generate() before load()"
        return self.server, self._client

    def _failed(self, exc: BaseException | str) -> EngineFailure:
        """The failure as a result status, with the log lines that show it."""
        import httpx

        if isinstance(exc, httpx.HTTPError):
            message = f"{type(exc).__name__}: {exc}"
        else:
            message = str(exc)
        server, _ = self._running()
        return failures.request_failed(message, server, self.server_log.oom_lines)

    def _prompt(self, request: GenerationRequest) -> list[int]:
        """The prompt's ids: the lab's rendered text (lab.kit.prompting),
        tokenized by the server with the in-process stack's flags; /completion
        takes ids as they are. ``self.rendered`` keeps the text for the row."""
        client = self._client
        assert client is not None, "generate() before load()"
        kwargs = self.opt("chat_template_kwargs")
        variables = json.loads(kwargs) if kwargs else None
        model_file = self.model_path
        if not model_file and self.arm.model:
            try:
                model_file = str(models.resolve(self.arm.model))
            except models.ModelNotFound:
                model_file = ""
        if model_file or not request.chat_template:
            self.rendered = render_prompt(model_file, request.prompt, request.system, request.chat_template, variables)
        else:
            # An attached server whose model file is not here: only its own
            # template can render; the row says so.
            messages = ([{"role": "system", "content": request.system}] if request.system else [])
            messages.append({"role": "user", "content": request.prompt})
            self.rendered = RenderedPrompt(client.apply_template(messages, kwargs), SERVER_TEMPLATE)
        return client.tokenize(self.rendered.text, self.rendered.add_special, self.rendered.parse_special)

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import httpx

        if self.attached is not None or self.concurrency > 1:
            return self._streamed(request, emit, cancelled)
        server, client = self._running()
        if not server.alive():
            raise self._failed("llama-server is not running")
        try:
            prompt = self._prompt(request)
        except (httpx.HTTPError, HttpFailure) as exc:
            raise self._failed(exc) from exc
        before = client.metrics()
        body = self._body(prompt, request)
        t_sent = now()
        live = LiveSteps(request.cell, emit, StepTracker(t_sent))
        req = self.server_log.begin(live.on_accepted)
        record = StreamRecord(t_sent)

        def landed(chunk: Chunk, ids: list[int], from_draft: bool) -> None:
            record.arrivals.append((chunk.t, chunk.n_tokens))
            emit(TokenEvent(request.cell, chunk.text, tuple(ids), from_draft=from_draft, t=chunk.t))
            # the chunk may complete a step whose log line is already in
            live.poll()

        try:
            with client.completion(body, stop=cancelled) as lines:
                streamed = consume(parse_sse_lines(lines), t_sent, live.feed, landed, cancelled,
                                   limit=request.max_tokens + self.max_overshoot_tokens)
            log_complete = self._await_request_log(server, req)
            steps = live.finish()
        except (httpx.HTTPError, HttpFailure, StreamError) as exc:
            live.abandon()
            raise self._failed(exc) from exc
        except BaseException:
            live.abandon()
            raise
        finally:
            self.server_log.end()
        after = client.metrics()

        gen = generation(streamed)
        draft_ms, draft_calls = crosscheck.draft_time(req.stats, self._stats_last)
        checks = crosscheck.fill_report(
            gen.engine_report, n_tokens=len(gen.ids), gen_s=gen.gen_s, speculative=self.speculative,
            steps=steps, tracker=live.tracker, logged_steps=len(live.logged.steps),
            metrics_before=before, metrics_after=after, acc_per_pos=req.acc_per_pos, summary=req.summary,
            draft_ms=draft_ms, draft_calls=draft_calls,
        )
        gen.engine_report["server_log_complete"] = log_complete
        if client.metrics_dropped:
            gen.engine_report["metrics_dropped"] = (
                f"/metrics counters that were no finite number, left out: {', '.join(client.metrics_dropped)}")
        gen.engine_report["engine_buffers"] = dict(self.server_log.buffers)
        gen.engine_report.update(self.rendered.report())
        gen.engine_bytes = self.engine_bytes()
        if "concurrency" in self.arm.options:
            # the one-stream level of a concurrency sweep, in the same figures as the others
            record.final = streamed.final
            gen.engine_report["concurrency"] = stream_summary([record])
        if server.pid is not None:
            gen.engine_report["device_bytes"] = device_bytes(server.pid)
        if checks and not all(checks.values()):
            self.ctx.log(f"{self.arm.name} {request.cell}: count cross-check failed: {checks}")
        return gen

    # -- the engine's own figure ([run] reference) ------------------------------
    def measure_reference(self, request: GenerationRequest, prompt_tokens: int | None) -> dict[str, Any]:
        """The server's own ``timings.predicted_per_second`` for plain
        /completion requests of the cell's prompt, median of a few."""
        client = self._client
        assert client is not None, "measure_reference() before load()"
        prompt = self._prompt(request)
        body: dict[str, Any] = {
            "prompt": prompt, "n_predict": request.max_tokens, "temperature": request.temperature,
            "seed": request.seed, "ignore_eos": request.ignore_eos, "stream": False, "cache_prompt": False,
        }
        rates: list[float] = []
        predicted_n: list[int] = []
        for _ in range(REFERENCE_REQUESTS):
            r = client.post("/completion", json=body)
            raise_for_status(r)
            timings = r.json().get("timings") or {}
            if "predicted_per_second" not in timings:
                raise EngineFailure(f"the server's answer has no timings.predicted_per_second: {sorted(timings)}")
            rates.append(float(timings["predicted_per_second"]))
            predicted_n.append(int(timings.get("predicted_n") or 0))
        shown = {**body, "prompt": f"<the cell's {len(prompt)} prompt ids>"}
        return {
            "tool": "bare /completion", "tok_per_s": sorted(rates)[len(rates) // 2], "counts": "tokens",
            "n_tokens": predicted_n[0] if len(set(predicted_n)) == 1 else predicted_n,
            "command": f"POST {self.base_url}/completion {json.dumps(shown)}",
            "settings": {"requests": REFERENCE_REQUESTS, "server_argv": self.server.argv if self.server else None,
                         "attached": self.attached, "prompt_tokens": len(prompt)},
            "samples_tok_per_s": rates,
        }

    def _await_request_log(self, server: ServerProcess, req: RequestLog) -> bool:
        """Wait (bounded) for this request's release line, the last it logs;
        False when it never came."""
        deadline = now() + LOG_WAIT_S
        while not req.released.is_set():
            if not server.alive() or now() >= deadline:
                return False
            req.released.wait(0.05)
        return True

    def report(self) -> dict[str, Any]:
        info = self.info
        return {
            "server": info.path if info else None,
            "server_build": info.build if info else None,
            "server_source": info.source if info else None,
            "spec_type": self.spec_type,
            "argv": self.server.argv if self.server else None,
            "log": self.server.log_path if self.server else None,
            "engine_buffers": dict(self.server_log.buffers),
            "metrics_at_load": self._totals,
            "attached": self.attached,
            "server_kind": self.server_kind or ("llama-server" if self.server else None),
            "server_props": self.server_props,
            "process": "attached: not started, restarted or stopped by the lab" if self.attached
            else "started by the lab for this arm",
            "concurrency": self.concurrency,
        }


class LlamaMtpBackend(LlamaServerBackend):
    name = "llamacpp-mtp"
    description = "llama-server --spec-type draft-mtp: MTP heads embedded in the target, or a separate mtp-*.gguf"
    fixed_spec_type = "draft-mtp"
    options = (
        Option("mtp_model", str, None, "separate MTP head GGUF (mtp-*.gguf), passed as -md; omit when the target embeds it",
               model_ref=True),
        *COMMON_OPTIONS,
        *ATTACH_OPTIONS,
        *CONCURRENCY_OPTIONS,
        *STREAM_OPTIONS,
    )

    def draft_model_ref(self) -> str | None:
        return self.opt("mtp_model")


class LlamaDFlashBackend(LlamaServerBackend):
    name = "llamacpp-dflash"
    description = "llama-server --spec-type draft-dflash with a DFlash draft GGUF (-md)"
    fixed_spec_type = "draft-dflash"
    options = (
        Option("draft_model", str, None, "-md: the DFlash draft GGUF", required=True, model_ref=True),
        *COMMON_OPTIONS,
        *ATTACH_OPTIONS,
        *CONCURRENCY_OPTIONS,
        *STREAM_OPTIONS,
    )
