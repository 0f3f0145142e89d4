#!/usr/bin/env bash
# Run the Redis kill/restart-under-traffic scenario N times in a row (issue 11),
# each in a fresh pytest process, and stop at the first failure with its log.
#
#   bash scripts/redis_kill_loop.sh [N=50] [per-run timeout s=60]
#
# A hang fails the run at the timeout, after tests/hang_guard.py has printed
# every pending asyncio task and thread stack into the run's log.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
LIMIT=${2:-60}
TEST="tests/gateway/test_shared_redis.py::test_redis_killed_under_traffic_fails_nothing"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/redis-kill-loop.XXXXXX")
began=$(date +%s)
for i in $(seq 1 "$N"); do
    t0=$(date +%s.%N)
    .venv/bin/python -m pytest "$TEST" -q -p no:cacheprovider -o timeout="$LIMIT" \
        >"$LOGS/run-$i.log" 2>&1
    rc=$?
    printf 'run %3d/%d: rc=%d in %.1f s\n' "$i" "$N" "$rc" "$(echo "$(date +%s.%N) - $t0" | bc)"
    if [ "$rc" -ne 0 ]; then
        echo "FAILED on run $i of $N; log: $LOGS/run-$i.log"
        tail -n 80 "$LOGS/run-$i.log"
        exit 1
    fi
done
echo "all $N runs passed in $(( $(date +%s) - began )) s (logs: $LOGS)"
