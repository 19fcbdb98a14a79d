#!/bin/bash
# One load run against a real `convlog serve` (docs/performance.md, "The
# server's floor and allocator"):
#
#   crates/server/benches/serve_append.sh CONVLOG_BINARY [SERVER_LOAD_BINARY]
#
# starts `convlog serve` on a fresh store in a temporary directory (one
# user, token `load-token`; 256 contexts ctx_0 .. ctx_255 created first),
# runs `wrk -t2 -c256 -d10s --latency` with append.lua against it (with
# FLOOR=1: against `GET /health` instead), stops it, and prints one line:
# wrk's requests/s, p50, p99, the server's CPU per request (utime + stime
# over the wrk run, /proc/PID/stat) and wrk's (/usr/bin/time). Given the
# server_load bench binary (`cargo bench -p convlog-server --bench
# server_load --no-run`), it then runs its in-process peer (256 threads
# appending with `Durability::Group`) for as long as wrk ran and prints
# the ratio.
#
# SERVER_CPUS and CLIENT_CPUS (taskset lists, e.g. 0 and 1) pin the server
# and the in-process peer to the one set and wrk to the other, so that the
# load generator does not take the cores of the system under test (the two
# are given the same cores). Unset, everything shares every core.
# Needs wrk, python3 and sha256sum (and taskset to pin). Bounded: 10 s of
# load, then 10 s in-process.
set -euo pipefail
bin=$1
inproc_bin=${2:-}
lua="$(cd "$(dirname "$0")" && pwd)/append.lua"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/server.toml" <<TOML
[[agents]]
id = "assistant"
provider = "openai-compatible"
model = "unused"
base_url = "http://127.0.0.1:9/v1"

[[users]]
id = "load"
token_sha256 = "$(printf %s load-token | sha256sum | cut -d' ' -f1)"
TOML
${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$bin" serve "$dir/store" --listen 127.0.0.1:0 --config "$dir/server.toml" 2> "$dir/server.log" &
pid=$!
for _ in $(seq 100); do grep -q "^listening on" "$dir/server.log" && break; kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$dir/server.log")
if [ -z "$addr" ]; then
    echo "convlog serve did not start listening; its output:" >&2
    cat "$dir/server.log" >&2
    kill "$pid" 2> /dev/null || true
    exit 1
fi
python3 - "$addr" <<'PY'
import json, sys, http.client
connection = http.client.HTTPConnection(sys.argv[1])
for i in range(256):
    connection.request("POST", "/contexts",
        json.dumps({"agent_id": "assistant", "context_id": f"ctx_{i}"}),
        {"Authorization": "Bearer load-token", "Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    assert response.status == 201, response.status
PY
load=$(cut -d' ' -f1 /proc/loadavg)
cpu_before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
if [ -n "${FLOOR:-}" ]; then
    target=(-H "Authorization: Bearer load-token" "http://$addr/health")
else
    target=(-s "$lua" "http://$addr")
fi
/usr/bin/time -f "wrkcpu %U %S" ${CLIENT_CPUS:+taskset -c $CLIENT_CPUS} wrk -t2 -c256 -d10s --latency "${target[@]}" > "$dir/wrk.log" 2>&1
cpu_after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
kill -TERM "$pid"
wait "$pid"
requests=$(awk '/requests in/ {print $1}' "$dir/wrk.log")
rate=$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.log")
p50=$(awk '$1 == "50%" {print $2}' "$dir/wrk.log")
p99=$(awk '$1 == "99%" {print $2}' "$dir/wrk.log")
non_2xx=$(awk '/Non-2xx/ {print $NF}' "$dir/wrk.log")
server_cpu=$(awk -v a="$cpu_before" -v b="$cpu_after" -v r="$requests" -v t="$(getconf CLK_TCK)" \
    'BEGIN {printf "%.1f", (b - a) / t * 1e6 / r}')
wrk_cpu=$(awk -v r="$requests" '/wrkcpu/ {printf "%.1f", ($2 + $3) * 1e6 / r}' "$dir/wrk.log")
line="load=$load cpus=${SERVER_CPUS:-all}/${CLIENT_CPUS:-all} requests/s=$rate p50=$p50 p99=$p99 non-2xx=${non_2xx:-0} server-us/request=$server_cpu wrk-us/request=$wrk_cpu"
if [ -n "$inproc_bin" ] && [ -z "${FLOOR:-}" ]; then
    round=$(SERVER_LOAD_INPROC_SECONDS=10 ${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$inproc_bin" --bench 2>&1 \
        | grep -E "^in-process \|")
    in_rate=$(echo "$round" | awk -F'|' '{gsub(/ /, "", $2); print $2}')
    in_cpu=$(echo "$round" | awk -F'|' '{gsub(/ /, "", $5); print $5}')
    ratio=$(awk -v a="$rate" -v b="$in_rate" 'BEGIN {printf "%.2f", a / b}')
    line="$line in-process/s=$in_rate in-process-us/append=$in_cpu ratio=$ratio"
fi
echo "$(date -u +%H:%M:%S) $line"
