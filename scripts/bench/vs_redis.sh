#!/usr/bin/env bash
# Tidelog vs Redis Streams, issue 26's method, N interleaved rounds. Each round: a fresh one-broker
# cluster (`tidelog up --detach` in a temp dir; topics RF 1), `tidelog bench produce` then
# `tidelog bench consume` of RECORDS records (1 KiB values, 16-byte keys), the broker's CPU per record
# over the produce run (scripts/bench/broker_cpu.py: /proc utime+stime and on-CPU time), then
# scripts/bench/redis_streams.py (redis-server, AOF everysec, 1,000 XADDs per pipeline, XREAD 1,000 at a
# time) with the same records; prints each round's ratios produce/XADD and consume/XREAD.
#   scripts/bench/vs_redis.sh N [RECORDS]        (RECORDS: 300000 by default; env TIDELOG: the CLI)
# Run it on a quiet machine: figures taken while other work loads the cores are not meaningful.
set -u
N=${1:?usage: vs_redis.sh N [RECORDS]}
RECORDS=${2:-300000}
WARMUP=$(( RECORDS / 6 ))
HERE=$(cd "$(dirname "$0")/../.." && pwd)
TIDELOG=${TIDELOG:-tidelog}
cd "$HERE" || exit 1
for r in $(seq 1 "$N"); do
  D=$(mktemp -d /tmp/vs-redis-XXXX)
  if ! $TIDELOG up --detach --data-dir "$D" --brokers 1 --controllers 1 --cleaners 0 --coordinators 0 \
      --quotas 0 >"$D/up.log" 2>&1; then
    echo "round $r: tidelog up failed (see $D/up.log)"; continue
  fi
  BPID=$(python -c "import json; print([p for p in json.load(open('$D/cluster.json'))['processes'] if p['role'] == 'broker'][0]['pid'])")
  CPU=$(PYTHONPATH="$HERE" python scripts/bench/broker_cpu.py --json "$BPID" "$RECORDS" -- \
      $TIDELOG bench produce --data-dir "$D" --topic t --records "$RECORDS" --record-size 1024 --key-size 16 \
      --replication-factor 1 --warmup-records "$WARMUP" --no-progress --json 2>/dev/null)
  P=$(printf '%s\n' "$CPU" | grep -v broker_us_per_record | tail -1)
  CPU=$(printf '%s\n' "$CPU" | grep broker_us_per_record | tail -1)
  C=$($TIDELOG bench consume --data-dir "$D" --topic t --records "$RECORDS" --no-progress --json 2>/dev/null | tail -1)
  $TIDELOG down --data-dir "$D" >/dev/null 2>&1
  rm -rf "$D"
  R=$(python scripts/bench/redis_streams.py --records "$RECORDS" --record-size 1024 --key-size 16 --json 2>&1 | tail -1)
  python - "$r" "$P" "$C" "$R" "$CPU" <<'PY'
import json, sys
r, p, c, rd, cpu = sys.argv[1:]
def load(s: str) -> dict:
    try:
        return json.loads(s)
    except ValueError:
        return {"error": s[:200]}
p, c, rd, cpu = load(p), load(c), load(rd), load(cpu)
def rate(d: dict) -> float | None:
    if "records_per_s" not in d:
        return None
    return (d.get("steady_state") or {}).get("records_per_s") or d["records_per_s"]
prod, cons = rate(p), rate(c)
xadd, xread = rd.get("xadd_records_per_s"), rd.get("xread_records_per_s")
if None in (prod, cons, xadd, xread):
    print(f"round {r}: failed: produce {p.get('error', '')} consume {c.get('error', '')} redis {rd.get('error', '')}")
    sys.exit(0)
tot = cpu.get("broker_us_per_record", {}).get("total", {})
print(f"round {r}: produce {prod:,.0f} / XADD {xadd:,.0f} = {prod / xadd:.2f}x; consume {cons:,.0f} / XREAD "
      f"{xread:,.0f} = {cons / xread:.2f}x; broker CPU per produced record {tot.get('cpu', float('nan')):.2f} us "
      f"(user {tot.get('user', float('nan')):.2f} + sys {tot.get('sys', float('nan')):.2f}); redis-py parser "
      f"{rd.get('parser')}", flush=True)
PY
done
