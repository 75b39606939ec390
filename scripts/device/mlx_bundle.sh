#!/usr/bin/env bash
# MLX on the GPU machine (stage mlx_gpu): the wheels its image lacks, at the
# versions this checkout's .venv runs. mlx and mlx-lm (1.3 MB) go into
# .device/mlx/, carried with .device; the CUDA 13 backend, mlx-cuda-13 (90 MB),
# in pieces, a folder a call (.mlxpieces1, ...; pieces.sh). The image has the
# NVIDIA libraries it needs (cuBLAS, cuDNN, NCCL, NVRTC for CUDA 13) and
# mlx-lm's transformers, tokenizers, sentencepiece, protobuf and jinja2.
#   bash scripts/device/mlx_bundle.sh FIRST_MIB REST_MIB
set -eu
first=${1:-20} rest=${2:-30}
mlx=$(.venv/bin/python -m pip show mlx | awk '/^Version/{print $2}')
lm=$(.venv/bin/python -m pip show mlx-lm | awk '/^Version/{print $2}')
get() {
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$@"
}
rm -rf .device/mlx && mkdir -p .device/mlx
get .device/mlx "mlx==$mlx" "mlx-lm==$lm"
tmp=$(mktemp -d)
get "$tmp" "mlx-cuda-13==$mlx"
bash scripts/device/pieces.sh "$tmp"/mlx_cuda_13-*.whl "$first" "$rest" .mlxpieces
rm -rf "$tmp"
ls -la .device/mlx
