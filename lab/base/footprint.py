"""An arm's expected memory, part by part, before anything loads.

A backend says what its engine holds (:class:`MemoryNeeds`: the models, their
contexts, batches, slots, where they run; ``Backend.memory_needs``); the
model files' headers say how big each model is (:class:`ModelShape`,
:mod:`lab.kit.model_shape`); this module turns the two into bytes, by the
rules of the engine that allocates them. Pure arithmetic: no files, no
engine. :func:`lab.profile.fit.estimate_arm` puts the pieces together.

The llama.cpp rules follow its allocation as it logs it: the context padded
to 256 cells, the KV cache allocated whole at load for every cell, recurrent
state per sequence (and per rollback snapshot for the server's speculative
types), and a compute buffer reserved at load for the widest pass: a prompt
chunk of ``n_ubatch`` rows or the rows whose logits one pass may return,
whichever is larger. On a CPU the reserve is only resident as passes use it
(``Part.resident``); on a GPU it is allocated whole. MLX allocates as it
goes: its KV cache grows with the tokens held (to ``n_ctx`` at most) and a
pass's activations come and go."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Mapping

Where = Literal["cpu", "cuda", "metal"]
WHERES: tuple[Where, ...] = ("cpu", "cuda", "metal")

# whose allocation rules apply (MemoryNeeds.engine)
LLAMA_CPP = "llama.cpp"
MLX = "mlx"
VLLM = "vllm"
ENGINES = (LLAMA_CPP, MLX, VLLM)

# llama.cpp pads a context to this many cells (llama-context.cpp, GGML_PAD(n_ctx, 256))
LLAMA_CELL_PAD = 256
# mlx-lm's KV cache grows in steps of this many tokens (models/cache.py, KVCache.step)
MLX_KV_STEP = 256
# Activation floats one row of a pass keeps live at its widest, per feed-forward
# and embedding element: fitted to llama.cpp's logged compute buffers (four
# project models on this CPU, three synthetic ones on an H100: 19 settings,
# all within 15 %, tests/test_footprint.py holds them). MoE layers keep more
# (the 35B-A3B's reserve is twice this) but it is small beside their weights.
ACT_PER_FF = 2.5
ACT_PER_EMBD = 5

# bytes per element of a KV cache type (ggml's block sizes)
KV_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
    "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32,
}

# ggml types llama.cpp's CPU backend repacks into a second, interleaved copy
# (ggml-cpu/repack.cpp) with AVX2 (x86-64) or NEON with dot products (arm64)
REPACKED_TYPES: dict[str, frozenset[int]] = {
    "x86_64": frozenset({2, 12, 20, 39}),  # Q4_0, Q4_K, IQ4_NL, MXFP4
    "arm64": frozenset({2, 8, 12, 13, 14, 20, 39}),  # and Q8_0, Q5_K, Q6_K
}

GIB = 1 << 30
MIB = 1 << 20


def size_text(count: float | int | None) -> str:
    """Bytes as a person reads them: "15.3 GiB", "92 MiB", "—"."""
    if count is None:
        return "—"
    if abs(count) >= GIB:
        return f"{count / GIB:.1f} GiB"
    return f"{count / MIB:.0f} MiB"


@dataclass(frozen=True)
class ModelShape:
    """What sizes a model's memory, read from its files' headers."""

    arch: str
    weight_bytes: int  # every tensor as the file stores it
    n_layers: int  # blocks of the main stack (MTP blocks apart)
    n_embd: int
    n_vocab: int
    n_ff: int  # the widest feed-forward one row passes (MoE: the experts it uses and the shared one)
    n_head: int
    kv_elems: int  # K and V elements one token adds over the full-attention layers
    swa_kv_elems: int = 0  # the same over the sliding-window layers
    swa_window: int = 0
    recurrent_elems: int = 0  # state elements one sequence keeps over the recurrent layers (f32)
    nextn_layers: int = 0  # MTP (nextn) blocks after the main stack
    nextn_kv_elems: int = 0  # K and V elements one token adds in them
    nextn_weight_bytes: int = 0
    embd_bytes: int = 0  # the token embedding (llama.cpp keeps it on the host)
    tied_embeddings: bool = False  # the output layer reads the token embedding
    dtype_bytes: int = 2  # width of an activation and a KV element where the engine follows the model (MLX)
    block_size: int = 0  # a block draft's (DFlash) trained block
    target_layers: int = 0  # a DFlash / EAGLE3 draft: the target layers whose hidden states it reads
    file_format: str = "gguf"  # gguf, or safetensors (an MLX / Hugging Face directory, a bare file)
    weight_elems: int = 0  # every tensor's elements (a GGUF's), for pricing it at another width
    # elements of the 2-D float weights, for re-quantizing at load (MLX draft_bits)
    matrix_elems: int = 0
    # (ggml type, bytes) of the block matrices: a CPU may hold a repacked copy of some types
    matrix_types: tuple[tuple[int, int], ...] = ()

    @property
    def layer_kinds(self) -> str:
        """The layers in words: "30 attention", "48 recurrent + 16 attention"."""
        parts = []
        if self.recurrent_elems:
            parts.append("recurrent")
        if self.kv_elems or self.swa_kv_elems:
            parts.append("attention")
        return " + ".join(parts) or "no cache"


@dataclass(frozen=True)
class ModelLoad:
    """One model an arm's engine holds, as that engine sizes it."""

    role: str  # "target", "draft", "MTP head"
    ref: str  # the model as the profile names it
    n_ctx: int  # cells its KV cache holds (llama.cpp: all at load; MLX: the most it grows to)
    kv_type: str = "f16"
    n_seq: int = 1  # sequences (server slots) it keeps state for
    n_ubatch: int = 512  # rows of one pass over a prompt chunk
    n_outputs: int = 512  # rows whose logits the engine reserves room for in one pass
    n_verify: int = 1  # rows whose logits the arm's widest pass returns (a verify pass: n_max + 1)
    prompt_rows: int | None = None  # rows of the widest prompt pass a cell runs (None: a whole n_ubatch)
    rs_snapshots: int = 0  # recurrent states kept per sequence for rollback, beyond the live one
    flash_attn: bool = True
    swa_full: bool = False  # sliding-window layers keep every cell (llama.cpp's library default; the server's is off)
    weight_bits: int = 0  # quantized to this many bits at load (0: as stored)
    kv_bits: int = 0  # MLX: its KV cache quantized to this many bits (mlx-lm's kv_bits; 0: the model's width)
    group_size: int = 64
    shares_weights: bool = False  # runs on another load's weights (an MTP context on its target's)
    nextn_only: bool = False  # holds the MTP blocks' cache only
    # layers on the accelerator where the arm uses one: None all, 0 none (llama.cpp's -ngl counts the
    # output layer as one more)
    gpu_layers: int | None = None
    repack: bool = False  # on a CPU, llama.cpp repacks some weight types into a second copy (extra_bufts)
    device_sampling: bool = False  # llama.cpp samples in the graph (a backend sampler): probabilities beside logits
    extract_layers: int = 0  # llama.cpp hands this many layers' hidden states to a draft (DFlash, EAGLE3)


@dataclass(frozen=True)
class MemoryNeeds:
    """What a backend tells about an arm's memory (``Backend.memory_needs``)."""

    engine: str  # ENGINES: whose allocation rules apply
    models: tuple[ModelLoad, ...]
    accelerated: bool  # it runs on the machine's accelerator where there is one
    # host memory of the process(es) the arm's figures count before any model
    # (interpreter, libraries, the lab's own): measured per backend
    process_bytes: int = 0
    # of that, what the arm's own process held just before its model loaded
    # when process_bytes was measured; a run measures this part again for
    # itself (the row's process_bytes), which then takes its place
    process_before_load: int = 0
    process_what: str = "the interpreter, the engine's libraries and the lab, before any model (measured)"
    # a share of the device the engine takes whatever the model (vLLM's gpu_memory_utilization)
    budget_share: float | None = None
    kv_pool_bytes: int | None = None  # a KV pool of a size set apart from the model (vLLM on a CPU)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Part:
    """One share of an arm's memory: ``bytes`` allocated, ``resident`` of
    them held once the arm has run on a CPU (a reserve is resident as passes
    use it), on the accelerator (``device``) or the host."""

    name: str
    bytes: int
    how: str  # the arithmetic, in words
    device: bool = False
    resident: int | None = None  # None: all of it

    @property
    def resident_bytes(self) -> int:
        return self.bytes if self.resident is None else self.resident


@dataclass(frozen=True)
class ArmEstimate:
    """An arm's expected memory where it runs: ``total`` is what counts
    against that place's budget (the device's share on a GPU, everything on
    a CPU); ``host_bytes`` what stays in host memory beside it."""

    arm: str
    where: Where
    parts: tuple[Part, ...]
    notes: tuple[str, ...] = ()
    # vLLM: the bytes it takes whatever the model (gpu_memory_utilization x the device)
    taken: int | None = None

    @property
    def counted(self) -> tuple[Part, ...]:
        """The parts that count against the budget of ``where``."""
        if self.where == "cpu":
            return self.parts
        return tuple(p for p in self.parts if p.device)

    @property
    def total(self) -> int:
        used = sum(p.bytes for p in self.counted)
        return max(used, self.taken) if self.taken is not None else used

    @property
    def host_bytes(self) -> int:
        return sum(p.bytes for p in self.parts if not p.device) if self.where != "cpu" else self.total

    @property
    def resident(self) -> int:
        """What a process shows once the arm has run (its peak RSS on a CPU,
        its device bytes on a GPU): the reserves a CPU only touches as used
        left out."""
        if self.where != "cpu":
            return self.total
        return sum(p.resident_bytes for p in self.parts)

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)

    def to_json(self) -> dict[str, object]:
        return {
            "arm": self.arm, "where": self.where, "total_bytes": self.total, "resident_bytes": self.resident,
            "host_bytes": self.host_bytes, "taken_bytes": self.taken,
            "parts": [{"name": p.name, "bytes": p.bytes, "resident_bytes": p.resident_bytes, "device": p.device,
                       "how": p.how} for p in self.parts],
            "notes": list(self.notes),
        }


# -- llama.cpp -------------------------------------------------------------------


def llama_cells(n_ctx: int) -> int:
    """The cells llama.cpp allocates for a context of ``n_ctx``."""
    return -(-max(1, n_ctx) // LLAMA_CELL_PAD) * LLAMA_CELL_PAD


def kv_type_bytes(kv_type: str) -> float:
    try:
        return KV_TYPE_BYTES[kv_type.lower()]
    except KeyError:
        raise ValueError(f"unknown KV cache type {kv_type!r}; one of {', '.join(KV_TYPE_BYTES)}") from None


def llama_kv_bytes(shape: ModelShape, load: ModelLoad) -> tuple[int, str]:
    """The KV cache of one context, and how it was sized."""
    cells = llama_cells(load.n_ctx)
    width = kv_type_bytes(load.kv_type)
    if load.nextn_only and shape.nextn_layers:
        full = shape.nextn_kv_elems * cells * width
        return int(full), f"{shape.nextn_layers} MTP block(s), {cells} cells x {shape.nextn_kv_elems} K+V x {load.kv_type}"
    full = shape.kv_elems * cells * width
    how = f"{cells} cells x {shape.kv_elems} K+V per token x {load.kv_type}"
    if shape.swa_kv_elems:
        # a sliding-window layer keeps its window per sequence and a batch beyond it
        swa_cells = cells if load.swa_full else min(cells, llama_cells(shape.swa_window * load.n_seq + load.n_ubatch))
        full += shape.swa_kv_elems * swa_cells * width
        how += f"; sliding-window layers {swa_cells} cells x {shape.swa_kv_elems}"
    return int(full), how


def state_parts(label: str, kv: tuple[int, str], shape: ModelShape, load: ModelLoad, on_device: bool) -> list[Part]:
    """What a model keeps between passes: its KV cache (``kv``: bytes and
    how, by the engine's rule) and, for a hybrid, its recurrent state."""
    parts = [Part(f"{label}KV cache", kv[0], kv[1], device=on_device)] if kv[0] else []
    if shape.recurrent_elems and not load.nextn_only:
        rs, rs_how = recurrent_bytes(shape, load)
        parts.append(Part(f"{label}recurrent state", rs, rs_how, device=on_device))
    return parts


def recurrent_bytes(shape: ModelShape, load: ModelLoad) -> tuple[int, str]:
    """Recurrent state (f32): per sequence, and per rollback snapshot."""
    copies = load.n_seq * (1 + load.rs_snapshots)
    how = f"{shape.recurrent_elems} f32 per sequence x {load.n_seq} sequence(s)"
    if load.rs_snapshots:
        how += f" x (1 + {load.rs_snapshots} rollback snapshots)"
    return shape.recurrent_elems * 4 * copies, how


def llama_compute_bytes(shape: ModelShape, load: ModelLoad) -> tuple[int, int, str]:
    """(reserved, resident on a CPU, how) of the compute buffer llama.cpp
    reserves at load for its widest pass: the larger of the logits of
    ``n_outputs`` rows and a ``n_ubatch``-row pass's activations with its
    attention mask (and, without flash attention, its scores)."""
    cells = llama_cells(load.n_ctx)
    ub = max(1, load.n_ubatch)
    outputs = max(1, min(load.n_outputs, ub))
    # a sampler in the graph keeps each row's probabilities beside its logits
    row = shape.n_vocab * (2 if load.device_sampling else 1) + shape.n_embd
    logits = outputs * row * 4

    def chunk(rows: int) -> int:
        mask = cells * rows * (2 if load.flash_attn else 4)
        acts = int(rows * (ACT_PER_FF * shape.n_ff + (ACT_PER_EMBD + load.extract_layers) * shape.n_embd) * 4)
        scores = 0 if load.flash_attn else cells * rows * shape.n_head * 4
        return mask + acts + scores

    reserved = max(logits, chunk(ub))
    # A CPU touches what its passes use: a prompt chunk's rows, and the
    # logits of the widest verify pass the arm runs.
    rows = ub if load.prompt_rows is None else max(1, min(ub, load.prompt_rows))
    touched = max(chunk(rows), min(outputs, max(1, load.n_verify)) * row * 4)
    how = (f"max(logits of {outputs} rows x {shape.n_vocab}, a {ub}-row pass: mask {cells} cells"
           + ("" if load.flash_attn else " and attention scores") + " and activations)")
    return int(reserved), int(min(touched, reserved)), how


def llama_output_rows(load: ModelLoad) -> int:
    """Rows of the host buffer llama.cpp copies logits into: one per
    sequence at load, grown to the widest pass's outputs."""
    return max(1, min(load.n_verify, load.n_outputs), load.n_seq)


def llama_parts(load: ModelLoad, shape: ModelShape, on_device: bool, offload: float = 1.0,
                repacked_types: frozenset[int] = frozenset()) -> list[Part]:
    """The parts one llama.cpp model and its context hold; ``repacked_types``
    the ggml types this CPU repacks (:data:`REPACKED_TYPES`). A target's
    MTP blocks are left out of ``shape`` unless an MTP head uses them
    (llama.cpp loads them only then): see :func:`estimate`."""
    label = "" if load.role == "target" else f"{load.role}: "
    parts: list[Part] = []
    if not load.shares_weights:
        host = shape.embd_bytes if on_device else shape.weight_bytes
        dev = 0
        if on_device:
            # the input embedding stays on the host; a tied output layer reads it on the device
            dev = int((shape.weight_bytes - shape.embd_bytes) * offload) + (shape.embd_bytes if shape.tied_embeddings else 0)
            host += int((shape.weight_bytes - shape.embd_bytes) * (1 - offload))
            parts.append(Part(f"{label}weights", dev, "tensors as stored" + (f", {offload:.0%} of layers" if offload < 1 else ""),
                              device=True))
        if host and on_device:
            parts.append(Part(f"{label}weights on the host", host, "the token embedding (llama.cpp reads it on the host)"
                              + (" and the layers not offloaded" if offload < 1 else "")))
        elif host:
            parts.append(Part(f"{label}weights", host, "tensors as stored"))
        repacked = sum(b for t, b in shape.matrix_types if t in repacked_types) if load.repack else 0
        host_share = 1.0 if not on_device else 1 - offload
        if repacked and host_share > 0:
            parts.append(Part(f"{label}repacked weights", int(repacked * host_share),
                              "a second, interleaved copy of the matrices the CPU kernels repack (extra_bufts)"))
    parts += state_parts(label, llama_kv_bytes(shape, load), shape, load, on_device)
    reserved, touched, how = llama_compute_bytes(shape, load)
    parts.append(Part(f"{label}compute (batch {load.n_ubatch}, {load.n_outputs} output rows)", reserved, how,
                      device=on_device, resident=None if on_device else touched))
    rows = llama_output_rows(load)
    parts.append(Part(f"{label}logits buffer", rows * shape.n_vocab * 4, f"{rows} rows x {shape.n_vocab} x f32"))
    return parts


# -- MLX --------------------------------------------------------------------------


def mlx_weight_bytes(shape: ModelShape, load: ModelLoad) -> tuple[int, str]:
    """Weights as MLX holds them: as stored, or re-quantized at load to
    ``weight_bits`` (a scale and a bias per group)."""
    if not load.weight_bits or not shape.matrix_elems:
        return shape.weight_bytes, "tensors as stored"
    per = load.weight_bits / 8 + 2 * shape.dtype_bytes / load.group_size
    matrices = int(shape.matrix_elems * per)
    # what is not a matrix stays as stored; the matrices were stored at the model's width
    rest = max(0, shape.weight_bytes - shape.matrix_elems * shape.dtype_bytes)
    return matrices + rest, f"{load.weight_bits}-bit at load, group {load.group_size}"


def mlx_kv_bytes(shape: ModelShape, load: ModelLoad) -> tuple[int, str]:
    """The KV cache at its fullest: it grows in steps to the tokens held."""
    tokens = -(-max(1, load.n_ctx) // MLX_KV_STEP) * MLX_KV_STEP
    elems = shape.nextn_kv_elems if load.nextn_only and shape.nextn_layers else shape.kv_elems + shape.swa_kv_elems
    if load.nextn_only and not shape.nextn_layers:
        elems = 0  # a head's file alone does not say its cache; it is one layer of its target's
    width = load.kv_bits / 8 + 2 * shape.dtype_bytes / 64 if load.kv_bits else shape.dtype_bytes
    kind = f"{load.kv_bits}-bit" if load.kv_bits else f"{shape.dtype_bytes} B"
    return int(elems * tokens * width * load.n_seq), f"up to {tokens} tokens x {elems} K+V x {kind}"


def mlx_parts(load: ModelLoad, shape: ModelShape, on_device: bool) -> list[Part]:
    label = "" if load.role == "target" else f"{load.role}: "
    parts: list[Part] = []
    if not load.shares_weights:
        weights, how = mlx_weight_bytes(shape, load)
        parts.append(Part(f"{label}weights", weights, how, device=on_device))
        if shape.file_format == "gguf":
            # mx.load reads a GGUF whole; its tensors become MLX arrays beside it
            parts.append(Part(f"{label}load copy", shape.weight_bytes,
                              "the GGUF read whole while its tensors are converted (at load only)", device=on_device))
    parts += state_parts(label, mlx_kv_bytes(shape, load), shape, load, on_device)
    # one pass over a prompt chunk: its activations, and the logits of the rows it returns
    rows = max(1, load.n_ubatch)
    outputs = max(1, min(load.n_outputs, rows))
    acts = int(outputs * (shape.n_vocab + shape.n_embd) * 4
               + rows * (ACT_PER_FF * shape.n_ff + ACT_PER_EMBD * shape.n_embd) * shape.dtype_bytes)
    parts.append(Part(f"{label}activations (a {rows}-row pass)", acts,
                      f"{rows} rows' activations, {outputs} rows of logits", device=on_device))
    return parts


def at_lengths(needs: MemoryNeeds, prompt_tokens: int, generated: int) -> MemoryNeeds:
    """The arm's needs as one cell of these lengths meets them: MLX holds
    the tokens it has seen and a pass the prompt's rows; llama.cpp
    allocates as at load, but a CPU touches only the rows a pass uses."""
    loads = []
    for load in needs.models:
        rows = max(1, min(load.n_ubatch, prompt_tokens))
        if needs.engine == MLX:
            held = max(1, min(load.n_ctx, prompt_tokens + generated + load.n_verify))
            loads.append(replace(load, n_ctx=held, n_ubatch=rows))
        else:
            loads.append(replace(load, prompt_rows=rows))
    return replace(needs, models=tuple(loads))


def with_process_measured(needs: MemoryNeeds, before_load: int | None) -> MemoryNeeds:
    """The needs with the arm's process as a run measured it just before its
    model loaded (the row's ``process_bytes``), plus what the engine adds to
    it while loading; unchanged where the backend does not split its
    process figure or the run measured nothing. The interpreter's imports
    differ by machine and build (a CUDA build of torch that an MLX arm's
    tokenizer imports holds some 300 MiB more than its CPU build)."""
    if not before_load or not needs.process_before_load:
        return needs
    adds = max(0, needs.process_bytes - needs.process_before_load)
    return replace(needs, process_bytes=before_load + adds,
                   process_what=(f"the arm's process before its model, {before_load / MIB:.0f} MiB measured in this "
                                 f"run, and {adds / MIB:.0f} MiB the engine adds while loading (measured)"))


# -- vLLM -------------------------------------------------------------------------


def vllm_parts(load: ModelLoad, shape: ModelShape, on_device: bool) -> list[Part]:
    """vLLM's weights: a GGUF is converted to a Hugging Face directory at 16
    bits a weight before it serves; its KV cache is a pool it sizes itself."""
    label = "" if load.role == "target" else f"{load.role}: "
    if shape.file_format == "gguf" and shape.weight_elems:
        return [Part(f"{label}weights", shape.weight_elems * 2, "converted from the GGUF at 16 bits a weight",
                     device=on_device)]
    return [Part(f"{label}weights", shape.weight_bytes, "tensors as stored", device=on_device)]


# -- the whole arm --------------------------------------------------------------


def offload_share(load: ModelLoad, shape: ModelShape) -> float:
    """The share of a model's layers on the accelerator (llama.cpp counts the
    output layer as one more than the blocks)."""
    if load.gpu_layers is None or load.gpu_layers < 0:
        return 1.0
    return min(1.0, load.gpu_layers / (shape.n_layers + 1))


def estimate(arm: str, needs: MemoryNeeds, shapes: Mapping[str, ModelShape], where: Where,
             device_total: int | None = None, runtime_bytes: int = 0,
             repacked_types: frozenset[int] = frozenset()) -> ArmEstimate:
    """The arm's parts from what its backend needs and its models' shapes
    (by reference), placed at ``where``. ``device_total``: the device's
    memory, for an engine that takes a share of it; ``runtime_bytes``: what
    the accelerator's runtime takes on the device before any model;
    ``repacked_types``: the weight types this CPU repacks."""
    on_device = where != "cpu" and needs.accelerated
    parts: list[Part] = []
    # MTP blocks are loaded where an MTP head runs on them; a draft that reads
    # the target's hidden states has the target hand them over each pass
    heads = {m.ref for m in needs.models if m.nextn_only and m.shares_weights}
    read = max((shapes[m.ref].target_layers for m in needs.models if m.role != "target"), default=0)
    for load in needs.models:
        shape = shapes[load.ref]
        if shape.nextn_weight_bytes and load.ref not in heads:
            shape = replace(shape, weight_bytes=shape.weight_bytes - shape.nextn_weight_bytes)
        if load.role == "target" and read and needs.engine == LLAMA_CPP:
            load = replace(load, extract_layers=read)
        share = offload_share(load, shape) if on_device else 0.0
        if needs.engine == MLX:
            parts += mlx_parts(load, shape, share > 0)
        elif needs.engine == VLLM:
            parts += vllm_parts(load, shape, share > 0)
        else:
            parts += llama_parts(load, shape, share > 0, share if share > 0 else 1.0, repacked_types)
    if needs.kv_pool_bytes and not on_device:
        parts.append(Part("KV pool", needs.kv_pool_bytes, "the KV cache space the engine sets apart",
                          resident=0))
    if needs.process_bytes:
        parts.append(Part("process", needs.process_bytes, needs.process_what))
    if on_device and runtime_bytes:
        parts.append(Part(f"{where} runtime", runtime_bytes, "the accelerator's context and libraries on the device",
                          device=True))
    taken = None
    notes = list(needs.notes)
    if needs.budget_share is not None and device_total:
        taken = int(device_total * needs.budget_share)
        notes.append(f"it takes {needs.budget_share:g} of {size_text(device_total)} whatever the model "
                     f"({size_text(taken)}): the weights must fit in that with room for its KV cache")
    return ArmEstimate(arm, where if on_device else "cpu", tuple(parts), tuple(notes), taken)
