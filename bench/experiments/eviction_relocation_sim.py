"""What moving an entry to its other bucket before evicting would buy CacheMap (issue 11: first
eviction at load >= 0.98): a sequential simulation of bucket fills, not the cache. Keys pick
two random buckets of `width` slots (b1, b2) and go to the emptier; when both are full, the
plain rule evicts, while the relocating rule first looks for an entry of b1 or b2 whose other
bucket has room (up to `tries` entries, the emptiest other bucket first) and moves it. Prints
the load at the first eviction for each rule, bucket count and width, averaged over seeds.
Run: python bench/experiments/eviction_relocation_sim.py (CPU, numba; about a minute)."""

import numba
import numpy as np


@numba.njit(cache=True)
def first_eviction(num_buckets, width, tries, seed):
    np.random.seed(seed)
    fill = np.zeros(num_buckets, np.int64)
    # each slot remembers its entry's other bucket
    other = np.zeros((num_buckets, width), np.int64)
    capacity = num_buckets * width
    for placed in range(capacity):
        b1 = np.random.randint(num_buckets)
        b2 = np.random.randint(num_buckets)
        if fill[b1] > fill[b2]:
            b1, b2 = b2, b1
        if fill[b1] < width:
            other[b1, fill[b1]] = b2
            fill[b1] += 1
            continue
        moved = False
        for bucket, alt in ((b1, b2), (b2, b1)):
            best, best_fill = -1, width
            for i in range(min(tries, width)):
                target = other[bucket, i]
                if fill[target] < best_fill:
                    best, best_fill = i, fill[target]
            if best >= 0:
                target = other[bucket, best]
                other[target, fill[target]] = bucket
                fill[target] += 1
                other[bucket, best] = alt  # the new key takes the freed slot
                moved = True
                break
        if not moved:
            return placed / capacity
    return 1.0


def main():
    for num_buckets in (1 << 15, 1 << 20):
        for width in (64, 128):
            for tries in (0, 8, 32, width):
                seeds = range(3)
                loads = [first_eviction(num_buckets, width, tries, s) for s in seeds]
                print(f"{num_buckets:>8} buckets x {width:>3} slots, relocation tries "
                      f"{tries:>3}: first eviction at load {np.mean(loads):.4f} "
                      f"({min(loads):.4f}-{max(loads):.4f})", flush=True)


if __name__ == "__main__":
    main()
