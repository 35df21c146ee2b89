#!/usr/bin/env bash
# The distributed cases that end their job on purpose, run under mpirun and
# checked from outside: a hung rank is named and the job ends by the deadline;
# an error on one rank ends every rank; mismatched collectives are named (debug).
#   faults.sh MPIRUN TESSERA_DIST_TESTS
set -uo pipefail
mpirun=$1 bin=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$out"; exit 1; }

# A rank that never arrives: rank 0's watchdog names it, with its step, and the job ends (exit 124).
start=$(date +%s)
TESSERA_DIST_TIMEOUT=3 timeout 60 "$mpirun" -np 2 --bind-to none "$bin" --gtest_filter=DistFault.HungRank* >"$out" 2>&1
rc=$? took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || fail "hung rank: the job exited 0"
[ $rc -ne 124 ] || [ $took -lt 55 ] || fail "hung rank: the job did not end by itself (outer timeout)"
grep -q "rank 0: allreduce f32\[1024\] #1 on world did not complete within 3 s" "$out" || fail "hung rank: no deadline line"
grep -q "ranks that did not arrive: rank 1 (step 10" "$out" || fail "hung rank: rank 1 not named with its step"
echo "hung rank: named, job ended in ${took} s (rc $rc)"

# An error on one rank ends the others, which wait in a barrier.
start=$(date +%s)
timeout 60 "$mpirun" -np 4 --bind-to none "$bin" --gtest_filter=DistFault.ErrorOnOneRank* >"$out" 2>&1
rc=$? took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "error on one rank: rc $rc"
[ $took -lt 30 ] || fail "error on one rank: took ${took} s"
echo "error on one rank: job ended in ${took} s (rc $rc)"

# Mismatched collectives under TESSERA_DIST_DEBUG=1: both ranks report both sides and the test passes.
TESSERA_DIST_DEBUG=1 timeout 60 "$mpirun" -np 2 --bind-to none "$bin" --gtest_filter=DistDebug.* >"$out" 2>&1 ||
  fail "debug mismatch: the test failed"
[ "$(grep -c 'rank 0 runs allreduce f32\[1024\] #1 sum, rank 1 runs broadcast i64\[1\] #1 (root 0)' "$out")" -ge 2 ] ||
  fail "debug mismatch: not reported on both ranks"
echo "debug mismatch: reported on both ranks"
