// The one open-addressing core: slot words, bucket choice, the probe loop and the claim.
// Every table operation (insert, find, find_index, contains, erase, rehash) goes through
// gh_probe; the layout of _format.py is assumed throughout. Compile-time parameters:
//   GH_KEY_BYTES   4 or 8
//   GH_VALUE_BYTES bytes of one value (0 for a set)
//   GH_LAYOUT      0 packed (key|value in one word), 1 pair (key word, value word),
//                  2 rows (key words; values in a separate array indexed by slot)
#pragma once
#include "common.cuh"

#if !defined(GH_KEY_BYTES) || !defined(GH_VALUE_BYTES) || !defined(GH_LAYOUT)
#error "define GH_KEY_BYTES, GH_VALUE_BYTES and GH_LAYOUT"
#endif

#define GH_PACKED 0
#define GH_PAIR 1
#define GH_ROWS 2

constexpr int GH_BUCKET = 4;                                  // slots per bucket
constexpr int GH_WORDS = (GH_LAYOUT == GH_PAIR) ? 2 : 1;      // 64-bit words per slot
constexpr gh_u64 GH_KEY_MASK = (GH_KEY_BYTES == 4) ? 0xffffffffULL : ~0ULL;
constexpr gh_u64 GH_EMPTY = GH_KEY_MASK;                      // never-used slot
constexpr gh_u64 GH_TOMB = GH_KEY_MASK - 1;                   // erased slot
constexpr int GH_VALUE_OFFSET = (GH_LAYOUT == GH_PACKED) ? 4 : 8;

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
};

// Bucket choices and the overflow-filter bit of a key. The filter has 8 bits per bucket; a key
// that could not stay in its first bucket sets the bit its fingerprint (3 low hash bits) picks,
// so a miss whose first bucket is full goes on only if its own bit is set (about 1 in 8 when one
// key overflowed) instead of whenever any key overflowed.
__device__ __forceinline__ void gh_buckets(const GhTable& t, gh_u64 key, gh_u64& b1, gh_u64& b2,
                                           gh_u64& filter_bit) {
    const gh_u64 h = gh_mix64(key ^ t.seed);
    b1 = gh_range(h & 0xffffffffULL, t.num_buckets);
    b2 = gh_range(h >> 32, t.num_buckets);
    filter_bit = b1 * 8 + (h & 7);
}

// The word a claim writes: the new key part, and for packed maps the value beside it, so one
// CAS publishes both.
__device__ __forceinline__ gh_u64 gh_make_word(gh_u64 old, gh_u64 key, gh_u64 vbits) {
    if (GH_LAYOUT == GH_PACKED && GH_VALUE_BYTES > 0) return key | (vbits << 32);
    return (old & ~GH_KEY_MASK) | key;
}

// Loads the first word of each slot of a bucket with 16-byte vector loads (one 32-byte sector
// for 8-byte slots). COHERENT loads go to L2 (ld.cg) because other threads of the same kernel
// may be changing the bucket; plain finds use the read-only path.
template <bool COHERENT>
__device__ __forceinline__ void gh_load_bucket(const GhTable& t, gh_u64 bucket, gh_u64 (&w)[4]) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(t.word(bucket * GH_BUCKET));
    if (GH_WORDS == 1) {
        const ulonglong2 a = COHERENT ? __ldcg(p) : __ldg(p);
        const ulonglong2 b = COHERENT ? __ldcg(p + 1) : __ldg(p + 1);
        w[0] = a.x; w[1] = a.y; w[2] = b.x; w[3] = b.y;
    } else {
#pragma unroll
        for (int i = 0; i < GH_BUCKET; ++i) w[i] = (COHERENT ? __ldcg(p + i) : __ldg(p + i)).x;
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
__device__ __forceinline__ gh_u64 gh_lane(const gh_u64 (&w)[4], int lane) {
    gh_u64 out = w[0];
#pragma unroll
    for (int i = 1; i < GH_BUCKET; ++i) out = (lane == i) ? w[i] : out;
    return out;
}

__device__ __forceinline__ void gh_set_lane(gh_u64 (&w)[4], int lane, gh_u64 value) {
#pragma unroll
    for (int i = 0; i < GH_BUCKET; ++i) w[i] = (lane == i) ? value : w[i];
}

// The probe loop. Buckets are visited in the order b1, b2, b2+1, b2+2, ... (wrapping). A key
// lives in the first bucket of its sequence that had an EMPTY slot when it was inserted, so a
// search stops at the first bucket holding an EMPTY slot; a search whose first bucket is full
// also stops there when the bucket's overflow bit says no key of it went further.
// CLAIM: take the first EMPTY slot by CAS if the key is absent (never a tombstone, so two
// copies of a key can never arise: every claimant of a key races for the same first EMPTY).
// The two sentinel keys live out of band in slots num_slots and num_slots + 1; there an
// "absent" marker (the other sentinel) plays the part of EMPTY.
template <bool CLAIM, bool COHERENT>
__device__ GhSlot gh_probe(const GhTable& t, gh_u64 key, gh_u64 vbits) {
    if (key >= GH_TOMB) {
        const gh_u64 slot = t.num_slots() + (key == GH_TOMB ? 1 : 0);
        gh_u64* w = t.word(slot);
        gh_u64 cur = __ldcg(w);
        while (true) {
            if ((cur & GH_KEY_MASK) == key) return {static_cast<gh_i64>(slot), false};
            if (!CLAIM) return {-1, false};
            const gh_u64 prev = atomicCAS(w, cur, gh_make_word(cur, key, vbits));
            if (prev == cur) return {static_cast<gh_i64>(slot), true};
            cur = prev;
        }
    }
    gh_u64 b1, b2, filter_bit;
    gh_buckets(t, key, b1, b2, filter_bit);
    gh_u64 bucket = b1;
    for (gh_u64 step = 0; step <= t.num_buckets; ++step) {
        gh_u64 w[GH_BUCKET];
        gh_load_bucket<COHERENT>(t, bucket, w);
        while (true) {
            int free_lane = -1;
#pragma unroll
            for (int i = 0; i < GH_BUCKET; ++i) {
                const gh_u64 part = w[i] & GH_KEY_MASK;
                if (part == key) return {static_cast<gh_i64>(bucket * GH_BUCKET + i), false};
                if (part == GH_EMPTY && free_lane < 0) free_lane = i;
            }
            if (free_lane < 0) break;
            if (!CLAIM) return {-1, false};
            const gh_u64 slot = bucket * GH_BUCKET + free_lane;
            const gh_u64 seen = gh_lane(w, free_lane);
            const gh_u64 prev = atomicCAS(t.word(slot), seen, gh_make_word(seen, key, vbits));
            if (prev == seen) {
                if (step != 0) gh_mark_overflow(t, filter_bit);
                return {static_cast<gh_i64>(slot), true};
            }
            gh_set_lane(w, free_lane, prev);  // lost the race: look at the slot's new word
        }
        if (!CLAIM && step == 0 && !gh_overflowed(t, filter_bit)) return {-1, false};
        bucket = (step == 0) ? b2 : (bucket + 1 == t.num_buckets ? 0 : bucket + 1);
    }
    return {-1, false};
}

// Inserts or assigns one key; the value is read from value_src (GH_VALUE_BYTES bytes).
// Returns whether the key was new. The host checks room first, so a claim always finds a slot.
__device__ __forceinline__ bool gh_insert_one(const GhTable& t, gh_u64 key, const char* value_src) {
    const gh_u64 vbits = (GH_LAYOUT == GH_PACKED) ? gh_value_bits<GH_VALUE_BYTES>(value_src) : 0;
    const GhSlot s = gh_probe<true, true>(t, key, vbits);
    if (s.slot < 0) return false;
    if (GH_VALUE_BYTES > 0) {
        if (GH_LAYOUT == GH_PACKED) {
            if (!s.claimed) *reinterpret_cast<volatile gh_u64*>(t.word(s.slot)) = key | (vbits << 32);
        } else {
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
