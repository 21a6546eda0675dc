// The evicting cache's table type and its one bounded probe: a key lives in one of its two
// buckets (the core's gh_home), found through one digest byte a slot, placed in the emptier
// bucket, or in place of the lowest score of both when they are full. _cache_format.py states
// the rules; engines/_cpu_cache_loops.py is the CPU twin, row by row.
//
// Concurrency within a launch (rows hold distinct keys: the host keeps one row per key).
// A writer owns a slot while its key word holds GH_LOCKED: it takes a free slot by CAS from
// EMPTY, an entry it assigns or evicts by CAS from that entry's key. It then writes the value,
// score and digest, and publishes the key with a release store. Searches compare digests, then
// load the key with acquire order, so a key they see has its value and score in place; a
// LOCKED key matches nothing. A free slot is one whose digest is 0: a claimer that sees 0
// while another row already holds the slot fails its CAS and looks further.
#pragma once
#include "open_addressing.cuh"

constexpr gh_u64 GH_LOCKED = ~0ULL - 1;  // _cache_format.LOCKED_KEY
enum GhPolicy { GH_LRU = 0, GH_LFU = 1, GH_EPOCH_LRU = 2, GH_EPOCH_LFU = 3, GH_CUSTOM = 4 };
enum GhCacheStatus {
    GH_INSERTED = 0, GH_ASSIGNED = 1, GH_INSERTED_EVICTING = 2, GH_REFUSED = 3, GH_SKIPPED = 4,
    GH_SUPERSEDED = 5
};

template <int VALUE_BYTES_, int BUCKET_SLOTS_>
struct GhCache {
    static constexpr int VALUE_BYTES = VALUE_BYTES_;
    static constexpr int BUCKET = BUCKET_SLOTS_;  // 16, 32, 64 or 128
    static constexpr int KEY_BYTES = 8;
    gh_u64* keys;
    gh_u8* digests;
    gh_u64* scores;
    char* values;
    gh_i64* counts;  // [live entries]
    gh_u64 num_buckets;
    gh_u64 seed;
    __device__ __forceinline__ char* value(gh_u64 slot) const {
        return values + slot * VALUE_BYTES;
    }
};

#define GH_CACHE_PARAMS gh_u64 *keys_, gh_u8 *digests, gh_u64 *scores, char *values, \
                        gh_i64 *counts, gh_u64 num_buckets, gh_u64 seed
#define GH_CACHE_REF(C) C{keys_, digests, scores, values, counts, num_buckets, seed}

// 8 bits of a second mix of the key's hash (no bucket choice reads them), never 0.
__device__ __forceinline__ gh_u32 gh_digest(gh_u64 hash) {
    const gh_u32 d = static_cast<gh_u32>(gh_mix64(hash) >> 56);
    return d == 0 ? 1 : d;
}

__device__ __forceinline__ gh_u64 gh_load_acquire(const gh_u64* p) {
    gh_u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void gh_store_release(gh_u64* p, gh_u64 v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

// A bucket's digests, loaded in one go (every load issued before any is compared: a scan
// that stopped between loads would wait for each in turn).
template <class C>
struct GhDigests {
    uint4 q[C::BUCKET / 16];
};

template <class C, bool COHERENT>
__device__ __forceinline__ void gh_load_digests(const C& t, gh_u64 bucket, GhDigests<C>& d) {
    const uint4* p = reinterpret_cast<const uint4*>(t.digests + bucket * C::BUCKET);
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) d.q[i] = COHERENT ? __ldcg(p + i) : __ldg(p + i);
}

// Calls f(slot) for every slot of the bucket whose digest equals `pattern`'s byte (pattern
// holds it four times), in slot order, until f returns true; returns whether one did.
template <class C, class F>
__device__ __forceinline__ bool gh_each_match(const GhDigests<C>& d, gh_u64 bucket,
                                              gh_u32 pattern, F&& f) {
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) {
        const gh_u32 words[4] = {d.q[i].x, d.q[i].y, d.q[i].z, d.q[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            gh_u32 m = __vcmpeq4(words[j], pattern);
            while (m) {
                const int byte = (__ffs(m) - 1) >> 3;
                m &= ~(0xffu << (byte * 8));
                if (f(bucket * C::BUCKET + i * 16 + j * 4 + byte)) return true;
            }
        }
    }
    return false;
}

// Free slots of a bucket (digest 0).
template <class C>
__device__ __forceinline__ int gh_free_slots(const GhDigests<C>& d) {
    int free = 0;
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) {
        free += __popc(__vcmpeq4(d.q[i].x, 0)) + __popc(__vcmpeq4(d.q[i].y, 0)) +
                __popc(__vcmpeq4(d.q[i].z, 0)) + __popc(__vcmpeq4(d.q[i].w, 0));
    }
    return free >> 3;
}

// The slot holding key among its two buckets, -1 if none. The digests it loaded stay in d1
// (and d2, loaded unless the key was found in b1) for a claim that follows.
template <class C, bool COHERENT>
__device__ __forceinline__ gh_i64 gh_cache_locate(const C& t, const GhHome& home, gh_u64 key,
                                                 gh_u32 digest, GhDigests<C>& d1,
                                                 GhDigests<C>& d2) {
    gh_i64 found = -1;
    const auto match = [&](gh_u64 slot) {
        const gh_u64 k = COHERENT ? gh_load_acquire(t.keys + slot) : __ldg(t.keys + slot);
        if (k != key) return false;
        found = static_cast<gh_i64>(slot);
        return true;
    };
    const gh_u32 pattern = digest * 0x01010101u;
    gh_load_digests<C, COHERENT>(t, home.b1, d1);
    if (gh_each_match(d1, home.b1, pattern, match)) return found;
    if (home.b2 == home.b1) {
        d2 = d1;
        return -1;
    }
    gh_load_digests<C, COHERENT>(t, home.b2, d2);
    gh_each_match(d2, home.b2, pattern, match);
    return found;
}

template <class C, bool COHERENT>
__device__ __forceinline__ gh_i64 gh_cache_locate(const C& t, const GhHome& home, gh_u64 key,
                                                 gh_u32 digest) {
    GhDigests<C> d1, d2;
    return gh_cache_locate<C, COHERENT>(t, home, key, digest, d1, d2);
}

// The score a key gets when this call touches it (present: it was in the table).
__device__ __forceinline__ gh_u64 gh_new_score(int policy, gh_u64 old, bool present,
                                               gh_u64 given, gh_u64 step, gh_u64 epoch) {
    switch (policy) {
        case GH_LRU: return step;
        case GH_LFU: return !present ? 1 : (old == ~0ULL ? old : old + 1);
        case GH_EPOCH_LRU: return (epoch << 32) | (step & 0xffffffffULL);
        case GH_EPOCH_LFU: {
            gh_u64 count = 1;
            if (present && (old >> 32) == epoch) {
                count = (old & 0xffffffffULL) + 1;
                if (count > 0xffffffffULL) count = 0xffffffffULL;
            }
            return (epoch << 32) | count;
        }
        default: return given;
    }
}

// Takes a slot for an absent key: the first free slot of the emptier of b1 / b2 that a CAS
// from EMPTY gets, else the lowest-scored entry of both (CAS from its key), unless `score` is
// below it (returns -1: refused). d1 / d2 hold the buckets' digests as the caller last loaded
// them (reloaded here when they prove stale). The slot comes back LOCKED; *status says which
// it was, and *old_key / *old_score what an evicted entry held (its value is still in place).
// An entry is evicted only if its score is still the one the scan found lowest once it is
// locked: a row that finds the slot rewritten meanwhile scans again, so racing rows evict the
// lowest entries in turn rather than each other's new ones.
template <class C>
__device__ __forceinline__ gh_i64 gh_cache_claim(const C& t, const GhHome& home, gh_u64 score,
                                                GhDigests<C>& d1, GhDigests<C>& d2,
                                                int* status, gh_u64* old_key,
                                                gh_u64* old_score) {
    const bool one = home.b2 == home.b1;
    for (bool fresh = true;; fresh = false) {
        if (!fresh) {
            gh_load_digests<C, true>(t, home.b1, d1);
            if (!one) gh_load_digests<C, true>(t, home.b2, d2);
        }
        const int free1 = gh_free_slots(d1);
        const int free2 = one ? 0 : gh_free_slots(d2);
        if (free1 > 0 || free2 > 0) {
            gh_i64 got = -1;
            const auto take = [&](gh_u64 slot) {
                if (atomicCAS(t.keys + slot, ~0ULL, GH_LOCKED) != ~0ULL) return false;
                got = static_cast<gh_i64>(slot);
                return true;
            };
            // two calls, not one on a chosen array: that would put both arrays in memory
            if (free2 > free1) gh_each_match(d2, home.b2, 0u, take);
            else gh_each_match(d1, home.b1, 0u, take);
            if (got >= 0) {
                *status = GH_INSERTED;
                return got;
            }
            continue;  // every free slot went to other rows meanwhile: look again
        }
        gh_i64 victim = -1;
        gh_u64 lowest = 0;
        for (int b = 0; b < (one ? 1 : 2); ++b) {
            const ulonglong2* p =
                reinterpret_cast<const ulonglong2*>(t.scores + (b == 0 ? home.b1 : home.b2) * C::BUCKET);
            const gh_i64 base = static_cast<gh_i64>((b == 0 ? home.b1 : home.b2) * C::BUCKET);
#pragma unroll 8
            for (int i = 0; i < C::BUCKET / 2; ++i) {
                const ulonglong2 s = __ldcg(p + i);
                if (victim < 0 || s.x < lowest) {
                    victim = base + 2 * i;
                    lowest = s.x;
                }
                if (s.y < lowest) {
                    victim = base + 2 * i + 1;
                    lowest = s.y;
                }
            }
        }
        if (score < lowest) return -1;
        const gh_u64 k = gh_load_acquire(t.keys + victim);
        if (k == GH_LOCKED || k == ~0ULL) continue;  // another row holds it, or just freed it
        if (atomicCAS(t.keys + victim, k, GH_LOCKED) != k) continue;
        const gh_u64 now = __ldcg(t.scores + victim);
        if (now != lowest) {  // rewritten since the scan: the lowest may be elsewhere now
            gh_store_release(t.keys + victim, k);
            continue;
        }
        *status = GH_INSERTED_EVICTING;
        *old_key = k;
        *old_score = now;
        return victim;
    }
}

// Fills a LOCKED slot and publishes its key.
template <class C>
__device__ __forceinline__ void gh_cache_publish(const C& t, gh_u64 slot, gh_u64 key,
                                                 gh_u32 digest, gh_u64 score, const char* row) {
    if (row != nullptr) gh_copy_value<C::VALUE_BYTES>(t.value(slot), row);
    t.scores[slot] = score;
    t.digests[slot] = static_cast<gh_u8>(digest);
    gh_store_release(t.keys + slot, key);
}

// Locks the slot of a present key: its slot, or -1 if the key is not (or no longer) there,
// with the digests of its buckets as last loaded in d1 / d2.
template <class C>
__device__ __forceinline__ gh_i64 gh_cache_lock(const C& t, const GhHome& home, gh_u64 key,
                                               gh_u32 digest, GhDigests<C>& d1,
                                               GhDigests<C>& d2) {
    while (true) {
        const gh_i64 slot = gh_cache_locate<C, true>(t, home, key, digest, d1, d2);
        if (slot < 0) return -1;
        if (atomicCAS(t.keys + slot, key, GH_LOCKED) == key) return slot;
    }
}
