#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: GPU tests (compute-sanitizer included) and the
# benchmark. Usage: scripts/device_check.sh [smoke|tests|bench|compare|all]  (results under $OUT)
# compare: the benchmark of the previous release's code and of this tree in the same call. Make
# the previous code travel first (here, once): echo /.prev/ >> .git/info/exclude;
# mkdir -p .prev && git archive <commit> src | tar -x -C .prev; then name .prev in carry.
# Wheels in .whl/ (carried) are installed first: the device image's numba 0.68.0 does not import
# with its numpy 2.5.2, and the CPU engine (the GPU tests' reference) needs numba. Here, once:
# echo /.whl/ >> .git/info/exclude; pip download --no-deps --only-binary=:all: --python-version
# 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .whl numba==0.68.1
# The machine's copy of .git may lag the tree it was sent (a figure's JSON then names an older
# commit): pass the tree's commit as GPUHASH_COMMIT=<hash> (the JSON header uses it first).
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
      PYTHONPATH="$src:/tmp/site" GPUHASH_COMMIT="$side" python3 -m gpuhash.cli bench map \
        --json "$OUT/map_$side.json" 2>&1 | tee "$OUT/bench_$side.log" || status=1
    done ;;
  all)
    "$0" tests || status=1
    "$0" bench || status=1 ;;
esac
exit $status
