#!/usr/bin/env bash
# Everything a GPU machine is for, by part: GPU tests, compute-sanitizer, the tests that need
# two GPUs, and the quick benchmarks of this tree beside an earlier tree's.
# Usage: scripts/device_check.sh [tests|sanitize|two-gpus|bench-quick|bench|all]  (results
# under $OUT, default bench/out)
# Wheels in .whl/ are installed first: the CPU engine (the GPU tests' reference) needs a numba
# that imports with the machine's numpy, and the merge tests compare with DuckDB. Once, here:
#   echo /.whl/ >> .git/info/exclude; pip download --no-deps --only-binary=:all: \
#     --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .whl \
#     numba==0.68.1 duckdb
# bench-quick runs an earlier tree too, when it is in .prev/src (once, here:
#   echo /.prev/ >> .git/info/exclude; mkdir -p .prev && git archive <commit> src | tar -x -C .prev)
# The machine's copy of .git may lag the tree it was sent: pass the tree's commit as
# GPUHASH_COMMIT=<hash> (the JSON header uses it first).
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PWD/src:/tmp/site"
fi
python3 -c "import numba, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)" \
  || { echo "the CPU engine needs numba: carry a wheel that imports (see above)"; exit 2; }
export GPUHASH_CACHE_DIR="${GPUHASH_CACHE_DIR:-/tmp/gpuhash-cache}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
mode="${1:-all}"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
python3 -c "import torch, cuda.core; print('torch', torch.__version__, 'cuda.core', cuda.core.__version__)"
TWO_GPU_FILES="tests/test_gpu_core.py tests/test_gpu_cache.py tests/test_gpu_cache_index.py
  tests/test_gpu_join_devices.py tests/test_gpu_streams.py tests/test_join_pool.py
  tests/test_join_radix.py"
bench_quick() {  # $1: label, $2: source tree
  local label=$1 src=$2
  for suite in map cache join; do
    PYTHONPATH="$src:/tmp/site" timeout 240 python3 -m gpuhash.cli bench "$suite" --quick \
      --json "$OUT/${suite}_quick_$label.json" 2>&1 | tee "$OUT/${suite}_quick_$label.log" \
      || status=1
  done
}
case "$mode" in
  tests)
    python3 -m pytest tests -m gpu -q -p no:cacheprovider -k "not sanitizer" 2>&1 \
      | tee "$OUT/gpu_tests.log" || status=1 ;;
  sanitize)
    python3 -m pytest tests -m gpu -q -p no:cacheprovider -k sanitizer 2>&1 \
      | tee "$OUT/sanitizer.log" || status=1 ;;
  two-gpus)
    # shellcheck disable=SC2086
    python3 -m pytest $TWO_GPU_FILES -m gpu -q -p no:cacheprovider -k "not sanitizer" 2>&1 \
      | tee "$OUT/two_gpu_tests.log" || status=1 ;;
  bench-quick)
    if [ -d .prev/src ]; then bench_quick previous "$PWD/.prev/src"; fi
    bench_quick current "$PWD/src" ;;
  bench)
    python3 -m gpuhash.cli bench map --layouts --json "$OUT/map.json" --plot "$OUT/map.png" \
      2>&1 | tee "$OUT/bench.log" || status=1 ;;
  all)
    "$0" tests || status=1
    "$0" sanitize || status=1
    "$0" bench-quick || status=1 ;;
esac
exit $status
