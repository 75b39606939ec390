"""The ``vllm`` backend: a vLLM OpenAI-compatible server runs the target and
its speculative loop (ngram, draft model, EAGLE, MTP, ... through
``speculative_config``); the lab streams tokens over the OpenAI API and reads
steps from the server's own per-request record, checked against its
Prometheus counters.

Started through :mod:`lab.kit.server` with the engine in the server process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so its pid is the whole engine), or
attached by URL."""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from lab.api import (
    BackendContext,
    EngineCommand,
    EngineCrashed,
    EngineFailure,
    EngineOOM,
    Generation,
    GenerationRequest,
    MissingEngine,
    with_defaults,
)
from lab.base.events import Clock, Emit, Status, StatusChanged, StepClocks, StepEvent, TokenEvent, arm_cell, now
from lab.base.textsafe import clipped
from lab.kit.prompting import ids_report
from lab.kit.server import attach
from lab.kit.server.attach import ATTACH_OPTIONS
from lab.kit.server.client import HttpFailure, ServerClient, raise_for_status
from lab.kit.server.concurrency import CONCURRENCY_OPTIONS, StreamRecord, end_side_streams, stream_summary
from lab.kit.server.lifecycle import ServerBackend, poll_ready
from lab.kit.server.process import ServerProcess, free_port
from lab.kit.server.sse import STREAM_OPTIONS, parse_sse_lines
from lab_vllm import metrics
from lab_vllm.command import NEEDS_DRAFT_MODEL, OPTIONS, server_args
from lab_vllm.steptiming import time_steps
from lab_vllm.stream import VllmChunk, VllmStreamed, VllmStreamError, check_claims, consume, token_id

if TYPE_CHECKING:
    from lab.base.footprint import MemoryNeeds
    from lab.base.profile import Arm, RunSettings

STACK = "vllm"
# prompt_template of a vLLM row: who rendered the prompt whose token ids it hashed
# (lab.kit.prompting.ids_report); the lab's own text goes to no vLLM arm
SERVER_TEMPLATE_IDS = "vllm-server (ids)"
RAW_TEXT_IDS = "off (vllm ids)"
# speculative_config methods whose state outlives a request
STATEFUL_METHODS = frozenset({"suffix"})
# /v1/models lists a few models; /metrics, histograms included, is some hundred KB
MAX_MODELS_BYTES = 1 << 20
MAX_METRICS_BYTES = 8 << 20
_OOM_MARKS = ("out of memory", "outofmemoryerror", "cannot allocate memory", "insufficient memory",
              "no available memory for the cache blocks")


def _is_oom(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _OOM_MARKS)


class VllmBackend(ServerBackend[ServerClient]):
    name = "vllm"
    stack = STACK
    description = "a vLLM server (speculative_config: ngram, draft_model, eagle, mtp, ...); counts from its own counters"
    options: ClassVar = (*OPTIONS, *ATTACH_OPTIONS, *CONCURRENCY_OPTIONS, *STREAM_OPTIONS)

    @classmethod
    def is_speculative(cls, arm_options: Mapping[str, Any], drafter: str | None) -> bool:
        return str(arm_options.get("spec_method") or "none") != "none"

    @classmethod
    def missing_engine(cls, arm_options: Mapping[str, Any]) -> MissingEngine | None:
        import importlib.util

        if arm_options.get("url") or arm_options.get("python"):
            return None  # an attached server, or vLLM in an interpreter of the user's choosing
        # only looked up: importing vLLM takes tens of seconds (`lab doctor` imports it)
        if importlib.util.find_spec("vllm") is None:
            return MissingEngine("vllm", "vllm is not installed", "bash scripts/setup.sh llamacpp,vllm")
        return None

    @classmethod
    def sets_acceptance(cls, arm_options: Mapping[str, Any]) -> bool:
        # the synthetic rejection sampler is a setting of a server the lab starts
        return not arm_options.get("url")

    @classmethod
    def refuse_options(cls, arm_options: Mapping[str, Any]) -> tuple[str, str] | None:
        return attach.refuse_key(arm_options)

    @classmethod
    def engine_command(cls, arm: Arm, run: RunSettings) -> EngineCommand | None:
        """``vllm serve`` with the arm's engine arguments (:mod:`lab_vllm.engine_line`)."""
        from lab_vllm.engine_line import serve_command

        return serve_command(arm, run, with_defaults(cls.options, arm.options))

    @classmethod
    def memory_needs(cls, arm: Arm, run: RunSettings) -> MemoryNeeds | None:
        """vLLM takes gpu_memory_utilization of the card whatever the model
        (its weights, activations and a KV pool it sizes to fill the rest);
        on a CPU its KV pool is VLLM_CPU_KVCACHE_SPACE GiB where set."""
        from lab.base.footprint import VLLM, MemoryNeeds, ModelLoad

        if arm.options.get("url") or arm.model is None:
            return None
        loads = [ModelLoad("target", arm.model, int(arm.options.get("max_model_len") or run.n_ctx))]
        if arm.options.get("draft_model"):
            loads.append(ModelLoad("draft", str(arm.options["draft_model"]), run.n_ctx))
        space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        pool = int(float(space) * (1 << 30)) if space.replace(".", "", 1).isdigit() else None
        # the vLLM server's process (torch and vLLM imported) and the lab's, before any model: measured on a CPU
        return MemoryNeeds(VLLM, tuple(loads), accelerated=True, process_bytes=700 << 20,
                           budget_share=float(arm.options.get("gpu_memory_utilization") or 0.3), kv_pool_bytes=pool)

    def __init__(self, arm: Arm, ctx: BackendContext) -> None:
        super().__init__(arm, ctx)
        self.served_name = arm.name
        self.model_dir: str | None = None
        self.concurrency = int(arm.options.get("concurrency") or 1)
        # how the last request's steps were timed (lab_vllm.steptiming)
        self._step_timing: list[str] = []
        self._totals: dict[str, float] = {}
        self._draft_dir: str | None = None

    @property
    def speculative(self) -> bool:
        return self.is_speculative(self.arm.options, None)

    def opt(self, key: str) -> Any:
        return self.arm.options.get(key)

    # -- life cycle ---------------------------------------------------------------
    def load(self, emit: Emit) -> None:
        cell = arm_cell(self.arm.name)
        if self.opt("url"):
            self._attach(emit)
            return
        python = self.opt("python") or sys.executable
        if self.arm.model is None:
            raise EngineFailure(f"arm {self.arm.name}: vllm needs model = ...")
        from lab_vllm.models import hf_dir

        emit(StatusChanged(cell, Status.LOADING, phase="preparing the Hugging Face model directory"))
        try:
            self.model_dir = str(hf_dir(self.arm.model, python))
            method = str(self.opt("spec_method") or "none")
            draft_ref = self.opt("draft_model")
            if method in NEEDS_DRAFT_MODEL and not draft_ref:
                raise EngineFailure(f"arm {self.arm.name}: spec_method {method} needs draft_model = ...")
            draft_dir = str(hf_dir(draft_ref, python)) if draft_ref else None
        except RuntimeError as exc:
            raise EngineFailure(str(exc)) from exc
        self._draft_dir = draft_dir
        self._start(emit, python)

    def _start(self, emit: Emit, python: str) -> None:
        """Start the arm's server and wait until it lists its model."""
        assert self.model_dir is not None
        draft_dir = self._draft_dir
        port = free_port()
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", *server_args(
            self.arm.options, model_dir=self.model_dir, served_name=self.served_name, port=port,
            n_max=self.arm.n_max, draft_path=draft_dir, n_ctx=self.ctx.run.n_ctx, concurrency=self.concurrency,
            set_rates=self.arm.set_rates,
        )]
        log_dir = self.ctx.run_dir or os.path.join(os.getcwd(), "runs", "_server-logs")
        log_path = os.path.join(log_dir, f"vllm-{self.arm.name}.log")
        env = {
            # the engine inside the server process: one pid holds it all
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # POST /reset_prefix_cache, which cold rounds call, is a dev-mode
            # route; the server listens on loopback only
            "VLLM_SERVER_DEV_MODE": "1",
        }
        if self.ctx.run.threads:
            env["OMP_NUM_THREADS"] = str(self.ctx.run.threads)
        server = ServerProcess(argv, log_path, env=env, watch_group=True)
        timeout = float(self.opt("health_timeout_s") or 1200.0)
        if not self.launch(server, ServerClient(f"http://127.0.0.1:{port}"), emit, what="vLLM", port=port,
                           ready=self._models_listed, timeout=timeout, interval=0.5, not_ready="vLLM not ready"):
            server.wait_log_quiet(0.5)
            excerpt = server.excerpt(40)
            message = f"vLLM exited while loading (code {server.returncode()})"
            if _is_oom(excerpt):
                raise EngineOOM(message + ": out of memory", excerpt)
            raise EngineFailure(message, excerpt)
        self._totals = self._metrics()

    @classmethod
    def round_state(cls, arm_options: Mapping[str, Any]) -> str:
        if arm_options.get("url"):
            return "none"  # not the lab's server: the drift guard watches it
        # only suffix decoding keeps state across requests that no route clears
        if str(arm_options.get("spec_method") or "none") in STATEFUL_METHODS:
            return "restart"
        return "reset"

    def reset_round(self, emit: Emit) -> None:
        if self.server is None or self._client is None:
            return
        if type(self).round_state(self.arm.options) == "restart":
            python = str(self.server.argv[0])
            self.close()
            self._start(emit, python)
            return
        r = self._client.post("/reset_prefix_cache", json={})
        raise_for_status(r)
        try:
            body = r.json()
        except (ValueError, RecursionError):
            body = None
        if not (isinstance(body, dict) and body.get("success")):
            raise EngineFailure(f"vLLM did not reset its prefix cache: {r.text[:200]}")

    def _models_listed(self) -> bool:
        """Whether the server lists its model (its name becomes the one
        requests use). vLLM's /health answers 200 with an empty body; the
        model list says the engine is up."""
        import httpx

        assert self._client is not None
        try:
            r = self._client.get("/v1/models", timeout=2.0, max_bytes=MAX_MODELS_BYTES)
            data = r.json().get("data") if r.status_code == 200 else None
            if data and isinstance(data, list):
                self.served_name = str(data[0].get("id") or self.served_name)
                return True
        except (httpx.HTTPError, ValueError, AttributeError, RecursionError):
            pass
        return False

    def _attach(self, emit: Emit) -> None:
        where = self.attach_target()
        self._client = ServerClient(where.base_url, where.headers)
        emit(StatusChanged(arm_cell(self.arm.name), Status.LOADING, phase=f"attaching to {where.base_url}"))
        timeout = float(self.opt("health_timeout_s") or 60.0)
        try:
            poll_ready(self._models_listed, lambda: True, timeout, 0.5, f"{where.base_url} not ready")
        except TimeoutError as exc:
            raise EngineFailure(str(exc)) from exc
        try:
            kind, _ = attach.detect(self._client)
        except attach.AttachError as exc:
            raise EngineFailure(f"arm {self.arm.name}: {exc}") from exc
        if kind != attach.VLLM:
            raise EngineFailure(f"arm {self.arm.name}: the server at {where.base_url} is {kind}, not vLLM; "
                                "use the backend that reads it (llamacpp-server for a llama-server)")
        self._totals = self._metrics()

    def _metrics(self) -> dict[str, float]:
        import httpx

        assert self._client is not None
        try:
            r = self._client.get("/metrics", max_bytes=MAX_METRICS_BYTES)
            return metrics.parse_metrics(r.text) if r.status_code == 200 else {}
        except httpx.HTTPError:
            return {}

    # -- generation ---------------------------------------------------------------
    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The prompt as ids, rendered by the server's own chat template
        (/tokenize with messages) when the run applies one."""
        assert self._client is not None
        body: dict[str, Any] = {"model": self.served_name}
        if request.chat_template:
            messages = ([{"role": "system", "content": request.system}] if request.system else [])
            messages.append({"role": "user", "content": request.prompt})
            body.update(messages=messages, add_generation_prompt=True)
        else:
            body["prompt"] = request.prompt
        r = self._client.post("/tokenize", json=body)
        raise_for_status(r)
        tokens = r.json()["tokens"]
        if not isinstance(tokens, list):
            raise VllmStreamError(f"/tokenize answered tokens = {clipped(tokens, 40)}, not a list")
        return [token_id(x) for x in tokens]

    @staticmethod
    def prompt_keys(prompt_ids: list[int], request: GenerationRequest) -> dict[str, str]:
        """The row's prompt keys: the hash of the ids the server made and
        gets, rendered by its own chat template (or its tokenizer alone on
        the text as written)."""
        return ids_report(prompt_ids, SERVER_TEMPLATE_IDS if request.chat_template else RAW_TEXT_IDS)

    def _failed(self, exc: BaseException) -> EngineFailure:
        message = f"{type(exc).__name__}: {exc}"
        if self.server is None:
            return EngineFailure(f"{self.attached}: {message}")
        self.server.wait_log_quiet(0.5)
        if not self.server.alive():
            return EngineCrashed(f"vLLM exited (code {self.server.returncode()}): {message}", self.server.excerpt(40))
        if _is_oom(message) or _is_oom(self.server.excerpt(30)):
            return EngineOOM(f"out of memory: {message}", self.server.excerpt(30))
        return EngineFailure(message, self.server.excerpt(30))

    def _stream(self, client: ServerClient, body: dict[str, Any], on_chunk: Callable[[VllmChunk], None],
                cancelled: Callable[[], bool], deadline: float | None = None) -> VllmStreamed:
        """One stream, ended at the chunk past max_tokens, its figures checked."""
        t_sent = now()
        limit = int(body["max_tokens"]) + self.max_overshoot_tokens
        with client.completion(body, path="/v1/completions", deadline=deadline, stop=cancelled) as lines:
            streamed = consume(parse_sse_lines(lines), t_sent, on_chunk, cancelled, limit=limit)
        check_claims(streamed, len(body["prompt"]), limit)
        return streamed

    def generate(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool]) -> Generation:
        import httpx

        client = self._client
        assert client is not None, "generate() before load()"
        if self.server is not None and not self.server.alive():
            raise self._failed(RuntimeError("vLLM is not running"))
        try:
            prompt_ids = self._prompt_ids(request)
        except (httpx.HTTPError, HttpFailure, KeyError, ValueError, TypeError, RecursionError, VllmStreamError) as exc:
            raise self._failed(exc) from exc
        body: dict[str, Any] = {
            "model": self.served_name, "prompt": prompt_ids, "max_tokens": request.max_tokens,
            "temperature": request.temperature, "seed": request.seed, "ignore_eos": request.ignore_eos,
            "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
        }
        n = max(self.concurrency, 1)
        # concurrent streams share the cell's deadline, as the llama-server stack's do
        deadline = now() + float(self.opt("concurrency_timeout_s") or 600.0) if n > 1 else None
        side = [StreamRecord() for _ in range(n - 1)]
        start = threading.Barrier(n)
        stop = threading.Event()
        threads = [threading.Thread(target=self._side, args=(body, rec, start, stop, deadline), daemon=True,
                                    name=f"vllm-load-{i + 1}") for i, rec in enumerate(side)]
        before = self._metrics()
        for t in threads:
            t.start()
        lead = StreamRecord()
        chunks_seen = [0]

        def on_chunk(chunk: VllmChunk) -> None:
            lead.arrivals.append((chunk.t, len(chunk.ids)))
            k = len(chunk.ids)
            # a verify step's chunk: its drafted tokens first, then the target's own
            first = chunks_seen[0] == 0
            chunks_seen[0] += 1
            drafted = self.speculative and not first and k > 1
            if drafted:
                emit(TokenEvent(request.cell, "", tuple(chunk.ids[:-1]), from_draft=True, t=chunk.t))
                emit(TokenEvent(request.cell, chunk.text, (chunk.ids[-1],), from_draft=False, t=chunk.t))
            else:
                emit(TokenEvent(request.cell, chunk.text, tuple(chunk.ids), from_draft=False, t=chunk.t))

        try:
            if n > 1:
                start.wait(timeout=60)
            lead.t_sent = now()
            streamed = self._stream(client, body, on_chunk, cancelled, deadline)
            for t in threads:
                t.join(timeout=max(deadline - now(), 0.0) if deadline is not None else None)
        except (httpx.HTTPError, HttpFailure, VllmStreamError, threading.BrokenBarrierError) as exc:
            raise self._failed(exc) from exc
        finally:
            end_side_streams(stop, start, threads)
        after = self._metrics()
        steps = self._steps(request, streamed, emit)
        gen = self._generation(streamed, steps, lead, side, before, after)
        gen.engine_report.update(self.prompt_keys(prompt_ids, request))
        return gen

    def _side(self, body: dict[str, Any], record: StreamRecord, start: threading.Barrier, stop: threading.Event,
              deadline: float | None) -> None:
        import httpx

        assert self._client is not None
        client = ServerClient(self._client.base_url, self._client.headers)
        client.first_event_s, client.idle_s = self._client.first_event_s, self._client.idle_s
        try:
            start.wait(timeout=60)
            record.t_sent = now()
            streamed = self._stream(client, body, lambda c: record.arrivals.append((c.t, len(c.ids))), stop.is_set,
                                    deadline)
            steps = streamed.per_step()
            record.final = {"timings": {"draft_n": sum(d for d, _ in steps), "draft_n_accepted": sum(a for _, a in steps)},
                            "steps": steps}
        except (httpx.HTTPError, HttpFailure, VllmStreamError, threading.BrokenBarrierError, RuntimeError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()

    def _steps(self, request: GenerationRequest, streamed: VllmStreamed, emit: Emit) -> list[StepEvent]:
        """The request's steps from the server's per-step record, each timed
        by the chunk that carried it (:mod:`lab_vllm.steptiming`)."""
        per_step = streamed.per_step()
        timed = time_steps([(c.t, len(c.ids)) for c in streamed.chunks], per_step)
        out: list[StepEvent] = []
        for k, ((drafted, accepted), t) in enumerate(zip(per_step, timed)):
            event = StepEvent(request.cell, k, int(drafted), int(accepted), t.landed, None, None, t.step_s,
                              clocks=StepClocks(draft=Clock.NONE, verify=Clock.NONE, step=Clock.CLIENT))
            out.append(event)
            emit(event)
        self._step_timing = sorted({t.how for t in timed})
        return out

    def _generation(self, streamed: VllmStreamed, steps: list[StepEvent], lead: StreamRecord,
                    side: list[StreamRecord], before: dict[str, float], after: dict[str, float]) -> Generation:
        ids = streamed.ids
        n = len(ids)
        first_t = streamed.chunks[0].t if streamed.chunks else streamed.t_sent
        last_t = streamed.chunks[-1].t if streamed.chunks else streamed.t_sent
        # the lab's arrival clock, scaled from the n-1 tokens after the first to n
        phase = last_t - first_t
        gen_s = phase * n / (n - 1) if n > 1 else phase
        gen = Generation(text=streamed.text, ids=ids, prompt_tokens=int(streamed.usage.get("prompt_tokens") or 0),
                         prompt_s=first_t - streamed.t_sent, gen_s=gen_s)
        report = gen.engine_report
        report["server_kind"] = "vllm"
        report["attached"] = self.attached
        report["usage"] = streamed.usage
        report["request_metrics"] = streamed.metrics
        report["steps_source"] = "vllm per-request spec decode metrics (detailed)"
        report["step_timing"] = list(self._step_timing)
        d = metrics.delta(before, after) if before or after else {}
        report["metrics_delta"] = {k: v for k, v in d.items() if not k.startswith(metrics.PER_POS)}
        report["metrics_accepted_per_pos"] = metrics.per_position(d)
        records = [lead, *side]
        lead.final = {"timings": {"draft_n": sum(s.drafted for s in steps),
                                  "draft_n_accepted": sum(s.accepted for s in steps)}}
        checks: dict[str, bool] = {}
        missing: list[str] = []
        if streamed.usage.get("completion_tokens") is None:
            missing.append("usage.completion_tokens (the server's token count)")
        else:
            checks["tokens_vs_usage"] = n == int(streamed.usage["completion_tokens"])
        if self.speculative:
            all_steps = [(s.drafted, s.accepted) for s in steps]
            for rec in side:
                all_steps += list(rec.final.get("steps") or [])
            spec = streamed.spec
            checks["steps_vs_request_summary"] = (
                sum(s.drafted for s in steps) == spec.get("num_draft_tokens")
                and sum(s.accepted for s in steps) == spec.get("num_accepted_draft_tokens")
            )
            if d:
                checks["steps_vs_metrics"] = (
                    sum(x for x, _ in all_steps) == int(d.get(metrics.DRAFT_TOKENS, -1))
                    and sum(a for _, a in all_steps) == int(d.get(metrics.ACCEPTED, -1))
                    and len(all_steps) == int(d.get(metrics.DRAFTS, -1))
                )
                pos = report["metrics_accepted_per_pos"]
                if pos:
                    checks["per_position_vs_metrics"] = [sum(1 for _, a in all_steps if a > i) for i in range(len(pos))] == pos
        report["checks"] = checks
        report["checks_missing"] = missing
        report["counts_match_server"] = all(checks.values()) if checks else None
        if "concurrency" in self.arm.options:
            report["concurrency"] = stream_summary(records)
        if checks and not all(checks.values()):
            self.ctx.log(f"{self.arm.name}: count cross-check failed: {checks}")
        return gen

    def report(self) -> dict[str, Any]:
        return {
            "argv": self.server.argv if self.server else None,
            "log": self.server.log_path if self.server else None,
            "model_dir": self.model_dir,
            "attached": self.attached,
            "process": "attached: not started, restarted or stopped by the lab" if self.attached
            else "started by the lab for this arm",
            "metrics_at_load": self._totals,
            "concurrency": self.concurrency,
        }
