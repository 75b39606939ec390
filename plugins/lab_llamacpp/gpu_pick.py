"""Greedy picks made on the GPU by llama.cpp's backend sampling: the
arg-max runs in the decode's own graph (``llama_set_sampler``) and one id per
row comes back, instead of every verified row's logits being copied to the
host and scanned. Temperature sampling stays on the host.

A pick on a masked (EOG) token redoes its pass on the host, which picks
until the next ``reset``. A verify context needs ``outputs_per_seq=OUTPUTS_PER_SEQ``."""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import llama_cpp as ll

from lab_llamacpp.target import LlamaTarget

if TYPE_CHECKING:
    from lab_llamacpp.engine import Context

_set_sampler: Any = None

# Rows one verify pass samples: n_max + 1, with room for wide sweeps.
OUTPUTS_PER_SEQ = 64


def _bind_set_sampler() -> Any:
    """``llama_set_sampler`` from the loaded library (llama-cpp-python
    0.3.36 declares the read side of backend sampling but not this call)."""
    global _set_sampler
    if _set_sampler is None:
        fn = ll.llama_cpp._lib.llama_set_sampler  # noqa: SLF001 - a C function llama-cpp-python's ctypes library has and its wrapper does not bind
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
        fn.restype = ctypes.c_bool
        _set_sampler = fn
    return _set_sampler


class BackendGreedy:
    """A greedy chain run inside the graph of sequence 0 of one context;
    ``masked`` puts llama.cpp's logit-bias stage before the arg-max."""

    def __init__(self, ctx: Context, masked: Sequence[int] = ()) -> None:
        self.ctx = ctx
        self.masked = tuple(masked)
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if self.masked:
            bias = (ll.llama_logit_bias * len(self.masked))()
            for i, tok in enumerate(self.masked):
                bias[i].token = tok  # type: ignore[assignment]
                bias[i].bias = -float("inf")
            self._bias = bias
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(ctx.model.n_vocab, len(self.masked), bias))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        if not _bind_set_sampler()(ctx.ptr, 0, chain):
            ll.llama_sampler_free(chain)
            raise RuntimeError("llama.cpp cannot run this sampler chain on the backend")
        self.chain = chain
        self._finalizer = weakref.finalize(self, ll.llama_sampler_free, chain)

    def pick(self, row: int) -> int:
        # A context that pads lone rows maps the caller's rows to llama.cpp's.
        to_engine = getattr(self.ctx, "_row", None)
        index = to_engine(row) if to_engine is not None else row
        tok = int(ll.llama_get_sampled_token_ith(self.ctx.ptr, index))
        if tok < 0:
            raise RuntimeError(f"no backend-sampled token for row {row}: was it decoded with logits?")
        return tok

    def detach(self) -> None:
        """Hand sequence 0 back to host-side sampling (the chain is freed
        once nothing holds this object)."""
        if self.ctx.ptr:
            _bind_set_sampler()(self.ctx.ptr, 0, None)


_installed: weakref.WeakKeyDictionary[Any, BackendGreedy] = weakref.WeakKeyDictionary()


def backend_greedy(ctx: Context, masked: Sequence[int] = ()) -> BackendGreedy:
    """The context's backend greedy chain, installed once per context and
    mask (installing makes llama.cpp re-reserve its graphs)."""
    have = _installed.get(ctx)
    if have is not None and have.masked == tuple(masked):
        return have
    if have is not None:
        have.detach()
    made = BackendGreedy(ctx, masked)
    _installed[ctx] = made
    return made


def host_greedy(ctx: Context) -> None:
    """Hand the context's picks back to the host (a no-op when no backend
    chain is installed)."""
    have = _installed.pop(ctx, None)
    if have is not None:
        have.detach()


class GpuPickTarget(LlamaTarget):
    """``LlamaTarget`` with greedy picks from the backend sampler;
    ``host_redos`` counts passes a masked winner sent to the host."""

    def __init__(self, ctx: Context, temperature: float, ignore_eos: bool) -> None:
        super().__init__(ctx, temperature, ignore_eos)
        self.host_redos = 0
        # The last pass: where it started, its ids, whether every row had logits.
        self._last: tuple[int, Sequence[int], bool] = (0, (), False)
        self.greedy: BackendGreedy | None = None
        self._attach()

    def _attach(self) -> None:
        if self.temperature <= 0:
            self.greedy = backend_greedy(self.ctx)
        else:
            # Sampling at a temperature reads the host's logits, which a
            # backend sampler on the sequence would leave uncopied.
            self.greedy = None
            host_greedy(self.ctx)

    def reset(self) -> None:
        super().reset()
        if self.greedy is None and self.temperature <= 0:
            self._attach()

    def decode(self, ids: Sequence[int], all_logits: bool) -> None:
        self._last = (self.ctx.n_past, tuple(ids), all_logits)
        super().decode(ids, all_logits)

    def submit(self, ids: Sequence[int], all_logits: bool) -> None:
        self._last = (self.ctx.n_past, tuple(ids), all_logits)
        super().submit(ids, all_logits)

    def pick(self, row: int) -> int:
        if self.greedy is None:
            return super().pick(row)
        tok = self.greedy.pick(row)
        if tok in self._masked_set:
            self._redo_on_host()
            return super().pick(row)
        return tok

    def _redo_on_host(self) -> None:
        """The last pass again with host logits, the chain detached until
        the next reset: the cache holds the same entries after it."""
        base, ids, all_logits = self._last
        self.greedy = None
        host_greedy(self.ctx)
        self.ctx.truncate(base)
        self.ctx.decode(ids, "all" if all_logits else "last")
        self.host_redos += 1
