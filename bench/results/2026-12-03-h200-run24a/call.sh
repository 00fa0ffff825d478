#!/usr/bin/env bash
# Run 24a (prepared at the end of the 2026-12-03 stop, for the next one; needs
# scripts/device-build at HEAD first): the default build's suites with the new persistent
# verify and sanitizer steps (the d = 128 forward's TMA epilogue on several tiles a block).
# call24b.sh has the goal's table and the profiles.
set -u
cd "$(dirname "$0")/.."
date -u; cat .device/commit
t0=$SECONDS
OUT=$OUT/suites bash scripts/device-run tests sanitize > /dev/null 2>&1
echo "suites rc=$? $((SECONDS-t0))s"; grep -E ' (FAIL|fail)' $OUT/suites/summary.txt | head; grep -E 'persistent' $OUT/suites/summary.txt
cp $OUT/suites/summary.txt $OUT/summary.txt; tar -C $OUT -czf $OUT/suites.tgz suites && rm -rf $OUT/suites
date -u
