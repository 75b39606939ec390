#!/usr/bin/env bash
# Cuts a file too large for one device call (the tree and .device travel with
# every call, 64 MiB in all) into pieces, one folder a call: .pieces1 holds the
# first FIRST_MIB (the call that also carries .device), .pieces2... the rest in
# REST_MIB each, and the last folder the file's sha256 too. Each call copies its
# folder's files into the work directory's smol/ (scripts/device/README.md,
# stage cross_machine); the last also touches smol/ready.
#   bash scripts/device/pieces.sh FILE FIRST_MIB REST_MIB
set -eu
file=$1 first=$2 rest=$3
size=$(stat -c %s "$file")
rm -rf .pieces[0-9]*
offset=0 i=0
while [ "$offset" -lt "$size" ]; do
  i=$((i + 1))
  mib=$([ "$i" -eq 1 ] && echo "$first" || echo "$rest")
  mkdir -p ".pieces$i"
  tail -c +$((offset + 1)) "$file" | head -c $((mib * 1048576)) > ".pieces$i/part-$(printf %02d $((i - 1)))"
  offset=$((offset + mib * 1048576))
done
(cd "$(dirname "$file")" && sha256sum "$(basename "$file")") > ".pieces$i/sha256"
cat .pieces[0-9]*/part-* | sha256sum | cut -d' ' -f1 | grep -q "$(cut -d' ' -f1 ".pieces$i/sha256")"
du -sb .pieces[0-9]*
