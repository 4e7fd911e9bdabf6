#!/usr/bin/env bash
# scripts/fuzz.sh: the long run of the damaged-archive fuzz test (issue 8).
#
#   bash scripts/fuzz.sh [CASES [SEED]]      default 3000 cases, seed 1
#
# Runs t/018_fuzz.pl through scripts/test.sh with FUZZ_CASES/FUZZ_SEED and
# prints its figures: cases, SQL calls, backend crashes, hangs, errors
# without SQLSTATE, internal/resource errors, the session's fd count and
# RSS at the start and the end, cs_decode.py exit codes and internal errors.
# It builds and installs like scripts/test.sh: on a shared machine hold the
# host lock (flock /tmp/changestream-host.lock bash scripts/fuzz.sh ...).
set -uo pipefail
cases=${1:-3000}
seed=${2:-1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$(mktemp)
FUZZ_CASES=$cases FUZZ_SEED=$seed SKIP_REGRESS=1 PROVE_FLAGS="${PROVE_FLAGS:-} -v" \
	bash "$here/test.sh" t/018_fuzz.pl 2>&1 | tee "$out" | grep -E '^(not ok|ok) |FUZZ FIGURES|first problems|^# case ' 
rc=${PIPESTATUS[0]}
echo
grep -h 'FUZZ FIGURES' "$out" | sed 's/^# *//'
rm -f "$out"
exit "$rc"
