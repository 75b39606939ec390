"""The options every llama-server arm takes, and the server command line
they make: the flags users type, then the lab's measurement flags, then the
profile's raw extra arguments (last, so they win)."""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping, Sequence

from lab.api import EngineFailure, Option

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
    Option("allow_remote_bind", bool, False,
           "let extra_args bind the server beyond loopback (--host 0.0.0.0 and the like): other machines can reach it"),
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
# Spec types whose tables outlive a request (common/speculative.cpp); the
# others start each request from its prompt.
STATEFUL_SPEC_TYPES = frozenset({"ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache"})
NEEDS_DRAFT_MODEL = {"draft-simple", "draft-dflash", "draft-dspark", "draft-eagle3"}


def bind_hosts(extra_args: Any) -> list[str]:
    """The addresses ``--host`` in raw arguments asks the server to listen on."""
    args = [str(a) for a in (extra_args or [])]
    hosts = []
    for i, a in enumerate(args):
        if a == "--host" and i + 1 < len(args):
            hosts.append(args[i + 1])
        elif a.startswith("--host="):
            hosts.append(a.split("=", 1)[1])
    return hosts


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host``: a loopback address, or
    a path ending in .sock (llama-server then listens on a UNIX socket)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost" or h.endswith(".sock"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False  # a host name resolves to whatever the network says


def remote_host(options: Mapping[str, Any]) -> str | None:
    """The first address beyond loopback the arm's raw arguments bind, if any."""
    return next((h for h in bind_hosts(options.get("extra_args")) if not is_loopback(h)), None)


def refuse_options(options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(option, why) when the options may not run as given: a server bound
    beyond loopback needs the profile to allow it."""
    host = remote_host(options)
    if host is not None and not options.get("allow_remote_bind"):
        return ("extra_args", f"--host {host} would make llama-server reachable from other machines; "
                "add allow_remote_bind = true to the arm's options to allow it")
    return None


def warn_options(options: Mapping[str, Any]) -> list[str]:
    """What a user should hear before the run about options that are allowed."""
    host = remote_host(options)
    if host is not None and options.get("allow_remote_bind"):
        return [f"llama-server will listen on {host} (allow_remote_bind = true): other machines can reach it"]
    return []


def server_args(options: Mapping[str, Any], spec_type: str, n_max: int | None, *, n_ctx: int, threads: int,
                port: int, model_path: str, draft_path: str | None,
                set_rates: Sequence[float] | None = None) -> list[str]:
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
        if set_rates is not None:
            # the server keeps drafted tokens at these rates (benchmarking
            # only): one per position up to n_max, seeded by each request
            args += ["--spec-synth-rates", ",".join(f"{r:.9g}" for r in set_rates)]
    args += [
        "--host", "127.0.0.1", "--port", str(port),
        "--metrics", "--log-prefix", "--log-timestamps", "--log-colors", "off",
        # trace level: the per-request speculative statistics with draft durations
        "-lv", "4",
        "--no-webui",
    ]
    refused = refuse_options(options)
    if refused is not None:
        # `lab check` refuses this before a run; a profile that came another way is refused here
        raise EngineFailure(refused[1])
    args += [str(a) for a in (opt("extra_args") or [])]
    return args
