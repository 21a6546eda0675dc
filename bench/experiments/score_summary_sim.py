"""Would a compact copy of the scores serve the eviction scan? (issue 11's 2x, bench/RESULTS.md:
"What issue 11's 2x would take".) A CPU simulation, sequential (no racing rows), numba.

The cache's eviction takes the lowest (score, position) of a key's two full 128-slot buckets:
2 KB of u64 scores a row, 0.27 ms a call on the H100 at full load. With a 16-bit summary a slot
that keeps order (s1 < s2 => summary(s1) <= summary(s2)), the scan would read 512 bytes and find
the lowest summary m and the candidates T holding it; the lowest exact score is among T, so
where |T| > 1 and m is lossy the u64 scores of T must be read as well (where m is exact, T's
scores are equal and the earliest position wins, as now). The summary: a value below 4096 as it
is; a larger one as 4096 + (its bit length - 13) * 1024 + its 10 bits below the leading one.

A model cache of 4096 buckets x 128 slots (two choices a key, the emptier bucket while it has
room, then the lowest of both) is filled to full load and fed 200 calls of 4096 keys (60% drawn
from its entries, as `gpuhash bench cache`), under each policy's score rule:
- lru: the call's step (the cache's counter, started at 0, 1e6 or 1e9 calls);
- lfu: 1 on insert, +1 on a hit;
- epoch_lru: (epoch << 32) | step, the epoch moving every 10 calls;
- custom: a random u64 on every write (the eviction-quality feed).
For the timed calls' evictions it prints the share whose scan would need exact scores, and
the mean and 99th percentile of |T| there; for lru, how many calls back the oldest entry's
step lies at the end (the span a summary relative to a moving base would have to cover).
On this machine: python bench/experiments/score_summary_sim.py (under a minute on 2 cores)."""

import numpy as np
from numba import njit

BUCKETS, SLOTS, BATCH, CALLS, HIT = 4096, 128, 4096, 200, 0.6
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True)
def mix(x):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def summary(v):
    if v < np.uint64(4096):
        return np.int64(v)
    length = 64
    while (v >> np.uint64(length - 1)) & np.uint64(1) == 0:
        length -= 1
    low = np.int64((v >> np.uint64(length - 11)) & np.uint64(1023))
    return 4096 + (length - 13) * 1024 + low


@njit(cache=True)
def new_score(policy, old, present, step, epoch, rng_value):
    if policy == 0:  # lru
        return step
    if policy == 1:  # lfu
        return old + np.uint64(1) if present else np.uint64(1)
    if policy == 2:  # epoch_lru
        return (epoch << np.uint64(32)) | (step & np.uint64(0xFFFFFFFF))
    return rng_value  # custom


@njit(cache=True)
def run(policy, step0, seed):
    np.random.seed(seed)
    keys = np.full(BUCKETS * SLOTS, EMPTY, dtype=np.uint64)
    scores = np.zeros(BUCKETS * SLOTS, dtype=np.uint64)
    fill = np.zeros(BUCKETS, dtype=np.int64)
    tie_sizes = np.zeros(CALLS * BATCH, dtype=np.int64)
    evictions, needs_exact = 0, 0
    step = np.uint64(step0)
    total = BUCKETS * SLOTS
    live = 0
    call = 0
    timed = -1
    while True:
        step += np.uint64(1)
        epoch = np.uint64(call // 10)
        if timed < 0 and live >= total:
            timed = call
        if timed >= 0 and call - timed >= CALLS:
            break
        for _ in range(BATCH):
            rnd = np.uint64(np.random.randint(0, 2**62)) * np.uint64(4) + np.uint64(1)
            hit = live > 0 and np.random.random() < HIT
            if hit:
                slot = np.random.randint(0, total)
                while keys[slot] == EMPTY:
                    slot = np.random.randint(0, total)
                scores[slot] = new_score(policy, scores[slot], True, step, epoch, rnd)
                continue
            key = mix(rnd)
            h = mix(key ^ np.uint64(0x9E3779B97F4A7C15))
            b1 = np.int64(h % np.uint64(BUCKETS))
            b2 = np.int64((h >> np.uint64(32)) % np.uint64(BUCKETS))
            score = new_score(policy, np.uint64(0), False, step, epoch, rnd)
            if fill[b1] < SLOTS or fill[b2] < SLOTS:
                b = b1 if fill[b1] <= fill[b2] or fill[b2] >= SLOTS else b2
                if fill[b1] >= SLOTS:
                    b = b2
                for s in range(b * SLOTS, (b + 1) * SLOTS):
                    if keys[s] == EMPTY:
                        keys[s] = key
                        scores[s] = score
                        break
                fill[b] += 1
                live += 1
                continue
            # both full: the lowest (score, position) of b1's slots, then b2's
            best, victim, low_summary = EMPTY, -1, np.int64(1) << 62
            for b in (b1, b2):
                for s in range(b * SLOTS, (b + 1) * SLOTS):
                    if scores[s] < best:
                        best, victim = scores[s], s
                    low_summary = min(low_summary, summary(scores[s]))
                if b2 == b1:
                    break
            if score < best:
                continue  # refused
            if timed >= 0:
                ties = 0
                for b in (b1, b2):
                    for s in range(b * SLOTS, (b + 1) * SLOTS):
                        ties += summary(scores[s]) == low_summary
                    if b2 == b1:
                        break
                evictions += 1
                if low_summary >= 4096 and ties > 1:
                    tie_sizes[needs_exact] = ties
                    needs_exact += 1
            keys[victim] = key
            scores[victim] = score
        call += 1
    oldest = EMPTY
    for s in range(total):
        if keys[s] != EMPTY and scores[s] < oldest:
            oldest = scores[s]
    return evictions, needs_exact, tie_sizes[:needs_exact], step - oldest, call


def main() -> None:
    cases = [("lru", 0, 0), ("lru", 0, 10**6), ("lru", 0, 10**9), ("lfu", 1, 0),
             ("epoch_lru", 2, 0), ("custom", 3, 0)]
    for name, policy, step0 in cases:
        evictions, needs, ties, span, calls = run(policy, step0, 7)
        share = needs / max(evictions, 1)
        mean = float(ties.mean()) if needs else 0.0
        p99 = float(np.percentile(ties, 99)) if needs else 0.0
        age = f"; the oldest entry's step {int(span)} calls back of {calls}" if policy == 0 else ""
        print(f"{name:9s} step from {step0:>13,}: {evictions:,} evictions in {CALLS} calls; "
              f"{share:.4f} of them need exact scores, |T| there mean {mean:.1f}, "
              f"99th percentile {p99:.0f}{age}", flush=True)


if __name__ == "__main__":
    main()
