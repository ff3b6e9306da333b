#!/usr/bin/env bash
# On the lent H200: a campaign longer than one device call (600 s) runs in its own process session, which the
# device leaves running between calls (device README: a process that started a new session runs on until the
# machine goes back), and each call waits on it and brings back what is finished so far. No point is cut by a
# call's time limit, and a machine taken back loses only what came after the last call's copy.
#   bash scripts/gpu/background.sh start FILE   # FILE: one command a line, '#' comments (e.g. "SCENARIO=x bash scripts/gpu/h200.sh
#                                               # serve a b --set ..."), run one after another from a copy of the tree
#   bash scripts/gpu/background.sh wait SECONDS # until every line is done or SECONDS pass; then the log's tail, and
#                                               # every run directory so far copied to $OUT and packed (pack_out.sh)
#                                               # and SGLang's JIT modules when new ones were compiled
#                                               # ($OUT/jit-cache.tar.xz: <module>/<module>.so; unpack it into
#                                               # .gpu-jit/tvm-ffi here, for bundle.py --jit-cache)
#   bash scripts/gpu/background.sh stop         # SIGTERM to the campaign's process group (runs save what finished)
# Runs are written to /tmp/llmc/runs (OUT inside the campaign; /tmp/llmc is $LLMC_ROOT if set); the log is /tmp/llmc/bg/log, one line per command
# started and ended with its exit code, then its output.
set -uo pipefail
R=${LLMC_ROOT:-/tmp/llmc}  # the bundle's root on the host
bg=$R/bg
case ${1:?start FILE | wait SECONDS | stop} in
  start)
    mkdir -p $bg $R/runs
    rm -rf $bg/repo && cp -a "$(dirname "$0")/../.." $bg/repo && rm -rf $bg/repo/.gpu  # the next call replaces the tree; this copy stays
    cp "${2:?FILE}" $bg/commands
    rm -f $bg/done
    find $R/jit/tvm-ffi ~/.cache/tvm-ffi -name '*.so' 2>/dev/null | sort > $bg/jit-sent  # carried by the bundle: not sent back
    setsid bash -c "cd $bg/repo && export OUT=$R/runs
      while IFS= read -r line; do
        case \"\$line\" in ''|'#'*) continue ;; esac  # blank lines and comments
        echo \"== \$(date -u +%T) start: \$line\"
        bash -c \"\$line\"; rc=\$?; echo \"== \$(date -u +%T) exit \$rc: \$line\"
      done < $bg/commands; touch $bg/done" > $bg/log 2>&1 < /dev/null &
    echo $! > $bg/pid
    echo "started (session leader $(cat $bg/pid)); log $bg/log" ;;
  wait)
    end=$(( $(date +%s) + ${2:?SECONDS} ))
    while [ ! -e $bg/done ] && [ "$(date +%s)" -lt $end ]; do sleep 5; done
    [ -e $bg/done ] && echo "campaign: done" || echo "campaign: still running"
    grep '^== ' $bg/log; echo '-- the log ends:'; tail -n 25 $bg/log
    cp $bg/log "${OUT:?}/campaign.log"
    for d in $R/runs/*/; do [ -d "$d" ] && cp -a "$d" "$OUT/"; done
    jit=$(find $R/jit/tvm-ffi ~/.cache/tvm-ffi -name '*.so' 2>/dev/null | sort)  # env.sh's TVM_FFI_CACHE_DIR, or the default
    if [ -n "$jit" ] && [ "$jit" != "$(cat $bg/jit-sent 2>/dev/null)" ]; then
      echo "$jit" | tar cJf "$OUT/jit-cache.tar.xz" --transform 's|.*/tvm-ffi/||' -T - 2>/dev/null && echo "$jit" > $bg/jit-sent
      echo "SGLang JIT modules packed: $(echo "$jit" | wc -l)"
    fi
    bash "$(dirname "$0")/pack_out.sh" ;;
  stop)
    kill -TERM -- -"$(cat $bg/pid)" 2>/dev/null; sleep 20; echo stopped ;;
  *) echo "usage: $0 start FILE | wait SECONDS | stop" >&2; exit 2 ;;
esac
