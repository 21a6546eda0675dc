// The one open-addressing core: slot words, bucket choice, the probe loop and the claim.
// Every table operation (insert, find, find_index, contains, erase, rehash) goes through
// gh_probe; the layout of _format.py is assumed throughout. Compile-time parameters:
//   GH_KEY_BYTES   4 or 8
//   GH_VALUE_BYTES bytes of one value (0 for a set)
//   GH_LAYOUT      0 packed (key|value in one word), 1 pair (key word, value word),
//                  2 rows (key words; values in a separate array indexed by slot)
//   GH_BUCKET_SLOTS 4 or 8 slots per bucket
#pragma once
#include "common.cuh"

#if !defined(GH_KEY_BYTES) || !defined(GH_VALUE_BYTES) || !defined(GH_LAYOUT) || \
    !defined(GH_BUCKET_SLOTS)
#error "define GH_KEY_BYTES, GH_VALUE_BYTES, GH_LAYOUT and GH_BUCKET_SLOTS"
#endif

#define GH_PACKED 0
#define GH_PAIR 1
#define GH_ROWS 2

constexpr int GH_BUCKET = GH_BUCKET_SLOTS;                    // slots per bucket
constexpr int GH_WORDS = (GH_LAYOUT == GH_PAIR) ? 2 : 1;      // 64-bit words per slot
constexpr gh_u64 GH_KEY_MASK = (GH_KEY_BYTES == 4) ? 0xffffffffULL : ~0ULL;
constexpr gh_u64 GH_EMPTY = GH_KEY_MASK;                      // never-used slot
constexpr gh_u64 GH_TOMB = GH_KEY_MASK - 1;                   // erased slot
constexpr int GH_VALUE_OFFSET = (GH_LAYOUT == GH_PACKED) ? 4 : 8;
// Claims load a bucket half by half (GH_LAZY_PIECES 16-byte pieces at a time; 0: all at once),
// skipping the second half when the first ends in EMPTY. Measured on the H100
// (scripts/kernel_variants.py, 32M u32 keys, 8-slot buckets): inserts +6% / +5% / +4% at load
// 0.5 / 0.8 / 0.9 against whole-bucket loads; 16-byte steps in 8-slot buckets lost (a chain of
// four dependent loads).
#ifndef GH_LAZY_PIECES
#define GH_LAZY_PIECES (GH_BUCKET_SLOTS / 4)
#endif
// The probe loop's claims read buckets through L1 (plain loads) rather than from L2 (ld.cg).
// A stale line is harmless there: within one insert launch a slot only goes from EMPTY to a
// key that then stays, so a stale view can only show EMPTY where a key now sits; the CAS on
// that slot fails and returns the key, which the loop then sees. (L1 does not outlive a
// launch.) Measured (scripts/kernel_variants.py, 32M u32 keys), `any` inserts at load 0.5 /
// 0.9 / 0.99: H100 +0% / +1% / +2%, H200 +0.3% / +1.9% / +2.6%. The displacing pass, which
// moves keys between buckets, and erase keep reading from L2.
#ifndef GH_CLAIM_L1
#define GH_CLAIM_L1 1
#endif
// Off: measured slower on the H100 (scripts/insert_variants.py, 32M u32 keys to load 0.5:
// 8.5 against 10.8 G inserts/s); a CAS that misses L2 costs more than a load and a CAS.
#ifndef GH_OPTIMISTIC_CLAIM
#define GH_OPTIMISTIC_CLAIM 0
#endif

struct GhTable {
    gh_u64* slots;
    char* values;
    gh_u32* overflow;
    gh_i64* counts;
    gh_u64 num_buckets;
    gh_u64 seed;

    __device__ __forceinline__ gh_u64 num_slots() const { return num_buckets * GH_BUCKET; }
    __device__ __forceinline__ gh_u64* word(gh_u64 slot) const { return slots + slot * GH_WORDS; }
    __device__ __forceinline__ char* value(gh_u64 slot) const {
        if (GH_LAYOUT == GH_ROWS) return values + slot * GH_VALUE_BYTES;
        return reinterpret_cast<char*>(word(slot)) + GH_VALUE_OFFSET;
    }
};

struct GhSlot {
    gh_i64 slot;   // -1: absent (or, for a claim, no free slot anywhere)
    bool claimed;  // the probe put the key there
    gh_u64 value;  // packed / pair: the value bits as loaded by the probe (finds use them
                   // instead of reading the slot again, which costs a second memory access)
};

// Bucket choices and the two overflow-filter bits of a key. The filter has 16 bits per bucket:
// a key not in its first bucket sets bit (its fingerprint, 3 low hash bits) among the first
// bucket's low 8; a key past its second bucket (the linear fallback) also sets its fingerprint's
// bit among the second bucket's high 8. A miss whose bucket is full goes on only if its own bit
// there is set, instead of whenever any key went further.
struct GhHome {
    gh_u64 b1, b2;
    gh_u64 left_first;    // filter bit: "a key like this is not in b1"
    gh_u64 left_second;   // filter bit: "a key like this is past b2"
    gh_u64 hash;          // picks the buckets after b2
};

__device__ __forceinline__ GhHome gh_home(const GhTable& t, gh_u64 key) {
    const gh_u64 h = gh_mix64(key ^ t.seed);
    const gh_u64 b1 = gh_range(h & 0xffffffffULL, t.num_buckets);
    const gh_u64 b2 = gh_range(h >> 32, t.num_buckets);
    return {b1, b2, b1 * 16 + (h & 7), b2 * 16 + 8 + (h & 7), h};
}

// A key's bucket sequence: b1, b2, then GH_RANDOM_STEPS buckets drawn from the key's hash,
// then linear from the last of those (wrapping), so every bucket is reached and a claim always
// ends when the host's room check passed. Random rather than linear steps after b2: linear
// runs of full buckets cluster, and at load 0.99 that cost 2.9 bucket reads per insert against
// 1.7 (simulated, 8-slot buckets; measured in bench/RESULTS.md). The CPU engine's _advance is
// the same function.
constexpr gh_u64 GH_RANDOM_STEPS = 64;

__device__ __forceinline__ gh_u64 gh_next_bucket(const GhTable& t, const GhHome& home,
                                                 gh_u64 step, gh_u64 bucket) {
    const gh_u64 next = step + 1;  // the step whose bucket this returns
    if (next == 1) return home.b2;
    if (next < 2 + GH_RANDOM_STEPS) {
        return gh_range(gh_mix64(home.hash + next) & 0xffffffffULL, t.num_buckets);
    }
    return bucket + 1 == t.num_buckets ? 0 : bucket + 1;
}

// The word a claim writes: the new key part, and for packed maps the value beside it, so one
// CAS publishes both.
__device__ __forceinline__ gh_u64 gh_make_word(gh_u64 old, gh_u64 key, gh_u64 vbits) {
    if (GH_LAYOUT == GH_PACKED && GH_VALUE_BYTES > 0) return key | (vbits << 32);
    return (old & ~GH_KEY_MASK) | key;
}

// Pair slots are swapped whole by one 128-bit CAS where the hardware has one (sm_90); elsewhere
// the key word is claimed by CAS and the value word written after it (safe in a launch where no
// one else rewrites the slot; the displacement pass takes bucket locks for that case).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GH_HAS_CAS128 1
constexpr bool GH_CAS128 = (GH_LAYOUT == GH_PAIR);
#else
#define GH_HAS_CAS128 0
constexpr bool GH_CAS128 = false;
#endif

struct alignas(16) GhPair {
    gh_u64 key;
    gh_u64 value;
};

// Replaces a slot holding (seen_key, seen_value) with (new_key, new_value). Returns whether it
// did; either way *prev_key / *prev_value get what the slot held (for one-word slots the value
// is the word's high half, and new_value is already inside new_key).
__device__ __forceinline__ bool gh_swap_slot(gh_u64* word, gh_u64 seen_key, gh_u64 seen_value,
                                             gh_u64 new_key, gh_u64 new_value,
                                             gh_u64* prev_key, gh_u64* prev_value) {
#if GH_HAS_CAS128  // the 16-byte atomicCAS overload exists only there
    if constexpr (GH_CAS128) {
        const GhPair prev = atomicCAS(reinterpret_cast<GhPair*>(word),
                                      GhPair{seen_key, seen_value}, GhPair{new_key, new_value});
        *prev_key = prev.key;
        *prev_value = prev.value;
        return prev.key == seen_key && prev.value == seen_value;
    } else
#endif
    {
        const gh_u64 prev = atomicCAS(word, seen_key, new_key);
        *prev_key = prev;
        *prev_value = (GH_WORDS == 1) ? prev >> 32 : seen_value;
        if (prev != seen_key) return false;
        if (GH_WORDS == 2) *reinterpret_cast<volatile gh_u64*>(word + 1) = new_value;
        return true;
    }
}

// Loads a bucket with 16-byte vector loads (32 or 64 bytes for 8-byte slots): the first
// word of each slot into w, and for pair slots the value word into v. COHERENT loads go to L2
// (ld.cg) because other threads of the same kernel may be changing the bucket; finds use the
// read-only path. LAZY (claims of the probe loop) loads half by half, through L1 unless
// GH_CLAIM_L1 is 0 (see there); the displacing pass
// loads whole buckets, which are nearly always full there (measured: lazy loads cost the
// default insert path 8% at load 0.99).
template <bool COHERENT, bool LAZY>
__device__ __forceinline__ void gh_load_bucket(const GhTable& t, gh_u64 bucket,
                                               gh_u64 (&w)[GH_BUCKET], gh_u64 (&v)[GH_BUCKET]) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(t.word(bucket * GH_BUCKET));
    constexpr int PIECES = GH_BUCKET / 2;  // 16-byte pieces of a bucket of one-word slots
    constexpr int STEP = GH_LAZY_PIECES > 0 ? GH_LAZY_PIECES : 1;
    if (GH_WORDS == 1 && LAZY && GH_LAZY_PIECES > 0 && GH_LAZY_PIECES < PIECES) {
        // EMPTY lanes are a suffix, so once a step's last lane is EMPTY, the rest of the bucket
        // is EMPTY (never-written all-ones words): skip loading it. A stale guess only makes a
        // later CAS fail and the scan look again.
        bool rest_empty = false;
#pragma unroll
        for (int i = 0; i < PIECES; i += STEP) {
            ulonglong2 part[STEP];
#pragma unroll
            for (int j = 0; j < STEP; ++j) {
                part[j] = rest_empty ? make_ulonglong2(~0ULL, ~0ULL)
                          : (GH_CLAIM_L1 ? p[i + j] : __ldcg(p + i + j));
            }
#pragma unroll
            for (int j = 0; j < STEP; ++j) {
                w[2 * (i + j)] = part[j].x;
                w[2 * (i + j) + 1] = part[j].y;
            }
            rest_empty = rest_empty || (part[STEP - 1].y & GH_KEY_MASK) == GH_EMPTY;
        }
#pragma unroll
        for (int i = 0; i < GH_BUCKET; ++i) v[i] = w[i] >> 32;
    } else if (GH_WORDS == 1) {
#pragma unroll
        for (int i = 0; i < GH_BUCKET / 2; ++i) {
            const ulonglong2 pair = COHERENT ? __ldcg(p + i) : __ldg(p + i);
            w[2 * i] = pair.x;
            w[2 * i + 1] = pair.y;
        }
#pragma unroll
        for (int i = 0; i < GH_BUCKET; ++i) v[i] = w[i] >> 32;
    } else {
#pragma unroll
        for (int i = 0; i < GH_BUCKET; ++i) {
            const ulonglong2 s = COHERENT ? __ldcg(p + i) : __ldg(p + i);
            w[i] = s.x;
            v[i] = s.y;
        }
    }
}

__device__ __forceinline__ bool gh_overflowed(const GhTable& t, gh_u64 filter_bit) {
    return (__ldg(t.overflow + (filter_bit >> 5)) >> (filter_bit & 31)) & 1u;
}

__device__ __forceinline__ void gh_mark_overflow(const GhTable& t, gh_u64 filter_bit) {
    gh_u32* word = t.overflow + (filter_bit >> 5);
    const gh_u32 bit = 1u << (filter_bit & 31);
    if (!(__ldcg(word) & bit)) atomicOr(word, bit);
}

// Register-array access with a run-time lane, unrolled so the array stays in registers.
__device__ __forceinline__ gh_u64 gh_lane(const gh_u64 (&w)[GH_BUCKET], int lane) {
    gh_u64 out = w[0];
#pragma unroll
    for (int i = 1; i < GH_BUCKET; ++i) out = (lane == i) ? w[i] : out;
    return out;
}

__device__ __forceinline__ void gh_set_lane(gh_u64 (&w)[GH_BUCKET], int lane, gh_u64 value) {
#pragma unroll
    for (int i = 0; i < GH_BUCKET; ++i) w[i] = (lane == i) ? value : w[i];
}

// The probe loop. Buckets are visited in the key's sequence (gh_next_bucket). The
// invariant every writer keeps: each bucket of a key's sequence before the key's own bucket is
// full (slots never become EMPTY again), and the key's filter bit is set unless it sits in b1.
// So a search stops at the first bucket holding an EMPTY slot, or after b1 when b1 is full but
// the key's filter bit is clear.
// CLAIM: take the first EMPTY slot by CAS if the key is absent (never a tombstone, so two
// copies of a key can never arise: every claimant of a key races for the same first EMPTY).
// DEFER: claim only in b1; a key that is absent with b1 full comes back as GH_DEFERRED, for
// gh_place_displacing (only for batches of distinct keys). Filling first buckets before any
// key settles for its second keeps more keys in their first (simulated for 4-slot buckets at
// load 0.9: 79% against 75% when the first pass also claims in b2).
// The two sentinel keys live out of band in slots num_slots and num_slots + 1; there an
// "absent" marker (the other sentinel) plays the part of EMPTY.
constexpr gh_i64 GH_DEFERRED = -2;

template <bool CLAIM, bool COHERENT, bool DEFER = false>
__device__ GhSlot gh_probe(const GhTable& t, gh_u64 key, gh_u64 vbits) {
    if (key >= GH_TOMB) {
        const gh_u64 slot = t.num_slots() + (key == GH_TOMB ? 1 : 0);
        gh_u64* w = t.word(slot);
        gh_u64 cur = __ldcg(w);
        gh_u64 cur_value = (GH_WORDS == 1) ? cur >> 32 : __ldcg(w + 1);
        while (true) {
            if ((cur & GH_KEY_MASK) == key) return {static_cast<gh_i64>(slot), false, cur_value};
            if (!CLAIM) return {-1, false, 0};
            if (gh_swap_slot(w, cur, cur_value, gh_make_word(cur, key, vbits), vbits, &cur,
                             &cur_value)) {
                return {static_cast<gh_i64>(slot), true, vbits};
            }
        }
    }
    const GhHome home = gh_home(t, key);
    gh_u64 bucket = home.b1;
#if GH_OPTIMISTIC_CLAIM
    // Lanes fill in order and never become EMPTY again, so an EMPTY first lane means the whole
    // first bucket is empty and the key is absent: one CAS, without reading the bucket first.
    if (CLAIM) {
        constexpr gh_u64 GH_EMPTY_WORD = ~0ULL;  // a never-used slot word
        const gh_u64 slot = bucket * GH_BUCKET;
        const gh_u64 prev = atomicCAS(t.word(slot), GH_EMPTY_WORD,
                                      gh_make_word(GH_EMPTY_WORD, key, vbits));
        if (prev == GH_EMPTY_WORD) return {static_cast<gh_i64>(slot), true, vbits};
        if ((prev & GH_KEY_MASK) == key) {
            return {static_cast<gh_i64>(slot), false, (GH_WORDS == 1) ? prev >> 32 : 0};
        }
    }
#endif
    for (gh_u64 step = 0; step <= t.num_buckets + GH_RANDOM_STEPS + 1; ++step) {
        gh_u64 w[GH_BUCKET], v[GH_BUCKET];
        gh_load_bucket<COHERENT, CLAIM>(t, bucket, w, v);
        while (true) {
            int free_lane = -1;
#pragma unroll
            for (int i = 0; i < GH_BUCKET; ++i) {
                const gh_u64 part = w[i] & GH_KEY_MASK;
                if (part == key) return {static_cast<gh_i64>(bucket * GH_BUCKET + i), false, v[i]};
                if (part == GH_EMPTY && free_lane < 0) free_lane = i;
            }
            if (free_lane < 0) break;
            if (!CLAIM) return {-1, false, 0};
            if (DEFER && step >= 1) return {GH_DEFERRED, false, 0};
            const gh_u64 slot = bucket * GH_BUCKET + free_lane;
            const gh_u64 seen = gh_lane(w, free_lane);
            gh_u64 prev, prev_value;
            if (gh_swap_slot(t.word(slot), seen, gh_lane(v, free_lane),
                             gh_make_word(seen, key, vbits), vbits, &prev, &prev_value)) {
                if (step >= 1) gh_mark_overflow(t, home.left_first);
                if (step >= 2) gh_mark_overflow(t, home.left_second);
                return {static_cast<gh_i64>(slot), true, vbits};
            }
            gh_set_lane(w, free_lane, prev);  // lost the race: look at the slot's new words
            gh_set_lane(v, free_lane, prev_value);
        }
        if (!CLAIM && step == 0 && !gh_overflowed(t, home.left_first)) return {-1, false, 0};
        if (!CLAIM && step == 1 && !gh_overflowed(t, home.left_second)) return {-1, false, 0};
        bucket = gh_next_bucket(t, home, step, bucket);
    }
    return {-1, false, 0};
}

// Inserts or assigns one key; the value is read from value_src (GH_VALUE_BYTES bytes).
// Returns whether the key was new (with DEFER, sets *deferred instead when both buckets were
// full). The host checks room first, so a claim always finds a slot.
template <bool DEFER = false>
__device__ __forceinline__ bool gh_insert_one(const GhTable& t, gh_u64 key, const char* value_src,
                                              bool* deferred = nullptr) {
    const gh_u64 vbits = (GH_LAYOUT != GH_ROWS) ? gh_value_bits<GH_VALUE_BYTES>(value_src) : 0;
    const GhSlot s = gh_probe<true, true, DEFER>(t, key, vbits);
    if (DEFER && s.slot == GH_DEFERRED) {
        *deferred = true;
        return false;
    }
    if (s.slot < 0) return false;
    if (GH_VALUE_BYTES > 0) {
        if (GH_LAYOUT == GH_PACKED) {
            if (!s.claimed) *reinterpret_cast<volatile gh_u64*>(t.word(s.slot)) = key | (vbits << 32);
        } else if (GH_LAYOUT == GH_ROWS || !s.claimed) {  // a claimed pair slot has it already
            gh_copy_value<GH_VALUE_BYTES>(t.value(s.slot), value_src);
        }
    }
    return s.claimed;
}

// Erases one key: CAS its slot's key part to the erased marker. True if this call removed it.
__device__ __forceinline__ bool gh_erase_one(const GhTable& t, gh_u64 key) {
    const GhSlot s = gh_probe<false, true>(t, key, 0);
    if (s.slot < 0) return false;
    const gh_u64 marker = (key >= GH_TOMB) ? (key == GH_EMPTY ? GH_TOMB : GH_EMPTY) : GH_TOMB;
    gh_u64* w = t.word(s.slot);
    gh_u64 cur = __ldcg(w);
    while ((cur & GH_KEY_MASK) == key) {
        const gh_u64 prev = atomicCAS(w, cur, (cur & ~GH_KEY_MASK) | marker);
        if (prev == cur) return true;
        cur = prev;
    }
    return false;
}

// --- Displacement (cuckoo) placement for keys whose first bucket was full ----------------
// Used only on keys known to be absent and distinct within the launch, after every plain claim
// of the batch has finished (a separate launch), so a key "in hand" between two buckets is
// never one that another thread is looking for. Packed slots swap key and value in one CAS;
// pair slots change two words, so every change to a bucket here happens under that bucket's
// lock (one int per bucket; claims outside this pass never overlap it in time).

#ifndef GH_MAX_KICKS
#define GH_MAX_KICKS 128
#endif
constexpr bool GH_LOCKED = (GH_LAYOUT == GH_PAIR) && !GH_CAS128;

__device__ __forceinline__ void gh_lock(gh_u32* locks, gh_u64 bucket) {
    if constexpr (GH_LOCKED) {
        while (atomicCAS(locks + bucket, 0u, 1u) != 0u) __nanosleep(32);
        __threadfence();
    }
}

__device__ __forceinline__ void gh_unlock(gh_u32* locks, gh_u64 bucket) {
    if constexpr (GH_LOCKED) {
        __threadfence();
        atomicExch(locks + bucket, 0u);
    }
}

// Claims an EMPTY slot of one bucket for (key, value); false if the bucket is full.
__device__ bool gh_claim_in(const GhTable& t, gh_u64 bucket, gh_u64 key, gh_u64 vbits) {
    gh_u64 w[GH_BUCKET], v[GH_BUCKET];
    gh_load_bucket<true, false>(t, bucket, w, v);
#pragma unroll
    for (int i = 0; i < GH_BUCKET; ++i) {
        while ((w[i] & GH_KEY_MASK) == GH_EMPTY) {
            gh_u64* word = t.word(bucket * GH_BUCKET + i);
            if (gh_swap_slot(word, w[i], v[i], gh_make_word(w[i], key, vbits), vbits, &w[i],
                             &v[i])) {
                return true;
            }
        }
    }
    return false;
}

__device__ __forceinline__ bool gh_claim_locked(const GhTable& t, gh_u32* locks, gh_u64 bucket,
                                                gh_u64 key, gh_u64 vbits) {
    gh_lock(locks, bucket);
    const bool ok = gh_claim_in(t, bucket, key, vbits);
    gh_unlock(locks, bucket);
    return ok;
}

// Whether a bucket holds an EMPTY slot (a hint: it may change before anyone claims it).
__device__ __forceinline__ bool gh_has_room(const GhTable& t, gh_u64 bucket) {
    gh_u64 w[GH_BUCKET], v[GH_BUCKET];
    gh_load_bucket<true, false>(t, bucket, w, v);
    bool room = false;
#pragma unroll
    for (int i = 0; i < GH_BUCKET; ++i) room |= (w[i] & GH_KEY_MASK) == GH_EMPTY;
    return room;
}

// Swaps (key, value) into a slot of `bucket` holding a key that may also live in its other
// bucket; returns true with the evicted key and value in *key / *vbits. Looks one step ahead:
// a victim whose other bucket has room is preferred, so most chains end after one move and
// fewer keys leave their first bucket.
__device__ __forceinline__ bool gh_evict_in(const GhTable& t, gh_u32* locks, gh_u64 bucket,
                                            gh_u64* key, gh_u64* vbits, gh_u64 random) {
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass) {
        for (int j = 0; j < GH_BUCKET; ++j) {
            const int lane = static_cast<int>((random + j) & (GH_BUCKET - 1));
            const gh_u64 victim = __ldcg(t.word(bucket * GH_BUCKET + lane)) & GH_KEY_MASK;
            if (victim >= GH_TOMB) continue;  // a tombstone (EMPTY cannot occur: bucket full)
            const GhHome home = gh_home(t, victim);
            if (home.b1 == home.b2 || (bucket != home.b1 && bucket != home.b2)) continue;
            if (pass == 0 && !gh_has_room(t, bucket == home.b1 ? home.b2 : home.b1)) continue;
            chosen = lane;
            break;
        }
    }
    if (chosen < 0) return false;
    gh_lock(locks, bucket);
    gh_u64* word = t.word(bucket * GH_BUCKET + chosen);
    const gh_u64 seen = __ldcg(word);
    const gh_u64 victim = seen & GH_KEY_MASK;
    bool done = false;
    if (victim < GH_TOMB) {  // re-checked: another thread may have moved it meanwhile
        const GhHome home = gh_home(t, victim);
        if (home.b1 != home.b2 && (bucket == home.b1 || bucket == home.b2)) {
            const gh_u64 victim_bits = (GH_WORDS == 1) ? seen >> 32 : __ldcg(word + 1);
            gh_u64 prev, prev_value;
            if (gh_swap_slot(word, seen, victim_bits, gh_make_word(seen, *key, *vbits), *vbits,
                             &prev, &prev_value)) {
                *key = victim;
                *vbits = victim_bits;
                done = true;
            }
        }
    }
    gh_unlock(locks, bucket);
    return done;
}

// Places an absent key whose first bucket was full: claims a free slot in either bucket, else
// evicts a key to its other bucket and carries that one on (at most GH_MAX_KICKS times), and
// finally falls back to the rest of the carried key's sequence. The first eviction is from the
// key's own first bucket: the key then sits at home and only the victim leaves its own (with
// the look-ahead, for a bucket with room), where evicting from b2 would send two keys away.
__device__ void gh_place_displacing(const GhTable& t, gh_u32* locks, gh_u64 key, gh_u64 vbits) {
    gh_u64 random = gh_mix64(key ^ 0x9e3779b97f4a7c15ULL);
    gh_u64 came_from = ~0ULL;  // the bucket the carried key was just evicted from
    for (int kick = 0; kick < GH_MAX_KICKS; ++kick) {
        const GhHome home = gh_home(t, key);
        const gh_u64 b1 = home.b1, b2 = home.b2;
        if (gh_claim_locked(t, locks, b1, key, vbits)) return;
        if (gh_claim_locked(t, locks, b2, key, vbits)) {
            gh_mark_overflow(t, home.left_first);
            return;
        }
        random = gh_mix64(random + kick);
        const gh_u64 target = (came_from == b1) ? b2 : b1;
        if (!gh_evict_in(t, locks, target, &key, &vbits, random)) continue;
        if (target != b1) gh_mark_overflow(t, home.left_first);  // the key placed, not the victim
        came_from = target;
    }
    // the carried key (maybe a fresh victim) walks its own sequence
    const GhHome home = gh_home(t, key);
    gh_u64 bucket = home.b1;
    for (gh_u64 step = 0; step <= t.num_buckets + GH_RANDOM_STEPS + 1; ++step) {
        if (gh_claim_locked(t, locks, bucket, key, vbits)) return;
        if (step == 0) gh_mark_overflow(t, home.left_first);
        if (step == 1) gh_mark_overflow(t, home.left_second);
        bucket = gh_next_bucket(t, home, step, bucket);
    }
}
