#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: GPU tests (compute-sanitizer included) and the
# benchmark. Usage: scripts/device_check.sh [smoke|tests|bench|compare|all]  (results under $OUT)
# compare: the benchmark of the previous release's code and of this tree in the same call. Make
# the previous code travel first (here, once): echo /.prev/ >> .git/info/exclude;
# mkdir -p .prev && git archive <commit> src | tar -x -C .prev; then name .prev in carry.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
export GPUHASH_CACHE_DIR="${GPUHASH_CACHE_DIR:-/tmp/gpuhash-cache}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
mode="${1:-all}"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
python3 -c "import torch, cuda.core; print('torch', torch.__version__, 'cuda.core', cuda.core.__version__)"
case "$mode" in
  smoke)
    python3 -m pytest tests -m gpu -x -q -p no:cacheprovider -k "not sanitizer" 2>&1 \
      | tee "$OUT/gpu_tests.log" || status=1
    python3 -m gpuhash.cli bench map --quick --runs 3 --json "$OUT/map_quick.json" 2>&1 \
      | tee "$OUT/bench_quick.log" || status=1 ;;
  tests)
    python3 -m pytest tests -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" \
      || status=1 ;;
  bench)
    python3 -m gpuhash.cli bench map --layouts --json "$OUT/map.json" --plot "$OUT/map.png" \
      2>&1 | tee "$OUT/bench.log" || status=1 ;;
  compare)
    [ -d .prev/src ] || { echo "compare needs the previous code in .prev/src"; exit 2; }
    for side in previous current; do
      src="$PWD/src"; [ "$side" = previous ] && src="$PWD/.prev/src"
      PYTHONPATH="$src" GPUHASH_COMMIT="$side" python3 -m gpuhash.cli bench map \
        --json "$OUT/map_$side.json" 2>&1 | tee "$OUT/bench_$side.log" || status=1
    done ;;
  all)
    "$0" tests || status=1
    "$0" bench || status=1 ;;
esac
exit $status
