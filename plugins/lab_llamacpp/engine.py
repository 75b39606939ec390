"""A thin layer over llama-cpp-python's low-level (ctypes) API: every decode
is one ``llama_decode`` on a batch filled in place; a ``batch_invariant``
context never decodes one row alone (docs/design-notes.md)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Collection, Sequence

import llama_cpp as ll
import numpy as np

from lab.base.machine import available_cores
from lab.kit.model_files import check_model

_init_lock = threading.Lock()
_initialized = False
_log_callback: Any = None
_row_address: Any = None


def _bind_row_address() -> Any:
    """``llama_get_logits_ith`` returning the row's address as a plain int
    (the binding's float pointer costs a ctypes object per call)."""
    global _row_address
    if _row_address is None:
        fn = ll.llama_cpp._lib["llama_get_logits_ith"]  # noqa: SLF001 - llama-cpp-python's ctypes library, for a signature it binds otherwise
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        fn.restype = ctypes.c_void_p
        _row_address = fn
    return _row_address


# ctypes swallows a Ctrl-C in the log callback: kept here, raised by raise_swallowed
_swallowed: list[BaseException] = []
_previous_hook: Any = None


def _keep_interrupts(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _swallowed.append(unraisable.exc_value)
        return
    _previous_hook(unraisable)


def raise_swallowed() -> None:
    """Raise the Ctrl-C or SIGTERM a log callback swallowed, if one did."""
    if _swallowed:
        exc = _swallowed.pop()
        _swallowed.clear()
        raise exc


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log away unless
    verbose (it writes to stderr, which would tear through a TUI)."""
    global _initialized, _log_callback, _previous_hook
    with _init_lock:
        if _initialized:
            return
        if _previous_hook is None:
            _previous_hook = sys.unraisablehook
            sys.unraisablehook = _keep_interrupts
        if not verbose:
            @ll.llama_log_callback  # type: ignore[misc]
            def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
                return None

            _log_callback = _quiet
            ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _initialized = True


class LlamaError(RuntimeError):
    pass


class Model:
    def __init__(self, path: str, n_gpu_layers: int = 0, extra_bufts: bool = True) -> None:
        # llama.cpp aborts the process on some malformed headers: they are refused here first
        check_model(path)
        init_backend(verbose=os.environ.get("LAB_LLAMA_VERBOSE") == "1")
        params = ll.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = extra_bufts
        self.path = path
        _swallowed.clear()  # only what lands during this load counts
        self.ptr = ll.llama_model_load_from_file(path.encode(), params)
        if self.ptr and _swallowed:
            ll.llama_model_free(self.ptr)
            self.ptr = None
        raise_swallowed()
        if not self.ptr:
            raise LlamaError(f"llama.cpp could not load {path}")
        self.vocab = ll.llama_model_get_vocab(self.ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        self.eog_ids = [t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t)]
        self._pieces: dict[int, bytes] = {}

    @property
    def size_bytes(self) -> int:
        return int(ll.llama_model_size(self.ptr))

    def close(self) -> None:
        if self.ptr:
            ll.llama_model_free(self.ptr)
            self.ptr = None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        raw = text.encode("utf-8")
        cap = len(raw) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """Apply the model's own chat template (from GGUF metadata)."""
        tmpl = ll.llama_model_chat_template(self.ptr, None)
        if not tmpl:
            raise LlamaError(f"{self.path} has no chat template; set chat_template = false")
        msgs = ([("system", system)] if system else []) + [("user", user)]
        keep = [(r.encode(), c.encode()) for r, c in msgs]
        arr = (ll.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            arr[i].role = role
            arr[i].content = content
        cap = sum(len(c) for _, c in keep) * 2 + 512
        buf = ctypes.create_string_buffer(cap)
        n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, cap)
        if n > cap:
            buf = ctypes.create_string_buffer(n)
            n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, n)
        if n < 0:
            raise LlamaError("llama_chat_apply_template failed")
        return buf.raw[:n].decode("utf-8", errors="replace")


class Batch:
    """A reusable llama_batch for sequence 0, filled through pointers kept
    from the start (each read of a ctypes pointer field makes an object)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw = ll.llama_batch_init(capacity, 0, 1)
        b = self.raw
        self._token, self._pos, self._logits = b.token, b.pos, b.logits
        n_seq_id, seq_id = b.n_seq_id, b.seq_id
        for i in range(capacity):
            n_seq_id[i] = 1
            seq_id[i][0] = 0

    def fill(self, tokens: Sequence[int], start_pos: int, logits: str = "last") -> None:
        n = len(tokens)
        if n > self.capacity:
            raise LlamaError(f"batch of {n} exceeds capacity {self.capacity}")
        token, pos, want = self._token, self._pos, self._logits
        if n == 1:  # a lone row: one token, one position, its logits (or none)
            token[0] = tokens[0]
            pos[0] = start_pos
            want[0] = logits != "none"
        else:
            every = logits == "all"
            for i, tok in enumerate(tokens):
                token[i] = tok
                pos[i] = start_pos + i
                want[i] = every
            want[n - 1] = logits != "none"
        self.raw.n_tokens = n

    def close(self) -> None:
        ll.llama_batch_free(self.raw)


@dataclass
class Sampling:
    temperature: float
    seed: int
    ignore_eos: bool


class Context:
    """One llama context: decode, sample, roll back."""

    def __init__(self, model: Model, n_ctx: int, n_batch: int, threads: int, batch_invariant: bool = False,
                 outputs_per_seq: int = 0) -> None:
        """``outputs_per_seq``: rows a backend sampler may pick in one decode
        (lab_llamacpp.gpu_pick); 0 keeps llama.cpp's default of one."""
        self.model = model
        self.batch_invariant = batch_invariant
        params = ll.llama_context_default_params()
        if outputs_per_seq:
            params.n_outputs_max_per_seq = outputs_per_seq
        # One spare cell for the row that pads a lone token.
        params.n_ctx = n_ctx + 1 if batch_invariant else n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_batch, 512)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        _swallowed.clear()
        self.ptr = ll.llama_init_from_model(model.ptr, params)
        if self.ptr and _swallowed:
            ll.llama_free(self.ptr)
            self.ptr = None
        raise_swallowed()
        if not self.ptr:
            raise LlamaError("llama_init_from_model failed (out of memory?)")
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.mem = ll.llama_get_memory(self.ptr)
        self.batch = Batch(max(n_batch, 2))
        self.n_past = 0
        # whether the last decode carried a padding row (its logits come last)
        self._padded = False
        self._sampler: Any = None
        self._bias: Any = None
        self._row_type = ctypes.c_float * model.n_vocab
        # numpy views of logits rows by address (the buffer lives until it must grow)
        self._row_views: dict[int, np.ndarray] = {}
        self._row_address = _bind_row_address()

    def close(self) -> None:
        if self._sampler is not None:
            ll.llama_sampler_free(self._sampler)
            self._sampler = None
        if self.ptr:
            self.batch.close()
            ll.llama_free(self.ptr)
            self.ptr = None

    def reset(self) -> None:
        ll.llama_memory_clear(self.mem, True)
        self.n_past = 0

    def set_sampling(self, s: Sampling) -> None:
        """C-side sampler chain: EOG suppressed when ignoring EOS, then greedy
        or temperature + seeded draw."""
        if self._sampler is not None:
            ll.llama_sampler_free(self._sampler)
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if s.ignore_eos and self.model.eog_ids:
            n = len(self.model.eog_ids)
            bias = (ll.llama_logit_bias * n)()
            for i, tok in enumerate(self.model.eog_ids):
                bias[i].token = tok  # type: ignore[assignment]
                bias[i].bias = -float("inf")
            self._bias = bias  # the sampler copies it, keep it anyway
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(self.model.n_vocab, n, bias))
        if s.temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(s.temperature))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(s.seed & 0xFFFFFFFF))
        self._sampler = chain

    def decode(self, tokens: Sequence[int], logits: str = "last", wait: bool = True) -> None:
        """Decode tokens at n_past (in n_batch chunks), then synchronize so the
        caller's clock is honest; ``wait=False`` returns once a GPU has the
        work queued (the next read of logits waits). A padding context waits."""
        if self.batch_invariant and len(tokens) == 1:
            self._decode_padded(tokens[0])
            return
        pos = self.n_past
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= len(tokens)
            self.batch.fill(chunk, pos, logits if last_chunk else "none")
            self._decode_batch(pos)
            pos += len(chunk)
        if wait:
            ll.llama_synchronize(self.ptr)
        self.n_past = pos
        self._padded = False

    def wait(self) -> None:
        """Block until the decodes queued so far have finished."""
        ll.llama_synchronize(self.ptr)

    def _decode_padded(self, token: int) -> None:
        # both rows ask for logits, or the last layer shrinks back to one-row kernels
        self.batch.fill([token, token], self.n_past, "all")
        self._decode_batch(self.n_past)
        ll.llama_synchronize(self.ptr)
        self.n_past += 1
        if not ll.llama_memory_seq_rm(self.mem, 0, self.n_past, -1):
            raise LlamaError("llama_memory_seq_rm refused to drop the padding row")
        self._padded = True

    def _decode_batch(self, pos: int) -> None:
        rc = ll.llama_decode(self.ptr, self.batch.raw)
        if rc != 0:
            raise LlamaError(f"llama_decode returned {rc} at position {pos}" + (" (KV cache full)" if rc == 1 else ""))

    def _row(self, row: int) -> int:
        """A caller's batch row (negative: counted from its last row) as
        llama.cpp's index, which counts from the end past the padding row."""
        return row - 1 if row < 0 and self._padded else row

    def sample(self, row: int) -> int:
        """Sample from the logits of batch row ``row`` (-1: the last) with the
        C-side chain."""
        return int(ll.llama_sampler_sample(self._sampler, self.ptr, self._row(row)))

    def _row_view(self, row: int) -> np.ndarray:
        """A numpy view of batch row ``row``'s logits, valid until the next decode."""
        addr = self._row_address(self.ptr, self._row(row))
        if not addr:
            raise LlamaError(f"no logits for batch row {row}: was it decoded with logits?")
        view = self._row_views.get(addr)
        if view is None:
            if len(self._row_views) >= 256:
                self._row_views.clear()
            view = np.frombuffer(self._row_type.from_address(addr), dtype=np.float32)  # type: ignore[call-overload]
            self._row_views[addr] = view
        return view

    def argmax(self, row: int, masked: Collection[int] = ()) -> int:
        """Greedy pick straight from the logits buffer, ``masked`` ids left out
        (applied only when one wins): the C-side sampler copies the whole
        vocabulary first, ten times an arg-max over a view."""
        view = self._row_view(row)
        best = int(view.argmax())
        if len(masked) and best in masked:
            view[np.fromiter(masked, dtype=np.intp)] = -np.inf  # ours until the next decode
            best = int(view.argmax())
        return best

    def logits(self, row: int) -> np.ndarray:
        return self._row_view(row).copy()

    def truncate(self, n_keep: int) -> None:
        """Drop every KV entry at position >= n_keep."""
        if n_keep < self.n_past:
            if not ll.llama_memory_seq_rm(self.mem, 0, n_keep, -1):
                raise LlamaError("llama_memory_seq_rm refused a partial removal")
            self.n_past = n_keep

    def state_bytes(self) -> int:
        return int(ll.llama_state_get_size(self.ptr))


def quantize(src: str, dst: str, ftype_name: str = "Q4_0", threads: int = 0) -> None:
    """Requantize a GGUF with llama.cpp's quantize API."""
    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.allow_requantize = True
    params.nthread = threads or available_cores()
    rc = ll.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise LlamaError(f"llama_model_quantize({src} -> {ftype_name}) returned {rc}")
