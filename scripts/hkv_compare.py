"""HierarchicalKV's benchmark output beside `gpuhash bench cache` JSON of the same device call:
a markdown table per value width, B-KV/s at each load, ours / HKV's and the ratio.
Usage: python scripts/hkv_compare.py <hkv_bench.txt> <cache.json>"""

import json
import re
import sys
from pathlib import Path

# HKV's column names -> ours
COLUMNS = {"insert_or_assign": "insert_or_assign", "find": "find",
           "find_or_insert": "find_or_insert", "assign": "assign", "find*": "find_index",
           "find_or_insert*": "find_or_insert_index", "insert_and_evict": "insert_and_evict"}


def hkv_tables(text: str) -> list[dict]:
    """The first table of each value width in HKV's output: {api: {load: B-KV/s}}."""
    tables, header = [], None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set("".join(cells)) <= set("-:"):
            continue
        if cells[0] == "λ":
            header = cells[1:]
            if "insert_or_assign" in header:
                tables.append({})
            continue
        if header and "insert_or_assign" in header and re.fullmatch(r"[\d.]+", cells[0]):
            for name, value in zip(header, cells[1:]):
                tables[-1].setdefault(COLUMNS[name], {})[float(cells[0])] = float(value)
    return tables


def main(hkv_path: str, ours_path: str) -> None:
    hkv = hkv_tables(Path(hkv_path).read_text())
    ours = json.loads(Path(ours_path).read_text())
    # `gpuhash bench cache --json` nests the workloads under "cache"; a file of the workloads
    # alone (bench/experiments/cache_write_ab.py's, gathered) has them at the top
    works = ours["cache"]["workloads"] if "cache" in ours else ours["workloads"]
    for work, theirs in zip(works, hkv):
        if any(len(theirs.get(api, {})) < 3 for api in COLUMNS.values()):
            print(f"\ndim {work['dim']}: HKV's table is incomplete (its run was cut); skipped")
            continue
        print(f"\ndim {work['dim']}, {work['capacity']:,} slots: B-KV/s at load 0.5 / 0.75 / "
              f"1.0 (wall clock)\n")
        print("| API | gpuhash | HierarchicalKV | ratio |\n|---|---|---|---|")
        timed = work["loads"]["0.5"]
        for ours_api in [*COLUMNS.values(), *(a for a in timed if a.endswith(":unique"))]:
            api = ours_api.partition(":")[0]  # ours with unique=True beside HKV's same API
            mine = [work["loads"][str(x)][ours_api]["bkv_per_s"] for x in (0.5, 0.75, 1.0)]
            them = [theirs[api][x] for x in (0.5, 0.75, 1.0)]
            print(f"| {ours_api} | {' / '.join(f'{v:.2f}' for v in mine)} | "
                  f"{' / '.join(f'{v:.2f}' for v in them)} | "
                  f"{' / '.join(f'{a / b:.2f}' for a, b in zip(mine, them))} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
