#!/usr/bin/env bash
# HierarchicalKV's own benchmark beside `gpuhash bench cache`, in one call on a GPU machine.
# Build here (needs nvcc; never committed: .hkv/ is ignored), once:
#   echo /.hkv/ >> .git/info/exclude; mkdir -p .hkv
#   git -C <snapshot of github.com/NVIDIA-Merlin/HierarchicalKV at ae24eec> archive HEAD | tar -x -C .hkv
#   scripts/hkv_side_by_side.sh build
# then on the GPU machine (carry .hkv): scripts/hkv_side_by_side.sh run   (results under $OUT)
# and here: python scripts/hkv_compare.py $OUT/hkv_bench.txt $OUT/cache.json
# The build patches one line into the copy of HKV's benchmark: with HKV_PURE_HBM_ONLY set it
# stops after its pure-HBM tables (dim 8, 32, 64), before the hybrid ones (up to 128 GB of host
# memory).
set -euo pipefail
case "${1:-}" in
  build)
    cd .hkv
    python3 - <<'PY'
from pathlib import Path
p = Path("benchmark/merlin_hashtable_benchmark.cc.cu")
s = p.read_text()
mark = '      cout << "### On HBM+HMEM hybrid mode: " << endl;'
stop = '      if (getenv("HKV_PURE_HBM_ONLY")) return 0;\n'
if stop not in s:
    p.write_text(s.replace(mark, stop + mark))
PY
    nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I include -I benchmark \
      benchmark/merlin_hashtable_benchmark.cc.cu -o hkv_bench ;;
  run)
    OUT="${OUT:-bench/out}"; mkdir -p "$OUT"
    export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
    HKV_PURE_HBM_ONLY=1 stdbuf -oL .hkv/hkv_bench > "$OUT/hkv_bench.txt" 2>&1
    python3 -m gpuhash.cli bench cache --runs 7 --json "$OUT/cache.json" --plot "$OUT/cache.png" \
      > "$OUT/cache.log" 2>&1 ;;
  *) echo "usage: $0 build|run"; exit 2 ;;
esac
