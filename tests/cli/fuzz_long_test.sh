#!/usr/bin/env bash
# scripts/fuzz-long with --jobs: the log is in seed order whichever chunk ends first, a failing
# chunk's missing cases are made up by later seeds, and a run cut short (SIGTERM, the time
# budget) interrupts each running chunk once and logs every chunk that ran. One real run of
# flashref (2 jobs x 3 chunks of 20 small cases); the rest with a stand-in for flashref whose
# timing and verdicts are fixed, so the checks do not depend on the machine's speed.
#
#   tests/cli/fuzz_long_test.sh FLASHREF
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
flashref=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-long-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check WHAT CONDITION...: prints and counts a failed condition
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what" >&2
    failures=$((failures + 1))
  fi
}
column() { tail -n +2 "$1" | cut -f "$2" | paste -sd, -; }

# 1. The real binary: 3 chunks of 20 cases on 2 jobs, logged in seed order, 60 cases in all.
"$root/scripts/fuzz-long" --bin "$flashref" --backends cpu --cases 60 --chunk 20 --jobs 2 \
  --seed 500 --out "$tmp/real" -- --max-seq 12 >"$tmp/real.out" 2>&1
rc=$?
check "real run exits 0 (rc $rc)" test "$rc" -eq 0
check "real run: seeds in order" test "$(column "$tmp/real/cpu.tsv" 2)" = 500,501,502
check "real run: 20 cases per chunk" test "$(column "$tmp/real/cpu.tsv" 3)" = 20,20,20
check "real run: every chunk passed" test "$(column "$tmp/real/cpu.tsv" 6)" = pass,pass,pass
check "real run: summary totals" grep -q "^cpu: 60 cases in .* 3 chunks (seeds 500-502), 0 failing" \
  "$tmp/real/summary.txt"
check "real run: summary names the jobs" grep -q "jobs 2 (OMP_NUM_THREADS" "$tmp/real/summary.txt"

# The stand-in: `fuzz --cases N --seed S` sleeps, then reports N cases and passes. Seed 101
# fails after 5 cases; seeds 100 and 102 run longer than 101 and 103, so later seeds end
# first. With STUB_SLEEP=long every chunk runs until it is interrupted: the first SIGINT ends
# it with the cases "run so far" (exit 130), and a second one would exit 99.
stub=$tmp/flashref
cat >"$stub" <<'EOF'
#!/usr/bin/env bash
while (($#)); do
  case $1 in --cases) cases=$2; shift 2 ;; --seed) seed=$2; shift 2 ;; *) shift ;; esac
done
ints=0
trap 'ints=$((ints + 1))' INT
report() { printf '{\n  "cases": %s,\n  "seconds": 0.5,\n  "unsupported": 0\n}\n' "$1"; }
if [[ ${STUB_SLEEP:-} == long ]]; then
  [[ -n ${STUB_STARTED:-} ]] && : >"$STUB_STARTED.$seed"  # the test waits for these
  sleep 60 & wait $!
  kill $! 2>/dev/null
  ((ints == 1)) || exit 99
  sleep 0.3 & wait $!  # time for a second SIGINT to arrive, if one were sent
  ((ints == 1)) || exit 99
  report 7
  exit 130
fi
case $seed in 100 | 102) sleep 0.6 ;; *) sleep 0.1 ;; esac
if ((seed == 101)); then report 5; exit 1; fi
report "$cases"
EOF
chmod +x "$stub"

# 2. Order and make-up: 4 x 10 cases asked; seed 101 fails after 5, so seed 104 runs 5 more.
"$root/scripts/fuzz-long" --bin "$stub" --backends cpu --cases 40 --chunk 10 --jobs 3 \
  --seed 100 --out "$tmp/order" >"$tmp/order.out" 2>&1
rc=$?
check "a failing chunk: exit 1 (rc $rc)" test "$rc" -eq 1
check "seed order although later seeds end first" test "$(column "$tmp/order/cpu.tsv" 2)" = \
  100,101,102,103,104
check "the failure's missing cases made up" test "$(column "$tmp/order/cpu.tsv" 3)" = 10,5,10,10,5
check "verdicts" test "$(column "$tmp/order/cpu.tsv" 6)" = pass,FAIL,pass,pass,pass
check "one failure logged" test "$(wc -l <"$tmp/order/cpu-failures.jsonl")" -eq 1
check "summary totals" grep -q "^cpu: 40 cases in .* 5 chunks (seeds 100-104), 1 failing" \
  "$tmp/order/summary.txt"

# 3. SIGTERM while 2 chunks run: each is interrupted once, both are logged, summary, exit 130.
# (Job control for this launch: without it the script and its chunks would inherit an ignored
# SIGINT, which the stand-in, a shell script, could not trap; flashref's own handler could.)
# The signal goes once both chunks have started (each stand-in leaves a file), however slowly
# a loaded machine starts them.
set -m
STUB_SLEEP=long STUB_STARTED=$tmp/started "$root/scripts/fuzz-long" --bin "$stub" --backends cpu \
  --cases 100 --chunk 10 --jobs 2 --seed 200 --out "$tmp/term" >"$tmp/term.out" 2>&1 &
pid=$!
set +m
for ((i = 0; i < 600; ++i)); do
  [[ -e $tmp/started.200 && -e $tmp/started.201 ]] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM: exit 130 (rc $rc)" test "$rc" -eq 130
check "SIGTERM: both running chunks logged, interrupted once" \
  test "$(column "$tmp/term/cpu.tsv" 6)" = interrupted,interrupted
check "SIGTERM: their cases counted" grep -q "^cpu: 14 cases in .* 2 chunks (seeds 200-201), interrupted" \
  "$tmp/term/summary.txt"

# 4. The time budget cuts the running chunks instead of waiting a chunk's length (60 s) past it.
# Its 3 s leave a loaded machine time to start both chunks.
t0=$SECONDS
STUB_SLEEP=long "$root/scripts/fuzz-long" --bin "$stub" --backends cpu --cases 100 --chunk 10 \
  --jobs 2 --seconds 3 --seed 300 --out "$tmp/budget" >"$tmp/budget.out" 2>&1
rc=$?
check "budget: exit 0 (rc $rc)" test "$rc" -eq 0
check "budget: ends within seconds ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 20
check "budget: chunks logged" test "$(column "$tmp/budget/cpu.tsv" 6)" = interrupted,interrupted
check "budget: summary" grep -q "cut at the 3s budget" "$tmp/budget/summary.txt"

# 5. Bad usage.
"$root/scripts/fuzz-long" --bin "$stub" --jobs 0 --out "$tmp/bad" >"$tmp/bad.out" 2>&1
rc=$?
check "--jobs 0: exit 2 (rc $rc)" test "$rc" -eq 2
check "--jobs 0: named" grep -q -- "--jobs" "$tmp/bad.out"
check "--jobs 0: nothing written" test ! -e "$tmp/bad"

if ((failures)); then
  for f in "$tmp"/*.out; do echo "== $f"; cat "$f"; done
  exit 1
fi
echo "fuzz-long: all checks passed"
