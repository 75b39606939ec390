"""The options every llama-server arm takes, and the server command line
they make: the flags users type, then the lab's measurement flags, then the
profile's raw extra arguments (last, so they win)."""

from __future__ import annotations

from typing import Any, Mapping

from lab.api import Option

COMMON_OPTIONS: tuple[Option, ...] = (
    Option("server", str, None, "path of the llama-server binary (default: PATH, then the lab's llama.cpp build)"),
    Option("n_gpu_layers", int, None, "-ngl: layers offloaded to the GPU (999 = all)", min=-1),
    Option("flash_attn", str, None, "-fa", choices=("on", "off", "auto")),
    Option("batch", int, None, "-b: logical batch size", min=1, max=65536),
    Option("ubatch", int, None, "-ub: physical batch size", min=1, max=65536),
    Option("ctx_size", int, None, "-c: context size (default: run.n_ctx)", min=0),
    Option("parallel", int, 1, "--parallel: server slots (1 measures one stream honestly)", min=1, max=256),
    Option("draft_n_min", int, None, "--spec-draft-n-min", min=0, max=1024),
    Option("draft_p_min", float, None, "--spec-draft-p-min", min=0, max=1),
    Option("draft_ngl", int, None, "--spec-draft-ngl: draft layers on the GPU", min=-1),
    Option("chat_template_kwargs", str, None, 'JSON object for the chat template, e.g. {"enable_thinking": false}'),
    Option("extra_args", list, [], "raw llama-server arguments, passed through unchanged after the lab's own",
           item_type=str),
    Option("health_timeout_s", float, 300.0, "seconds to wait for /health to say ok", min=1, max=86400),
    Option("memory_limit_mb", int, None, min=1, help=
           "cap the server's address space (Linux RLIMIT_AS, CPU builds only): allocations past it fail "
           "as on a smaller machine, and the arm ends as oom"),
)

# Spec types whose draft length is --spec-draft-n-max; the n-gram types have their own knobs.
DRAFT_N_MAX_FLAG = {
    "draft-simple": "--spec-draft-n-max",
    "draft-mtp": "--spec-draft-n-max",
    "draft-dflash": "--spec-draft-n-max",
    "draft-dspark": "--spec-draft-n-max",
    "draft-eagle3": "--spec-draft-n-max",
    "ngram-mod": "--spec-ngram-mod-n-max",
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
}
NEEDS_DRAFT_MODEL = {"draft-simple", "draft-dflash", "draft-dspark", "draft-eagle3"}


def server_args(options: Mapping[str, Any], spec_type: str, n_max: int | None, *, n_ctx: int, threads: int,
                port: int, model_path: str, draft_path: str | None) -> list[str]:
    """The arguments after the binary. ``n_ctx`` and ``threads`` are the
    run's; the arm's options override the context size."""

    def opt(key: str) -> Any:
        return options.get(key)

    args = ["-m", model_path, "-c", str(opt("ctx_size") or n_ctx)]
    if threads:
        args += ["-t", str(threads)]
    for key, flag in (("n_gpu_layers", "-ngl"), ("flash_attn", "-fa"), ("batch", "-b"), ("ubatch", "-ub")):
        if opt(key) is not None:
            args += [flag, str(opt(key))]
    args += ["--parallel", str(opt("parallel") or 1)]
    if spec_type != "none":
        args += ["--spec-type", spec_type]
        if draft_path is not None:
            args += ["-md", draft_path]
        n_max_flag = DRAFT_N_MAX_FLAG.get(spec_type)
        if n_max_flag is not None and n_max is not None:
            args += [n_max_flag, str(n_max)]
        for key, flag in (("draft_n_min", "--spec-draft-n-min"), ("draft_p_min", "--spec-draft-p-min"), ("draft_ngl", "--spec-draft-ngl")):
            if opt(key) is not None:
                args += [flag, str(opt(key))]
    args += [
        "--host", "127.0.0.1", "--port", str(port),
        "--metrics", "--log-prefix", "--log-timestamps", "--log-colors", "off",
        # trace level: the per-request speculative statistics with draft durations
        "-lv", "4",
        "--no-webui",
    ]
    args += [str(a) for a in (opt("extra_args") or [])]
    return args
