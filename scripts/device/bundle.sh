#!/usr/bin/env bash
# Packs what a bare GPU machine without network needs, into .device/ (ignored):
#   .device/llama.cpp.tar.gz  llama.cpp as vendored in the llama-cpp-python sdist
#                             (docs, media, benches and model files dropped) and
#                             the sdist's llama_cpp Python package beside it
#   .device/COMMIT            the commit (HEAD) speclab was built from
#   .device/whl/              speclab built from the committed tree (HEAD) and the
#                             pure-Python wheels the machine lacks (WHEEL_DIR's,
#                             which may be the last bundle's .device/whl)
# usage: scripts/device/bundle.sh SDIST.tar.gz WHEEL_DIR [PATH...]
#   PATHs: working-tree files laid over HEAD (new modules not committed yet);
#   the rest of the working tree, where others edit, stays out.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
sdist=$(realpath "${1:?llama_cpp_python-VERSION.tar.gz}")
wheels=$(realpath "${2:?directory of wheels}")
shift 2
out=$root/.device
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# The wheels first: WHEEL_DIR may be the .device/whl of the last bundle.
mkdir -p "$stage/wheels"
find "$wheels" -maxdepth 1 -name '*.whl' ! -name 'speclab-*' -exec cp {} "$stage/wheels/" \;
rm -rf "$out"
mkdir -p "$out/whl" "$stage/pkg" "$stage/speclab"
tar xzf "$sdist" -C "$stage"
src=$(echo "$stage"/llama_cpp_python-*)
mv "$src/vendor/llama.cpp" "$stage/pkg/llama.cpp"
cp -r "$src/llama_cpp" "$stage/pkg/llama_cpp_py"
rm -rf "$stage/pkg/llama.cpp/"{docs,media,benches,.git} "$stage/pkg/llama.cpp/tools/ui/"{src,tests}
find "$stage/pkg/llama.cpp/models" -name '*.gguf' -delete
tar czf "$out/llama.cpp.tar.gz" -C "$stage/pkg" .
git -C "$root" archive HEAD | tar x -C "$stage/speclab"
for f in "$@"; do install -D -m 644 "$root/$f" "$stage/speclab/$f"; done
python3 -m pip wheel -q --no-deps -w "$out/whl" "$stage/speclab"
# the commit the wheel was built from, for the GPU check's page
git -C "$root" rev-parse HEAD > "$out/COMMIT"
cp "$stage"/wheels/*.whl "$out/whl/"
du -sh "$out"/* "$out"/whl/*
du -sh "$out"
