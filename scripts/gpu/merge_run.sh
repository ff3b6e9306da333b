#!/usr/bin/env bash
# Merges a run directory that came back from the device (NEW) into the local one (OLD), after a resume that
# carried only run.json and the small *.metrics/*.series files of OLD (a few hundred KB instead of the whole run):
# those and run.json replace; request, profile-request, server- and client-log files (the device's hold only what the
# resume appended) are appended to the local .xz; telemetry gzip members are appended; traces are copied.
#   bash scripts/gpu/merge_run.sh /work/.device/N/runs/RUN reports/.../RUN
# The merge is made in a copy of OLD and kept only when every complete point of the merged run.json has its request
# lines on file (llmcompare.schema.request_lines): a measurement without them is never produced.
set -euo pipefail
new=${1:?NEW run dir}; dest=${2:?OLD run dir}
py=${PYTHON:-$(dirname "$0")/../../.venv/bin/python}
old=$(mktemp -d "$(dirname "$dest")/.merge.XXXXXX")
trap 'rm -rf "$old"' EXIT
cp -a "$dest"/. "$old"/
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
if ! "$py" -m llmcompare.schema.request_lines "$old"; then
  echo "merge_run.sh: refused: $dest left as it was (bring the missing request files back, then merge again)" >&2
  exit 1
fi
rm -rf "$dest.premerge"; mv "$dest" "$dest.premerge" && mv "$old" "$dest" && rm -rf "$dest.premerge"
trap - EXIT
ls -la "$dest"
