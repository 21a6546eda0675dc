// The evicting cache's table type and its one bounded probe: a key lives in one of its two
// buckets (the core's gh_home), placed in the emptier bucket, or, when both are full, in a
// slot an entry left for its other bucket, or in place of the lowest score of both; one
// digest byte a slot marks the free slots and lets the digest walk find a key.
// cache/format.py states the rules; cache/cpu/loops.py is the CPU twin, row by
// row. On the GPU, finds and writes find a key through the index beside the slots
// (cache_index.cuh); the digest walk remains for erase and for an index change that follows
// a moved entry.
//
// Concurrency within a launch (rows hold distinct keys: the host keeps one row per key).
// A write is two launches (cache.cu), and a third for the index where it evicted.
// The first evicts nothing, so a row owns the slot
// of its key, or the free slot whose key word its CAS took from EMPTY, and fills it with plain
// stores. The second moves an entry or evicts for the rows whose buckets were full; they race
// for entries, so there a writer owns a slot while its key word holds GH_LOCKED, taken with
// acquire order from the entry's key (an evictor's exchange, a mover's CAS) or, a move's
// target, by a CAS from EMPTY; it writes value, score and digest and publishes the key with a
// release store, so the next owner sees them. Erase locks the same way. Digest-walk searches
// of a write launch compare digests, then keys (relaxed): a match is a candidate its row then
// uses or locks; a LOCKED slot with the key's digest is waited for (its owner publishes
// without waiting on anything). Read-only launches (finds) run when no write does (the host
// orders them), so they read through the read-only path. A free slot is one whose digest is
// 0: a claimer that sees 0 while another row already holds the slot fails its CAS and looks
// further.
#pragma once
#include "cache_index.cuh"
#include "open_addressing.cuh"

constexpr gh_u64 GH_LOCKED = GH_CACHE_LOCKED;  // a slot being rewritten
// GhPolicy, GhCacheStatus (GH_TO_EVICT: within a write only, gh_cache_write leaves it for
// gh_cache_evict) and GhWriteMode come from gh_constants.cuh

template <int VALUE_BYTES_, int BUCKET_SLOTS_>
struct GhCache {
    static constexpr int VALUE_BYTES = VALUE_BYTES_;
    static constexpr int BUCKET = BUCKET_SLOTS_;  // 16, 32, 64 or 128
    static constexpr int KEY_BYTES = 8;
    gh_u64* keys;
    gh_u8* digests;
    gh_u64* scores;
    char* values;       // rows of slots [0, hbm_slots), GPU memory
    gh_i64* counts;     // [live entries]
    gh_u64 num_buckets;
    gh_u64 seed;
    char* host_values;  // rows of the slots past hbm_slots: pinned host memory, read and
    gh_u64 hbm_slots;   // written in place through unified addressing (null: none)
    gh_u64* index;      // key -> slot (cache_index.cuh): finds read it, writes keep it exact
    gh_u64 index_buckets;
    gh_u8* pins;        // 1 on a locked entry's slot: no move or eviction takes it (pins change
                        // only between launches: plain loads); null while none can be set
    __device__ __forceinline__ char* value(gh_u64 slot) const {
        return slot < hbm_slots ? values + slot * VALUE_BYTES
                                : host_values + (slot - hbm_slots) * VALUE_BYTES;
    }
};

#define GH_CACHE_PARAMS gh_u64 *keys_, gh_u8 *digests, gh_u64 *scores, char *values, \
                        gh_i64 *counts, gh_u64 num_buckets, gh_u64 seed, char *host_values, \
                        gh_u64 hbm_slots, gh_u64 *slot_index, gh_u64 index_buckets, gh_u8 *pins
#define GH_CACHE_REF(C) C{keys_, digests, scores, values, counts, num_buckets, seed, \
                          host_values, hbm_slots, slot_index, index_buckets, pins}

// 8 bits of a second mix of the key's hash (no bucket choice reads them), never 0.
__device__ __forceinline__ gh_u32 gh_digest(gh_u64 hash) {
    const gh_u32 d = static_cast<gh_u32>(gh_mix64(hash) >> 56);
    return d == 0 ? 1 : d;
}

// Takes a slot's key word from `expected` to `desired` with acquire order: what the writer
// that published `expected` wrote before it (value, score) is visible after a success.
// Searches read key words with relaxed loads: a match is only a candidate until this CAS, so
// they need no order (an acquire load per candidate also invalidates the SM's L1).
__device__ __forceinline__ gh_u64 gh_cas_acquire(gh_u64* p, gh_u64 expected, gh_u64 desired) {
    gh_u64 prev;
    asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(prev) : "l"(p), "l"(expected), "l"(desired) : "memory");
    return prev;
}

// Swaps a slot's key word for `desired` with acquire order (as gh_cas_acquire after a success).
__device__ __forceinline__ gh_u64 gh_exch_acquire(gh_u64* p, gh_u64 desired) {
    gh_u64 prev;
    asm volatile("atom.acquire.gpu.global.exch.b64 %0, [%1], %2;"
                 : "=l"(prev) : "l"(p), "l"(desired) : "memory");
    return prev;
}

__device__ __forceinline__ void gh_store_release(gh_u64* p, gh_u64 v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

// One bit a slot of a bucket: whose digest equals the key's, and which are free (digest 0),
// made from the bucket's digests loaded in one go: a scan costs one round trip, and the loops
// that follow walk set bits. (Walking the digest bytes themselves made the write kernel too
// large for the instruction cache.)
template <class C>
struct GhMasks {
    static constexpr int WORDS = (C::BUCKET + 31) / 32;
    gh_u32 match[WORDS];
    gh_u32 free[WORDS];
};

// 0xff / 0x00 bytes of a __vcmpeq4 result -> its 4 low bits (byte i -> bit i): the multiply
// moves bit 8i to bit 24 + i with no two terms meeting.
__device__ __forceinline__ gh_u32 gh_pack4(gh_u32 eq) {
    return ((eq & 0x01010101u) * 0x01020408u) >> 24;
}

template <class C, bool COHERENT>
__device__ __forceinline__ void gh_bucket_masks(const C& t, gh_u64 bucket, gh_u32 pattern,
                                                GhMasks<C>& m) {
    const uint4* p = reinterpret_cast<const uint4*>(t.digests + bucket * C::BUCKET);
    uint4 q[C::BUCKET / 16];
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) q[i] = COHERENT ? __ldcg(p + i) : __ldg(p + i);
#pragma unroll
    for (int w = 0; w < GhMasks<C>::WORDS; ++w) m.match[w] = m.free[w] = 0;
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) {
        const gh_u32 words[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int first = i * 16 + j * 4;  // the word's first slot
            m.match[first / 32] |= gh_pack4(__vcmpeq4(words[j], pattern)) << (first % 32);
            m.free[first / 32] |= gh_pack4(__vcmpeq4(words[j], 0u)) << (first % 32);
        }
    }
}

// Calls f(slot) for every slot of the bucket whose digest is the key's, in slot order, until
// f returns true; returns whether one did. The digests come in one go (BUCKET / 16 loads); a
// 16-slot piece with no match costs four byte compares and a branch, so the rare matches
// alone pay for bit extraction (making a whole match mask first cost most of a write's
// instructions at 128 slots a bucket).
template <class C, bool COHERENT, class F>
__device__ __forceinline__ bool gh_bucket_each_match(const C& t, gh_u64 bucket, gh_u32 pattern,
                                                     F&& f) {
    const uint4* p = reinterpret_cast<const uint4*>(t.digests + bucket * C::BUCKET);
    uint4 q[C::BUCKET / 16];
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) q[i] = COHERENT ? __ldcg(p + i) : __ldg(p + i);
#pragma unroll
    for (int i = 0; i < C::BUCKET / 16; ++i) {
        const gh_u32 e[4] = {__vcmpeq4(q[i].x, pattern), __vcmpeq4(q[i].y, pattern),
                             __vcmpeq4(q[i].z, pattern), __vcmpeq4(q[i].w, pattern)};
        if ((e[0] | e[1] | e[2] | e[3]) == 0) continue;
        gh_u32 bits = gh_pack4(e[0]) | gh_pack4(e[1]) << 4 | gh_pack4(e[2]) << 8 |
                      gh_pack4(e[3]) << 12;
        while (bits) {
            const int bit = __ffs(bits) - 1;
            bits &= bits - 1;
            if (f(bucket * C::BUCKET + i * 16 + bit)) return true;
        }
    }
    return false;
}

// Calls f(slot) for every slot of the bucket whose bit is set, in slot order, until f returns
// true; returns whether one did.
template <class C, class F>
__device__ __forceinline__ bool gh_each_bit(const gh_u32 (&bits)[GhMasks<C>::WORDS],
                                            gh_u64 bucket, F&& f) {
#pragma unroll
    for (int w = 0; w < GhMasks<C>::WORDS; ++w) {
        gh_u32 m = bits[w];
        while (m) {
            const int bit = __ffs(m) - 1;
            m &= m - 1;
            if (f(bucket * C::BUCKET + w * 32 + bit)) return true;
        }
    }
    return false;
}

template <class C>
__device__ __forceinline__ int gh_count_bits(const gh_u32 (&bits)[GhMasks<C>::WORDS]) {
    int n = 0;
#pragma unroll
    for (int w = 0; w < GhMasks<C>::WORDS; ++w) n += __popc(bits[w]);
    return n;
}

// Whether a slot whose digest matched holds key. Where slots can be LOCKED (COHERENT: the
// evict and erase launches), a LOCKED slot may hold the key (an evictor that will put it
// back): wait for its owner, who publishes without waiting on anything, rather than take the
// key for absent. (gh_cache_write's launch locks nothing, so it never waits here.)
template <class C, bool COHERENT>
__device__ __forceinline__ bool gh_cache_holds(const C& t, gh_u64 slot, gh_u64 key) {
    gh_u64 k = COHERENT ? gh_load_relaxed(t.keys + slot) : __ldg(t.keys + slot);
    while (COHERENT && k == GH_LOCKED) k = gh_load_relaxed(t.keys + slot);
    return k == key;
}

// The slot holding key among its two buckets, -1 if none, by the digest walk (erase; finds
// and writes search through the index, cache_index.cuh): only the rare digest matches pay
// for bit extraction (gh_bucket_each_match).
template <class C, bool COHERENT>
__device__ __forceinline__ gh_i64 gh_cache_locate(const C& t, const GhHome& home, gh_u64 key,
                                                 gh_u32 digest) {
    gh_i64 found = -1;
    const auto match = [&](gh_u64 slot) {
        if (!gh_cache_holds<C, COHERENT>(t, slot, key)) return false;
        found = static_cast<gh_i64>(slot);
        return true;
    };
    const gh_u32 pattern = digest * 0x01010101u;
    if (gh_bucket_each_match<C, COHERENT>(t, home.b1, pattern, match)) return found;
    if (home.b2 != home.b1) gh_bucket_each_match<C, COHERENT>(t, home.b2, pattern, match);
    return found;
}

// Copies one value per lane, src to dst (a lane with a null src copies nothing), with the
// whole warp: each lane moves one copy word of one lane's value a step, so a step reads and
// writes whole pieces of values instead of each thread walking its own (a thread copying its
// own wide row left finds of wide rows far behind HierarchicalKV's). One step's loads are in
// flight at a time: issuing several steps' loads before their stores sped finds of rows in
// host memory but slowed finds of rows in GPU memory, the common case (the held loads take
// registers, so occupancy). Every lane of the warp must call it. The evict launch calls it
// with its lanes' slots locked: no lane waits on a locked slot (a lane that finds one gives
// up its turn and is served again), so no lane of the warp waits on another.
template <int BYTES>
__device__ __forceinline__ void gh_warp_copy(const char* src, char* dst) {
    constexpr int W = (BYTES % 16 == 0) ? 16 : (BYTES % 8 == 0) ? 8
                    : (BYTES % 4 == 0) ? 4 : (BYTES % 2 == 0) ? 2 : 1;
    typedef typename GhCopyWord<W>::type word;
    constexpr int WORDS = BYTES / W;                      // copy words a value
    constexpr int ROWS = WORDS >= 32 ? 1 : 32 / WORDS;    // values a step
    const int lane = threadIdx.x & 31;
    const gh_u64 my_src = reinterpret_cast<gh_u64>(src);
    const gh_u64 my_dst = reinterpret_cast<gh_u64>(dst);
#pragma unroll 1
    for (int first = 0; first < 32; first += ROWS) {
        const int owner = first + (WORDS >= 32 ? 0 : lane / WORDS);
        const gh_u64 from = __shfl_sync(0xffffffffu, my_src, owner < 32 ? owner : 31);
        const gh_u64 to = __shfl_sync(0xffffffffu, my_dst, owner < 32 ? owner : 31);
        if (owner >= 32 || from == 0) continue;
        if (WORDS < 32 && lane >= ROWS * WORDS) continue;  // no value of this step is its
        const word* s = reinterpret_cast<const word*>(from);
        word* d = reinterpret_cast<word*>(to);
        for (int w = WORDS >= 32 ? lane : lane % WORDS; w < WORDS; w += WORDS >= 32 ? 32 : WORDS) {
            d[w] = s[w];
        }
    }
}

// Whether a policy's new score depends on the old one (the others need not load it).
__device__ __forceinline__ bool gh_reads_score(int policy) {
    return policy == GH_LFU || policy == GH_EPOCH_LFU;
}

// The score a key gets when this call touches it (present: it was in the table; old: its
// score then). `has` says the caller gave `given` for the row: the score itself under lru,
// epoch_lru and custom, the count to add under lfu and epoch_lfu (else 1). Counts saturate:
// lfu's at 2**64 - 1, epoch_lfu's low 32 bits at 2**32 - 1, and epoch_lfu's count goes on
// across epochs (the high bits take the current epoch), as HierarchicalKV's does.
__device__ __forceinline__ gh_u64 gh_new_score(int policy, gh_u64 old, bool present, bool has,
                                               gh_u64 given, gh_u64 step, gh_u64 epoch) {
    const gh_u64 count = has ? given : 1;
    switch (policy) {
        case GH_LRU: return has ? given : step;
        case GH_LFU: return !present ? count : (old > ~0ULL - count ? ~0ULL : old + count);
        case GH_EPOCH_LRU: return has ? given : (epoch << 32) | (step & 0xffffffffULL);
        case GH_EPOCH_LFU: {
            gh_u64 low = count & 0xffffffffULL;
            if (present) {
                low += old & 0xffffffffULL;
                if (low > 0xffffffffULL) low = 0xffffffffULL;
            }
            return (epoch << 32) | low;
        }
        default: return given;
    }
}

// The score an absent key competes with when its buckets are full: its new score, but under
// lfu the highest, so a new key always replaces the least frequent entry (a new id must be
// able to enter a warm cache; its own count starts at its increment).
__device__ __forceinline__ gh_u64 gh_admission_score(int policy, gh_u64 score) {
    return policy == GH_LFU ? ~0ULL : score;
}

// Takes a free slot for an absent key: the first of the emptier of b1 / b2 whose key word a
// CAS takes from EMPTY to `desired`, or -1 when neither bucket has a free slot. m1 / m2 hold
// the buckets' masks as the caller last made them (made again here when they prove stale:
// every free slot went to other rows meanwhile).
template <class C>
__device__ __forceinline__ gh_i64 gh_cache_claim_free(const C& t, const GhHome& home,
                                                     gh_u64 desired, GhMasks<C>& m1,
                                                     GhMasks<C>& m2) {
    const bool one = home.b2 == home.b1;
    for (bool fresh = true;; fresh = false) {
        if (!fresh) {
            gh_bucket_masks<C, true>(t, home.b1, 0u, m1);
            if (!one) gh_bucket_masks<C, true>(t, home.b2, 0u, m2);
        }
        const int free1 = gh_count_bits<C>(m1.free);
        const int free2 = one ? 0 : gh_count_bits<C>(m2.free);
        if (free1 == 0 && free2 == 0) return -1;
        gh_i64 got = -1;
        const auto take = [&](gh_u64 slot) {
            if (atomicCAS(t.keys + slot, ~0ULL, desired) != ~0ULL) return false;
            got = static_cast<gh_i64>(slot);
            return true;
        };
        // two calls, not one on a chosen array: that would put both arrays in memory
        if (free2 > free1) gh_each_bit<C>(m2.free, home.b2, take);
        else gh_each_bit<C>(m1.free, home.b1, take);
        if (got >= 0) return got;
    }
}

// The lowest score among the unlocked candidates of buckets b1, b2 (the earliest slot, b1's
// first, on a tie), found by the whole warp (every lane calls it with the same buckets); a
// locked slot (pins) comes only when every slot is locked, and gh_cache_try_evict refuses
// it. The two buckets' slots are numbered 0 .. 2 BUCKET - 1 (b1's, then b2's) and lane l
// reads positions l, l + 32, l + 64, ...: each load instruction of the warp reads 32
// consecutive scores (256 bytes, whole sectors), so the 2 KB of two 128-slot buckets take 64
// sector requests. (Each lane reading a run of its own made every instruction touch 32
// sectors, each sector requested four times, and the L2 became what bounds the full-load
// evict launch.) A candidate's rank carries its lock in the bit above its position
// (positions < 256), so an unlocked one always ranks first. PINNED is whether the cache has
// pins at all: without them the scan keeps the plain comparison, as the full-load evict
// launch is bound by this scan's instructions.
template <bool PINNED>
__device__ __forceinline__ bool gh_cache_ranks_before(gh_u64 score, int rank, gh_u64 best,
                                                      int best_rank) {
    if (PINNED && (rank >> 8) != (best_rank >> 8)) return (rank >> 8) == 0;
    return score < best || (score == best && rank < best_rank);
}

template <bool PINNED, class C>
__device__ __forceinline__ void gh_cache_lowest_of(const C& t, gh_u64 b1, gh_u64 b2,
                                                   gh_i64* victim, gh_u64* lowest) {
    constexpr int PER_LANE = 2 * C::BUCKET / 32;  // scores a lane reads: 1 to 8
    const int lane = threadIdx.x & 31;
    gh_u64 scores[PER_LANE];
    int ranks[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
        const int at = i * 32 + lane;  // position: b1's slots, then b2's
        const gh_u64 bucket = at < C::BUCKET ? b1 : b2;
        const gh_u64 slot = bucket * C::BUCKET + at % C::BUCKET;
        scores[i] = __ldcg(t.scores + slot);
        ranks[i] = at | (PINNED && t.pins[slot] ? 256 : 0);
    }
    gh_u64 best = scores[0];
    int rank = ranks[0];  // ascending positions within a lane: only a lower score replaces
#pragma unroll
    for (int i = 1; i < PER_LANE; ++i) {
        if (gh_cache_ranks_before<PINNED>(scores[i], ranks[i], best, rank)) {
            best = scores[i];
            rank = ranks[i];
        }
    }
#pragma unroll
    for (int step = 16; step > 0; step >>= 1) {
        const gh_u64 other = __shfl_xor_sync(0xffffffffu, best, step);
        const int other_rank = __shfl_xor_sync(0xffffffffu, rank, step);
        if (gh_cache_ranks_before<PINNED>(other, other_rank, best, rank)) {
            best = other;
            rank = other_rank;
        }
    }
    const int order = rank & 255;
    *victim = static_cast<gh_i64>((order < C::BUCKET ? b1 : b2) * C::BUCKET +
                                  order % C::BUCKET);
    *lowest = best;
}

template <class C>
__device__ __forceinline__ void gh_cache_lowest(const C& t, gh_u64 b1, gh_u64 b2,
                                                gh_i64* victim, gh_u64* lowest) {
    if (t.pins != nullptr) gh_cache_lowest_of<true>(t, b1, b2, victim, lowest);
    else gh_cache_lowest_of<false>(t, b1, b2, victim, lowest);
}

// The entry of b1 or b2 that can move to its own other bucket to make room for a key whose
// two buckets are full (cache/format.py), found by the whole warp (every lane calls it with
// the same buckets and digest): lane i < 16 reads b1's candidate i, lane 16 + i b2's (none
// when b2 is b1), and counts the free slots of that entry's other bucket. The lane with the
// most (the lowest lane on a tie) wins: its slot, with the entry's key in *key and the bucket
// it may move to in *to; -1 when no candidate's other bucket has room. LOCKED slots are no
// candidates (their entries are being rewritten), nor are locked entries (pins).
template <class C>
__device__ __forceinline__ gh_i64 gh_cache_movable(const C& t, gh_u64 b1, gh_u64 b2,
                                                  gh_u32 digest, gh_u64* key, gh_u64* to) {
    constexpr int STEP = C::BUCKET / 16;
    const int lane = threadIdx.x & 31;
    const gh_u64 bucket = lane < 16 ? b1 : b2;
    const gh_u64 slot = bucket * C::BUCKET + (lane % 16) * STEP + digest % STEP;
    gh_u32 room = 0;
    gh_u64 k = 0, other = 0;
    if (lane < 16 || b2 != b1) {
        k = gh_load_relaxed(t.keys + slot);
        if (k < GH_LOCKED && !(t.pins != nullptr && t.pins[slot])) {
            const GhHome home = gh_home(t, k);
            other = bucket == home.b1 ? home.b2 : home.b1;
            if (other != bucket) {
                GhMasks<C> m;
                gh_bucket_masks<C, true>(t, other, 0u, m);
                room = gh_count_bits<C>(m.free);
            }
        }
    }
    const gh_u32 best = __reduce_max_sync(0xffffffffu, room << 5 | (31 - lane));
    if ((best >> 5) == 0) return -1;
    const int winner = 31 - static_cast<int>(best & 31);
    *key = __shfl_sync(0xffffffffu, k, winner);
    *to = __shfl_sync(0xffffffffu, other, winner);
    return __shfl_sync(0xffffffffu, static_cast<gh_i64>(slot), winner);
}

// Moves the entry of slot `from` (key `key`) to the first free slot of bucket `to` that a CAS
// takes (its index entry pointed there before the slot is published), and leaves `from`
// LOCKED for the caller to fill (gh_cache_publish): true; false when
// the slot no longer holds `key`, or other rows took every free slot of `to` since the warp
// counted them (then `from` is as it was). The entry is in neither slot while it moves; no
// search runs in the evict launch (its rows' keys are absent), so none can miss it. Safe
// because the buckets of rows waiting to evict stay full for the whole write (a digest only
// goes from 0 to nonzero in either launch): a move's target, which has a free slot, is never
// such a bucket, so no evictor or mover takes the target slot, and no entry moves twice.
template <class C>
__device__ __forceinline__ bool gh_cache_move(const C& t, gh_u64 from, gh_u64 key, gh_u64 to) {
    if (gh_cas_acquire(t.keys + from, key, GH_LOCKED) != key) return false;
    GhMasks<C> m;
    gh_bucket_masks<C, true>(t, to, 0u, m);
    gh_i64 got = -1;
    gh_each_bit<C>(m.free, to, [&](gh_u64 slot) {
        if (atomicCAS(t.keys + slot, ~0ULL, GH_LOCKED) != ~0ULL) return false;
        got = static_cast<gh_i64>(slot);
        return true;
    });
    if (got < 0) {
        gh_store_release(t.keys + from, key);
        return false;
    }
    gh_copy_value<C::VALUE_BYTES>(t.value(got), t.value(from));
    t.scores[got] = t.scores[from];
    t.digests[got] = t.digests[from];
    gh_index_repoint(t.index, t.index_buckets, gh_home(t, key).hash, key, from, got);
    gh_store_release(t.keys + got, key);
    return true;
}

// Tries to lock the entry the warp found lowest, for a key of `score`: GH_INSERTED_EVICTING
// (locked; *old_key / *old_score what it held, and with `hold` its value in `held`, read in
// the same round as the score; the value also stays in place), GH_REFUSED (the key scores
// below it) or -1 (try again: another row holds the slot, or rewrote it since the scan, so
// the lowest may be elsewhere now). Rows racing for a pair of buckets thus evict its lowest
// entries in turn rather than each other's new ones. The lock is an exchange, not a load and
// a CAS (one round trip less in the warp's serial chain): finding GH_LOCKED, it wrote
// GH_LOCKED over the owner's lock, which the owner's publishing store replaces, so nothing
// changed. (A slot of these buckets is never EMPTY in the evict launch, as they stay full;
// one found EMPTY would be given back.)
template <class C>
__device__ __forceinline__ int gh_cache_try_evict(const C& t, gh_i64 victim, gh_u64 lowest,
                                                 gh_u64 score, gh_u64* old_key,
                                                 gh_u64* old_score, bool hold,
                                                 GhHeldValue<C::VALUE_BYTES>& held) {
    // the victim is locked only when every slot of both buckets is
    if (score < lowest || (t.pins != nullptr && t.pins[victim])) return GH_REFUSED;
    const gh_u64 k = gh_exch_acquire(t.keys + victim, GH_LOCKED);
    if (k == GH_LOCKED) return -1;
    if (k == ~0ULL) {
        gh_store_release(t.keys + victim, k);
        return -1;
    }
    const gh_u64 now = __ldcg(t.scores + victim);
    if (hold) held.load(t.value(victim));
    if (now != lowest) {
        gh_store_release(t.keys + victim, k);
        return -1;
    }
    *old_key = k;
    *old_score = now;
    return GH_INSERTED_EVICTING;
}

// Publishes a LOCKED slot whose value the caller has written: its score, its digest (0: the
// slot holds this key's digest already), then its key with a release store, so whoever sees
// the key sees the rest.
template <class C>
__device__ __forceinline__ void gh_cache_publish(const C& t, gh_u64 slot, gh_u64 key,
                                                 gh_u32 digest, gh_u64 score) {
    t.scores[slot] = score;
    if (digest != 0) t.digests[slot] = static_cast<gh_u8>(digest);
    gh_store_release(t.keys + slot, key);
}

// Locks the slot of a present key: its slot, or -1 if the key is not (or no longer) there.
template <class C>
__device__ __forceinline__ gh_i64 gh_cache_lock(const C& t, const GhHome& home, gh_u64 key,
                                               gh_u32 digest) {
    while (true) {
        const gh_i64 slot = gh_cache_locate<C, true>(t, home, key, digest);
        if (slot < 0) return -1;
        if (gh_cas_acquire(t.keys + slot, key, GH_LOCKED) == key) return slot;
    }
}
