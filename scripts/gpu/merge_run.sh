#!/usr/bin/env bash
# Merges a run directory that came back from the device (NEW) into the local one (OLD), after a resume that
# carried only run.json and the small *.metrics/*.series files of OLD (a few hundred KB instead of the whole run):
# those and run.json replace; request, profile-request, server- and client-log files (the device's hold only what the
# resume appended) are appended to the local .xz; telemetry gzip members are appended; traces are copied.
#   bash scripts/gpu/merge_run.sh /work/.device/N/runs/RUN reports/.../RUN
set -euo pipefail
new=${1:?NEW run dir}; old=${2:?OLD run dir}
for f in "$new"/*; do
  b=$(basename "$f")
  case $b in
    run.json|*.metrics.jsonl|*.series.jsonl) cp "$f" "$old/$b" ;;
    *.requests.jsonl|*.server.log|*.client.log)
      if [ -e "$old/$b.xz" ]; then { xzcat "$old/$b.xz"; cat "$f"; } | xz -6 > "$old/$b.xz.new" && mv "$old/$b.xz.new" "$old/$b.xz"
      elif [ -e "$old/$b" ]; then cat "$f" >> "$old/$b"; xz -6 "$old/$b"
      else xz -6 -c "$f" > "$old/$b.xz"; fi ;;
    *.telemetry.jsonl.gz) cat "$f" >> "$old/$b" ;;
    *) [ -e "$old/$b" ] && echo "kept local $b (also came back)" || cp "$f" "$old/$b" ;;
  esac
done
ls -la "$old"
