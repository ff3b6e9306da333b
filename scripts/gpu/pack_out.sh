#!/usr/bin/env bash
# On the device, after a run: packs each run directory under $OUT into what the device hands back (at most 8
# files of 16 MiB, 64 MiB together): <dir>.tar.xz without the profiler traces, then <dir>-traces.tar with the
# traces (already gzip) smallest first while the total stays under TRACE_MIB (default 40), cut into 15 MiB parts
# (cat them back together). Traces left out are listed in <dir>.traces-left-out.txt.
set -uo pipefail
cd "${OUT:?}"
for d in */; do
  d=${d%/}
  tar cf - --exclude='*.trace.json.gz' --exclude='.*.capture' "$d" | xz -T0 -2 > "$d.tar.xz"  # -2: fast enough for a call's last seconds (-6 took >15 s on 20 MB)
  if [ "$(stat -c %s "$d.tar.xz")" -gt 15728640 ]; then split -b 15M -d "$d.tar.xz" "$d.tar.xz.part" && rm "$d.tar.xz"; fi  # files come back up to 16 MiB
  total=0; keep=()
  while read -r size f; do
    if [ $((total + size)) -le $(( ${TRACE_MIB:-25} * 1048576 )) ]; then keep+=("$f"); total=$((total + size))
    else echo "$f $size" >> "$d.traces-left-out.txt"; fi
  done < <(find "$d" -name '*.trace.json.gz' -printf '%s %p\n' | sort -n)
  if [ ${#keep[@]} -gt 0 ]; then
    tar cf "$d-traces.tar" "${keep[@]}"
    split -b 15M -d "$d-traces.tar" "$d-traces.tar.part" && rm "$d-traces.tar"
  fi
  rm -rf "$d"
done
ls -la
