#!/usr/bin/env bash
# Interleaved A/B of the broker's produce cost across source trees (e.g. a commit before the request
# pipeline, main, a branch). Each round starts a one-broker cluster per tree, in turn, and reports the
# broker's CPU per record (utime+stime from /proc, less sensitive to other load than records/s).
#   scripts/bench/ab_produce.sh MODE ROUNDS N TREE[:q] ...
#   MODE bench:  `bench produce` of N records (50k warm-up) then `bench consume`, as /work/notes/ab/ab.sh
#   MODE replay: N pre-encoded 1 MiB requests (scripts/bench/produce_replay.py): the client costs ~nothing
#   TREE:q       that tree with a quota service and a <default> client-id quota far above the rate
#                (set, never exceeded)
# Run from a tree that has scripts/bench (the replay client runs from it); figures are noisy on a shared machine.
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
MODE=$1; ROUNDS=$2; N=$3; shift 3
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for r in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    T=${spec%:q}; Q=0; [ "$spec" != "$T" ] && Q=1
    D=$(mktemp -d /tmp/ab-produce-XXXX)
    (cd "$T" && python -m shared.cli.main up --detach --data-dir "$D" --brokers 1 --controllers 1 --cleaners 0 \
        --coordinators 0 --quotas $Q >/dev/null 2>&1) || { echo "up failed: $T"; continue; }
    if [ $Q = 1 ]; then
      (cd "$T" && python -m shared.cli.main quotas alter --data-dir "$D" --entity-type clients --entity-default \
          --add producer_byte_rate=100000000000,consumer_byte_rate=100000000000 >/dev/null) || echo "quota alter failed"
    fi
    read -r BPID ADDR < <(python -c "import json; b = [p for p in json.load(open('$D/cluster.json'))['processes'] if p['role'] == 'broker'][0]; print(b['pid'], b['address'])")
    if [ "$MODE" = replay ]; then
      (cd "$T" && python -m shared.cli.main bench produce --data-dir "$D" --topic t --records 20000 --no-progress --json >/dev/null 2>&1)
      c0=$(cpu $BPID)
      OUT=$(cd "$HERE" && PYTHONPATH="$HERE" python scripts/bench/produce_replay.py "$ADDR" t "$N")
      c1=$(cpu $BPID)
      echo "round $r $spec: $OUT; broker $(python -c "print(f'{($c1 - $c0) * 10 / $N:.3f}')") us/record"
    else
      c0=$(cpu $BPID)
      P=$(cd "$T" && python -m shared.cli.main bench produce --data-dir "$D" --topic t --records "$N" --warmup-records 50000 --no-progress --json 2>/dev/null | tail -1)
      c1=$(cpu $BPID)
      C=$(cd "$T" && python -m shared.cli.main bench consume --data-dir "$D" --topic t --records "$N" --no-progress --json 2>/dev/null | tail -1)
      c2=$(cpu $BPID)
      python - "$r" "$spec" "$P" "$C" "$c0" "$c1" "$c2" "$N" <<'PY'
import json, sys
r, spec, p, c, c0, c1, c2, n = sys.argv[1:]
c0, c1, c2, n = int(c0), int(c1), int(c2), int(n)
def rate(s: str) -> object:
    try:
        d = json.loads(s)
        return round(d.get("steady_state", {}).get("records_per_s") or d["records_per_s"])
    except Exception:
        return s[:80]
print(f"round {r} {spec}: produce {rate(p)} consume {rate(c)} records/s; broker us/record "
      f"produce {(c1 - c0) / 100 / n * 1e6:.2f} consume {(c2 - c1) / 100 / n * 1e6:.2f}", flush=True)
PY
    fi
    (cd "$T" && python -m shared.cli.main down --data-dir "$D" >/dev/null 2>&1)
    rm -rf "$D"
  done
done
