#!/usr/bin/env bash
# Cuts a file too large for one device call (the tree and .device travel with
# every call, 64 MiB in all) into pieces, one folder a call: .pieces1 holds the
# first FIRST_MIB (the call that also carries .device), .pieces2... the rest in
# REST_MIB each, and the last folder the file's sha256 too. Each call copies its
# folder's files into the work directory's smol/ (scripts/device/README.md,
# stage cross_machine); the last also touches smol/ready. PREFIX (default
# .pieces) names the folders, so two files can travel side by side (mlx_bundle.sh
# cuts the mlx-cuda wheel as .mlxpieces1...).
#   bash scripts/device/pieces.sh FILE FIRST_MIB REST_MIB [PREFIX]
set -eu
file=$1 first=$2 rest=$3 p=${4:-.pieces}
size=$(stat -c %s "$file")
rm -rf "$p"[0-9]*
offset=0 i=0
while [ "$offset" -lt "$size" ]; do
  i=$((i + 1))
  mib=$([ "$i" -eq 1 ] && echo "$first" || echo "$rest")
  mkdir -p "$p$i"
  tail -c +$((offset + 1)) "$file" | head -c $((mib * 1048576)) > "$p$i/part-$(printf %02d $((i - 1)))"
  offset=$((offset + mib * 1048576))
done
(cd "$(dirname "$file")" && sha256sum "$(basename "$file")") > "$p$i/sha256"
cat "$p"[0-9]*/part-* | sha256sum | cut -d' ' -f1 | grep -q "$(cut -d' ' -f1 "$p$i/sha256")"
du -sb "$p"[0-9]*
