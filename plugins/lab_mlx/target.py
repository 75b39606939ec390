"""An MLX language model adapted to :class:`lab.kit.speculative.Target`.
Rollback trims the KV caches; a recurrent layer's state cannot be trimmed,
so it is kept from before the last multi-token decode and restored, and the
accepted tokens run again (counted in verify time). Optionally captures
chosen layers' outputs, the hidden states a DFlash draft conditions on."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lab.kit.speculative import softmax
from lab_mlx.vocab import Vocab

PREFILL_CHUNK = 512


class _Sink:
    """Holds captured layer outputs; a plain object so MLX's module tree
    does not treat it as parameters."""

    def __init__(self, n: int) -> None:
        self.values: list[Any] = [None] * n


def _layers(model: Any) -> list[Any]:
    # The innermost list: outer ``layers`` properties may return a slice copy
    # (mlx-lm's pipeline_layers), and wrapping a copy would capture nothing.
    inner = getattr(getattr(model, "language_model", None), "model", None)
    for owner in (getattr(model, "model", None), inner, model):
        layers = getattr(owner, "layers", None) if owner is not None else None
        if isinstance(layers, list):
            return layers
    raise AttributeError(f"cannot find the decoder layers of {type(model).__name__}")


def install_capture(model: Any, layer_ids: Sequence[int], inputs: bool = False) -> _Sink:
    """Wrap the chosen decoder layers so each forward pass records hidden
    states, one slot per id: layer ``i``'s output, or with ``inputs`` its
    input (0 is the embeddings), trunk layers counted as llama.cpp does."""
    import mlx.nn as nn

    class Capture(nn.Module):
        def __init__(self, layer: Any, in_slots: list[int], out_slots: list[int], sink: _Sink) -> None:
            super().__init__()
            self.layer = layer
            self._in_slots = in_slots
            self._out_slots = out_slots
            self._sink = sink

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            for slot in self._in_slots:
                self._sink.values[slot] = args[0] if args else kwargs["x"]
            out = self.layer(*args, **kwargs)
            for slot in self._out_slots:
                self._sink.values[slot] = out[0] if isinstance(out, tuple) else out
            return out

        def __getattr__(self, name: str) -> Any:
            try:
                return super().__getattr__(name)
            except AttributeError:
                # Model code reads layer attributes (is_linear, ...): forward.
                if "layer" not in self:
                    raise
                return getattr(self["layer"], name)

    layers = _layers(model)
    key = (bool(inputs), tuple(layer_ids))
    existing = getattr(model, "_lab_capture", None)
    if existing is not None:
        if existing[0] != key:
            raise RuntimeError("this model already captures other layers")
        return existing[1]
    n = len(layers)
    top = n if inputs else n - 1
    for lid in layer_ids:
        if not 0 <= lid <= top:
            what = "layer inputs 0" if inputs else "layer outputs 0"
            raise ValueError(f"target layer {lid} does not exist (the target has {n} layers: {what}..{top})")
    # layer index -> (slots recording its input, slots recording its output)
    plan: dict[int, tuple[list[int], list[int]]] = {}
    for slot, lid in enumerate(layer_ids):
        if inputs and lid < n:
            plan.setdefault(lid, ([], []))[0].append(slot)
        else:
            plan.setdefault(lid - 1 if inputs else lid, ([], []))[1].append(slot)
    sink = _Sink(len(layer_ids))
    for index, (in_slots, out_slots) in plan.items():
        layers[index] = Capture(layers[index], in_slots, out_slots, sink)
    object.__setattr__(model, "_lab_capture", (key, sink))
    return sink


class MlxTarget:
    def __init__(self, model: Any, vocab: Vocab, n_ctx: int, sink: _Sink | None = None) -> None:
        self.model = model
        self.vocab = vocab
        self.n_ctx = n_ctx
        self.n_vocab = vocab.n_vocab
        self.n_past = 0
        self.sink = sink
        self.hidden: Any = None  # captured hidden states of the last decode
        self.temperature = 0.0
        self.rng = np.random.default_rng(0)
        self.mask: Any = None
        self.cache: list[Any] = []
        self._ids: list[int] = []  # tokens whose state the caches hold
        self._picks: list[int] = []
        self._logits: Any = None
        self._np_logits: np.ndarray | None = None
        self._snapshot: tuple[int, list[Any]] | None = None
        self.rollback_forwards = 0
        self.reset()

    @property
    def recurrent(self) -> bool:
        return not all(c.is_trimmable() for c in self.cache)

    def set_sampling(self, temperature: float, seed: int, ignore_eos: bool) -> None:
        import mlx.core as mx

        self.temperature = temperature
        self.rng = np.random.default_rng(seed)
        self.masked = list(self.vocab.eog_ids) if ignore_eos else []
        if self.masked:
            bias = np.zeros(self.n_vocab, dtype=np.float32)
            bias[self.masked] = -np.inf
            self.mask = mx.array(bias)
        else:
            self.mask = None

    def reset(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self.cache = make_prompt_cache(self.model)
        self.n_past = 0
        self._ids = []
        self._snapshot = None

    def _forward(self, ids: Any) -> Any:
        import mlx.core as mx

        inputs = ids.reshape(1, -1) if isinstance(ids, mx.array) else mx.array([list(ids)])
        return self.model(inputs, cache=self.cache)

    def _hidden(self) -> Any:
        import mlx.core as mx

        assert self.sink is not None
        if any(v is None for v in self.sink.values):
            raise RuntimeError("the target's forward pass did not run the captured layers; this architecture keeps its layers elsewhere")
        return mx.concatenate(self.sink.values, axis=-1)

    def decode(self, ids: Sequence[int] | Any, all_logits: bool) -> None:
        """Decode ids (a list, or an unevaluated MLX array of ids so a block
        can be verified without waiting for it to be read back first)."""
        import mlx.core as mx

        lazy = ids if isinstance(ids, mx.array) else None
        ids = list(ids) if lazy is None else [0] * int(lazy.size)
        if self.recurrent:
            # Keep the recurrent state from before this pass (arrays are
            # immutable, so references are a snapshot).
            self._snapshot = (self.n_past, [list(c.state[0]) if not c.is_trimmable() else None for c in self.cache])
        hidden_parts: list[Any] = []
        start = 0
        # Long prompts go in chunks, evaluated in between, to bound memory.
        while len(ids) - start > PREFILL_CHUNK:
            self._forward(ids[start : start + PREFILL_CHUNK])
            if self.sink is not None:
                hidden_parts.append(self._hidden())
            mx.eval([c.state for c in self.cache], hidden_parts)
            start += PREFILL_CHUNK
        logits = self._forward(lazy if lazy is not None else ids[start:])[0]
        if self.sink is not None:
            hidden_parts.append(self._hidden())
            self.hidden = hidden_parts[0] if len(hidden_parts) == 1 else mx.concatenate(hidden_parts, axis=1)
        if not all_logits:
            logits = logits[-1:]
        if self.mask is not None:
            logits = logits + self.mask
        self._logits = logits
        self._np_logits = None
        if self.temperature <= 0:
            picks = mx.argmax(logits, axis=-1)
            mx.eval(picks, self.hidden) if self.sink is not None else mx.eval(picks)
            self._picks = np.array(picks).astype(np.int64).tolist()
        else:
            mx.eval(logits, self.hidden) if self.sink is not None else mx.eval(logits)
            self._picks = []
        if lazy is not None:
            ids = np.array(lazy).reshape(-1).astype(np.int64).tolist()
        self._ids.extend(ids)
        self.n_past += len(ids)

    def ids_from(self, start: int) -> list[int]:
        """Token ids in the context from position ``start`` on."""
        return self._ids[start:]

    def logits(self, row: int) -> np.ndarray:
        if self._np_logits is None:
            import mlx.core as mx

            self._np_logits = np.array(self._logits.astype(mx.float32))
        return self._np_logits[row]

    def pick(self, row: int) -> int:
        if self.temperature <= 0:
            return int(self._picks[row])
        p = self.probs(row)
        return int(self.rng.choice(len(p), p=p))

    def probs(self, row: int) -> np.ndarray:
        return softmax(self.logits(row), self.temperature if self.temperature > 0 else 1.0, self.masked)

    def truncate(self, n_keep: int) -> None:
        import mlx.core as mx

        drop = self.n_past - n_keep
        if drop <= 0:
            return
        if not self.recurrent:
            for c in self.cache:
                c.trim(drop)
        else:
            if self._snapshot is None or self._snapshot[0] > n_keep:
                raise RuntimeError("recurrent state cannot roll back past the last multi-token decode")
            base, states = self._snapshot
            for c, state in zip(self.cache, states):
                if state is None:
                    c.trim(self.n_past - base)
                else:
                    c.cache = list(state)
            redo = self._ids[base:n_keep]
            self._ids = self._ids[:base]
            self.n_past = base
            self._snapshot = None
            if redo:
                self._forward(redo)
                mx.eval([c.state for c in self.cache])
                self.rollback_forwards += 1
                self._ids.extend(redo)
                self.n_past += len(redo)
            return
        self._ids = self._ids[:n_keep]
        self.n_past = n_keep

    def piece(self, token: int) -> bytes:
        return self.vocab.piece(token)
