"""What a llama-server arm holds, as the server sizes it (its
``server_context.load_model`` and common/speculative.cpp at b11312): the
target's context with one slot per stream, logits for a verify pass per slot,
recurrent rollback snapshots for the spec types that need them, a draft or
MTP context beside it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.base.footprint import LLAMA_CPP, MemoryNeeds, ModelLoad
from lab.base.profile import RunSettings

# the server's own defaults (tools/server --help)
DEFAULT_BATCH = 2048
DEFAULT_UBATCH = 512
DEFAULT_DRAFT_N_MAX = 3
# spec types whose target keeps n_max recurrent snapshots a sequence (common_params_speculative::need_n_rs_seq)
SNAPSHOT_TYPES = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
# block drafts decode the anchor and n_max masks in one pass
BLOCK_TYPES = frozenset({"draft-dflash", "draft-dspark"})
# the arm's own process (the lab imported) and the server's before any model:
# their RSS measured on Linux x86-64
PROCESS_BYTES = 150 << 20

# raw arguments the estimate reads (what a profile's extra_args may change)
_FLAGS = {
    "-c": "ctx", "--ctx-size": "ctx", "-b": "batch", "--batch-size": "batch", "-ub": "ubatch",
    "--ubatch-size": "ubatch", "-np": "parallel", "--parallel": "parallel", "-ctk": "type_k",
    "--cache-type-k": "type_k", "-ctkd": "draft_type_k", "--cache-type-k-draft": "draft_type_k",
    "--spec-draft-type-k": "draft_type_k", "-fa": "flash", "--flash-attn": "flash",
}
_SWITCHES = {"--swa-full": "swa_full", "--no-repack": "no_repack", "-nr": "no_repack"}


def raw_settings(extra_args: Sequence[Any] | None) -> dict[str, str]:
    """The settings raw arguments give, the last of each winning as the server reads them."""
    args = [str(a) for a in (extra_args or [])]
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        flag, _, value = a.partition("=")
        if flag in _FLAGS:
            if not value and i + 1 < len(args):
                value = args[i + 1]
            out[_FLAGS[flag]] = value
        elif a in _SWITCHES:
            out[_SWITCHES[a]] = "1"
    return out


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def server_memory_needs(options: Mapping[str, Any], spec_type: str, n_max: int | None, run: RunSettings,
                        model: str, draft: str | None, embedded_mtp: bool) -> MemoryNeeds:
    raw = raw_settings(options.get("extra_args"))
    concurrency = int(options.get("concurrency") or 1)
    parallel = max(_int(raw.get("parallel"), int(options.get("parallel") or 1)), concurrency)
    ctx = _int(raw.get("ctx"), int(options.get("ctx_size") or run.n_ctx))
    if concurrency > 1 and "ctx" not in raw:
        ctx *= parallel  # a slot per stream, each with one stream's context (the backend's server_args)
    batch = _int(raw.get("batch"), int(options.get("batch") or DEFAULT_BATCH))
    ubatch = min(batch, _int(raw.get("ubatch"), int(options.get("ubatch") or DEFAULT_UBATCH)))
    flash = str(raw.get("flash") or options.get("flash_attn") or "auto") != "off"
    type_k = raw.get("type_k", "f16")
    speculative = spec_type != "none"
    drafts = (n_max if n_max is not None else DEFAULT_DRAFT_N_MAX) if speculative else 0
    # the target's logits: a verify pass per slot (server_output_limits)
    outputs = min(batch, parallel * (1 + drafts))
    common: dict[str, Any] = {"n_seq": parallel, "n_ubatch": ubatch, "flash_attn": flash,
                              "swa_full": "swa_full" in raw, "repack": "no_repack" not in raw}
    layers = options.get("n_gpu_layers")
    target = ModelLoad("target", model, ctx, kv_type=type_k, n_outputs=outputs, n_verify=1 + drafts,
                       rs_snapshots=drafts if spec_type in SNAPSHOT_TYPES else 0,
                       gpu_layers=None if layers is None or int(layers) < 0 else int(layers), **common)
    loads = [target]
    draft_layers = options.get("draft_ngl")
    draft_gpu = None if draft_layers is None or int(draft_layers) < 0 else int(draft_layers)
    block = spec_type in BLOCK_TYPES
    draft_type = raw.get("draft_type_k", "f16")
    if draft is not None:
        # a block draft's context keeps room for a whole batch of outputs (n_outputs_max left at n_batch, as
        # this build logs it) and samples them in its graph; other drafts return one row a slot
        loads.append(ModelLoad("draft", draft, ctx, kv_type=draft_type, n_outputs=batch if block else parallel,
                               n_verify=parallel * (1 + drafts) if block else parallel, device_sampling=block,
                               gpu_layers=draft_gpu, **common))
    elif embedded_mtp:
        # an MTP context runs on the target's own weights and caches its nextn blocks only
        loads.append(ModelLoad("MTP head", model, ctx, kv_type=draft_type, n_outputs=parallel, n_verify=parallel,
                               shares_weights=True, nextn_only=True, gpu_layers=draft_gpu, **common))
    return MemoryNeeds(LLAMA_CPP, tuple(loads), accelerated=layers is None or int(layers) != 0,
                       process_bytes=PROCESS_BYTES, process_before_load=41 << 20,
                       notes=("llama-server may also keep up to --cache-ram (8 GiB by default) of earlier prompts' "
                              "state in host memory, and context checkpoints of a recurrent model's state: "
                              "not counted",))
