// The open-addressing core: the table type, its device-side view ("ref"), the bucket
// sequence, the probe loop and the claim (row writes and erases: row_writes.cuh, included at
// the end). The map, set and multimap kernels (table/kernels), the join's build and probe
// (join/kernels/join_build.cuh, join.cu) and the dict-semantics scratch (last_rows.cuh) call
// these operations and walk no buckets of their own, so the invariant searches rely on
// (gh_walk) is kept here. Four files walk buckets of their own, for reasons this walk cannot
// serve:
//   _common/kernels/displacement.cuh  cuckoo placement of this table's keys: it moves keys
//                                     between their two buckets under bucket locks, which no
//                                     claim here does, and keeps the same invariant;
//   cache/kernels/cache.cuh           the cache's table: a key lives in its two buckets only,
//                                     found by digest bytes, and entries are evicted or moved;
//   cache/kernels/cache_index.cuh     the cache's key-to-slot index: linear buckets of entries,
//                                     each counting the keys stored past it;
//   join/kernels/radix_join.cu        a partition's table in shared memory: linear probing over
//                                     single slots, built and dropped by one block.
// The layout is table/format.py's. A table type is a template instance,
// GhTable<key bytes, value bytes, layout, bucket slots>, so one module may hold kernels for
// several table types and one kernel may take refs of two different tables.
#pragma once
#include "common.cuh"

// Slot layouts (codes in gh_constants.cuh): GH_PACKED, key and value share one 64-bit word
// (32-bit key, value <= 4 B); GH_PAIR, a 16-byte slot: key word, value word (value <= 8 B);
// GH_ROWS, key words in buckets, values in an array indexed by slot.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GH_HAS_CAS128 1  // the 16-byte atomicCAS overload exists only there
#else
#define GH_HAS_CAS128 0
#endif

template <int KEY_BYTES_, int VALUE_BYTES_, int LAYOUT_, int BUCKET_SLOTS_>
struct GhTable {
    static constexpr int KEY_BYTES = KEY_BYTES_;
    static constexpr int VALUE_BYTES = VALUE_BYTES_;  // 0 for a set
    static constexpr int LAYOUT = LAYOUT_;
    static constexpr int BUCKET = BUCKET_SLOTS_;      // slots per bucket (4 or 8)
    static constexpr int WORDS = (LAYOUT == GH_PAIR) ? 2 : 1;  // 64-bit words per slot
    static constexpr gh_u64 KEY_MASK = (KEY_BYTES == 4) ? 0xffffffffULL : ~0ULL;
    static constexpr gh_u64 EMPTY = KEY_MASK;        // never-used slot
    static constexpr gh_u64 TOMB = KEY_MASK - 1;     // erased slot
    static constexpr int VALUE_OFFSET = (LAYOUT == GH_PACKED) ? 4 : 8;
    static constexpr bool CAS128 = (LAYOUT == GH_PAIR) && GH_HAS_CAS128;
    // One CAS makes key and value visible together: no thread can see the key before its value.
    static constexpr bool ATOMIC_PUBLISH = (LAYOUT == GH_PACKED) || CAS128;
    // Claims read a bucket in steps of this many 16-byte pieces (half a bucket of one-word
    // slots), skipping the rest once a step ends in EMPTY: inserts read fewer lines.
    static constexpr int LAZY_PIECES = BUCKET / 4;

    gh_u64* slots;
    char* values;
    gh_u32* overflow;
    gh_i64* counts;  // [live entries, used bucket slots, unplaced rows, stash fill]
    gh_u64 num_buckets;
    gh_u64 seed;

    __device__ __forceinline__ gh_u64 num_slots() const { return num_buckets * BUCKET; }
    __device__ __forceinline__ gh_u64* word(gh_u64 slot) const { return slots + slot * WORDS; }
    __device__ __forceinline__ char* value(gh_u64 slot) const {
        if (LAYOUT == GH_ROWS) return values + slot * VALUE_BYTES;
        return reinterpret_cast<char*>(word(slot)) + VALUE_OFFSET;
    }
};

struct GhSlot {
    gh_i64 slot;   // -1: absent (or, for a claim, no free slot anywhere)
    bool claimed;  // the probe put the key there
    gh_u64 value;  // packed / pair: the value bits as loaded by the probe (finds use them
                   // instead of reading the slot again, which costs a second memory access)
    bool reused = false;  // the claim took an erased slot (no bucket slot newly used)
};

// Bucket choices and the two overflow-filter bits of a key. The filter has 16 bits per bucket:
// a key not in its first bucket sets bit (its fingerprint, 3 low hash bits) among the first
// bucket's low 8; a key past its second bucket also sets its fingerprint's bit among the second
// bucket's high 8. A search whose bucket is full goes on only if its own bit there is set.
struct GhHome {
    gh_u64 b1, b2;
    gh_u64 left_first;    // filter bit: "a key like this is not in b1"
    gh_u64 left_second;   // filter bit: "a key like this is past b2"
    gh_u64 hash;          // picks the buckets after b2
};

template <class T>
__device__ __forceinline__ GhHome gh_home(const T& t, gh_u64 key) {
    const gh_u64 h = gh_mix64(key ^ t.seed);
    const gh_u64 b1 = gh_range(h & 0xffffffffULL, t.num_buckets);
    const gh_u64 b2 = gh_range(h >> 32, t.num_buckets);
    return {b1, b2, b1 * 16 + (h & 7), b2 * 16 + 8 + (h & 7), h};
}

// A key's bucket sequence: b1, b2, then GH_RANDOM_STEPS buckets drawn from the key's hash,
// then linear from the last of those (wrapping), so every bucket is reached and a claim always
// ends when the host's room check passed. Random rather than linear steps after b2: linear runs
// of full buckets cluster, and a key landing in one walks its whole length. The CPU engine's
// next_bucket (_common/cpu/probe.py) is the same function.

template <class T>
__device__ __forceinline__ gh_u64 gh_next_bucket(const T& t, const GhHome& home, gh_u64 step,
                                                 gh_u64 bucket) {
    const gh_u64 next = step + 1;  // the step whose bucket this returns
    if (next == 1) return home.b2;
    if (next < 2 + GH_RANDOM_STEPS) {
        return gh_range(gh_mix64(home.hash + next) & 0xffffffffULL, t.num_buckets);
    }
    return bucket + 1 == t.num_buckets ? 0 : bucket + 1;
}

// The word a claim writes: the new key part, and for packed maps the value beside it, so one
// CAS publishes both (the bytes above a packed value are zero, as the CPU engine writes them).
template <class T>
__device__ __forceinline__ gh_u64 gh_make_word(gh_u64 old, gh_u64 key, gh_u64 vbits) {
    if (T::LAYOUT == GH_PACKED && T::KEY_BYTES == 4) return key | (vbits << 32);
    return (old & ~T::KEY_MASK) | key;
}

struct alignas(16) GhPair {
    gh_u64 key;
    gh_u64 value;
};

// Replaces a slot holding (seen_key, seen_value) with (new_key, new_value). Returns whether it
// did; either way *prev_key / *prev_value get what the slot held (for one-word slots the value
// is the word's high half, and new_value is already inside new_key). Without a 128-bit CAS the
// key word is claimed first and the value word written after it: callers that let other rows
// apply to the value in the same launch must not rely on that order (see gh_apply).
template <class T>
__device__ __forceinline__ bool gh_swap_slot(gh_u64* word, gh_u64 seen_key, gh_u64 seen_value,
                                             gh_u64 new_key, gh_u64 new_value,
                                             gh_u64* prev_key, gh_u64* prev_value) {
#if GH_HAS_CAS128
    if constexpr (T::CAS128) {
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
        *prev_value = (T::WORDS == 1) ? prev >> 32 : seen_value;
        if (prev != seen_key) return false;
        if (T::WORDS == 2) *reinterpret_cast<volatile gh_u64*>(word + 1) = new_value;
        return true;
    }
}

// Loads a bucket with 16-byte vector loads: the first word of each slot into w, and for pair
// slots the value word into v. COHERENT loads read L2 (ld.cg) because other threads of the same
// launch may be changing the bucket; searches use the read-only path. LAZY (the claims of the
// probe loop) loads half by half through L1: within one insert launch a slot only goes from
// EMPTY (or erased) to a key that then stays, so a stale line can only show EMPTY or erased
// where a key now sits, and the CAS on that slot fails and returns the key (L1 does not
// outlive a launch). EMPTY lanes are a suffix, so once a step's last lane is EMPTY the rest of
// the bucket is too.
template <class T, bool COHERENT, bool LAZY>
__device__ __forceinline__ void gh_load_bucket(const T& t, gh_u64 bucket,
                                               gh_u64 (&w)[T::BUCKET], gh_u64 (&v)[T::BUCKET]) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(t.word(bucket * T::BUCKET));
    constexpr int PIECES = T::BUCKET / 2;  // 16-byte pieces of a bucket of one-word slots
    constexpr int STEP = T::LAZY_PIECES;
    if constexpr (T::WORDS == 1 && LAZY && STEP < PIECES) {
        bool rest_empty = false;
#pragma unroll
        for (int i = 0; i < PIECES; i += STEP) {
            ulonglong2 part[STEP];
#pragma unroll
            for (int j = 0; j < STEP; ++j) {
                part[j] = rest_empty ? make_ulonglong2(~0ULL, ~0ULL) : p[i + j];
            }
#pragma unroll
            for (int j = 0; j < STEP; ++j) {
                w[2 * (i + j)] = part[j].x;
                w[2 * (i + j) + 1] = part[j].y;
            }
            rest_empty = rest_empty || (part[STEP - 1].y & T::KEY_MASK) == T::EMPTY;
        }
#pragma unroll
        for (int i = 0; i < T::BUCKET; ++i) v[i] = w[i] >> 32;
    } else if constexpr (T::WORDS == 1) {
#pragma unroll
        for (int i = 0; i < T::BUCKET / 2; ++i) {
            const ulonglong2 pair = COHERENT ? __ldcg(p + i) : __ldg(p + i);
            w[2 * i] = pair.x;
            w[2 * i + 1] = pair.y;
        }
#pragma unroll
        for (int i = 0; i < T::BUCKET; ++i) v[i] = w[i] >> 32;
    } else {
#pragma unroll
        for (int i = 0; i < T::BUCKET; ++i) {
            const ulonglong2 s = COHERENT ? __ldcg(p + i) : __ldg(p + i);
            w[i] = s.x;
            v[i] = s.y;
        }
    }
}

// COHERENT: read through L2, for searches of a table the same launch wrote (the read-only
// path is defined only for data no thread of the launch writes; join/kernels/join_build.cuh).
template <class T, bool COHERENT = false>
__device__ __forceinline__ bool gh_overflowed(const T& t, gh_u64 filter_bit) {
    const gh_u32* word = t.overflow + (filter_bit >> 5);
    return ((COHERENT ? __ldcg(word) : __ldg(word)) >> (filter_bit & 31)) & 1u;
}

template <class T>
__device__ __forceinline__ void gh_mark_overflow(const T& t, gh_u64 filter_bit) {
    gh_u32* word = t.overflow + (filter_bit >> 5);
    const gh_u32 bit = 1u << (filter_bit & 31);
    if (!(__ldcg(word) & bit)) atomicOr(word, bit);
}

// Register-array access with a run-time lane, unrolled so the array stays in registers.
template <int N>
__device__ __forceinline__ gh_u64 gh_lane(const gh_u64 (&w)[N], int lane) {
    gh_u64 out = w[0];
#pragma unroll
    for (int i = 1; i < N; ++i) out = (lane == i) ? w[i] : out;
    return out;
}

template <int N>
__device__ __forceinline__ void gh_set_lane(gh_u64 (&w)[N], int lane, gh_u64 value) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = (lane == i) ? value : w[i];
}

// --- the probe loop ----------------------------------------------------------------------
// gh_walk visits a key's buckets in sequence order, loading each, and calls
// visit(bucket, step, w, v), which returns true to stop. The invariant every writer keeps:
// each bucket of a key's sequence before the bucket holding it is full (slots never become
// EMPTY again), and the key's filter bit is set unless it sits in b1. So a SEARCH stops at the
// first bucket holding an EMPTY slot (the visitor's rule) or after b1 / b2 when that bucket is
// full but the key's filter bit there is clear (the walker's rule). For a multimap every copy
// of a key obeys the same invariant, so the same walk finds them all.
template <class T, bool SEARCH, bool COHERENT, bool LAZY, class Visit>
__device__ __forceinline__ void gh_walk(const T& t, const GhHome& home, Visit&& visit) {
    gh_u64 bucket = home.b1;
    for (gh_u64 step = 0; step <= t.num_buckets + GH_RANDOM_STEPS + 1; ++step) {
        gh_u64 w[T::BUCKET], v[T::BUCKET];
        gh_load_bucket<T, COHERENT, LAZY>(t, bucket, w, v);
        if (visit(bucket, step, w, v)) return;
        if (SEARCH && step == 0 && !gh_overflowed<T, COHERENT>(t, home.left_first)) return;
        if (SEARCH && step == 1 && !gh_overflowed<T, COHERENT>(t, home.left_second)) return;
        bucket = gh_next_bucket(t, home, step, bucket);
    }
}

// The first EMPTY lane of a bucket (-1 if full), its first erased lane and, unless MULTI, the
// lane holding key. Lanes are scanned downwards so each answer is a plain predicated move, the
// lowest lane left last: no compare chain on an earlier answer (a find of an L2-resident
// table is bound by these instructions). A map holds a key in at most one lane.
template <class T, bool MULTI>
__device__ __forceinline__ void gh_scan(const gh_u64 (&w)[T::BUCKET], gh_u64 key, int* match,
                                        int* free_lane, int* erased_lane) {
    int m = -1, f = -1, e = -1;
#pragma unroll
    for (int i = T::BUCKET - 1; i >= 0; --i) {
        const gh_u64 part = w[i] & T::KEY_MASK;
        if (!MULTI && part == key) m = i;
        if (part == T::EMPTY) f = i;
        if (part == T::TOMB) e = i;
    }
    *match = m;
    *free_lane = f;
    *erased_lane = e;
}

// Claim modes of gh_probe.
enum GhMode {
    GH_SEARCH = 0,     // find only
    GH_CLAIM = 1,      // find, or take the first EMPTY slot if the key is absent
    GH_CLAIM_B1 = 2,   // as GH_CLAIM, but absent keys with b1 full come back deferred
    GH_CLAIM_NEW = 3,  // multimap: take the first EMPTY slot whatever copies exist
};
constexpr gh_i64 GH_DEFERRED = -2;

// Finds a key, or claims a slot for it. Claims of rows that may repeat a key take only EMPTY
// slots, never erased ones, so two copies of a key can never arise: every claimant of a key
// races for the same first EMPTY.
// GH_CLAIM_B1 claims only in b1 and leaves the rest for gh_place_displacing (batches of
// distinct keys only): filling first buckets before any key settles for its second keeps more
// keys in their first. It also reuses erased slots: once the walk has reached a bucket with an
// EMPTY slot and found no copy, the key is absent, and no other row of the launch holds it
// (distinct keys), so the first erased slot of its walk may take it, CAS'd from its erased word
// (so two keys never take one slot). Insert/erase churn then leaves used slots flat instead of
// forcing a compaction again and again. The two sentinel keys live out of band in slots
// num_slots and num_slots + 1, where an "absent" marker (the other sentinel) plays the part of
// EMPTY.
template <class T, int MODE, bool COHERENT>
__device__ GhSlot gh_probe(const T& t, gh_u64 key, gh_u64 vbits) {
    constexpr bool CLAIM = MODE != GH_SEARCH;
    if (key >= T::TOMB) {  // MODE GH_CLAIM_NEW never sees these (the multimap refuses them)
        const gh_u64 slot = t.num_slots() + (key == T::TOMB ? 1 : 0);
        gh_u64* w = t.word(slot);
        gh_u64 cur = __ldcg(w);
        gh_u64 cur_value = (T::WORDS == 1) ? cur >> 32 : __ldcg(w + 1);
        while (true) {
            if ((cur & T::KEY_MASK) == key) return {static_cast<gh_i64>(slot), false, cur_value};
            if (!CLAIM) return {-1, false, 0};
            if (gh_swap_slot<T>(w, cur, cur_value, gh_make_word<T>(cur, key, vbits), vbits, &cur,
                                &cur_value)) {
                return {static_cast<gh_i64>(slot), true, vbits};
            }
        }
    }
    constexpr bool REUSE = MODE == GH_CLAIM_B1;
    const GhHome home = gh_home(t, key);
    GhSlot out = {-1, false, 0};
    gh_i64 erased = -1;  // REUSE: the first erased slot of the walk, its words and its step
    gh_u64 erased_word = 0, erased_value = 0, erased_step = 0;
    gh_walk<T, !CLAIM, COHERENT, CLAIM>(t, home, [&](gh_u64 bucket, gh_u64 step,
                                                     gh_u64 (&w)[T::BUCKET],
                                                     gh_u64 (&v)[T::BUCKET]) {
        while (true) {
            int match, free_lane, erased_lane;
            gh_scan<T, MODE == GH_CLAIM_NEW>(w, key, &match, &free_lane, &erased_lane);
            if (match >= 0) {
                out = {static_cast<gh_i64>(bucket * T::BUCKET + match), false, gh_lane(v, match)};
                return true;
            }
            if (REUSE && erased < 0 && erased_lane >= 0) {
                erased = static_cast<gh_i64>(bucket * T::BUCKET + erased_lane);
                erased_word = gh_lane(w, erased_lane);
                erased_value = gh_lane(v, erased_lane);
                erased_step = step;
            }
            if (free_lane < 0) return false;  // full: on to the next bucket
            if (!CLAIM) return true;          // a bucket with room ends a search
            // absent: take the first erased slot, if it is in b1 or b2 (past them, the
            // displacing pass places the key in one of its two buckets, which finds prefer)
            if (REUSE && erased >= 0 && erased_step <= 1) {
                gh_u64 prev, prev_value;
                if (gh_swap_slot<T>(t.word(erased), erased_word, erased_value,
                                    gh_make_word<T>(erased_word, key, vbits), vbits, &prev,
                                    &prev_value)) {
                    if (erased_step >= 1) gh_mark_overflow(t, home.left_first);
                    if (erased_step >= 2) gh_mark_overflow(t, home.left_second);
                    out = {erased, true, vbits, true};
                    return true;
                }
                // another key took it: look at this bucket again (or leave it to the EMPTY)
                if (static_cast<gh_u64>(erased) / T::BUCKET == bucket) {
                    gh_set_lane(w, static_cast<int>(erased % T::BUCKET), prev);
                    gh_set_lane(v, static_cast<int>(erased % T::BUCKET), prev_value);
                }
                erased = -1;
                continue;
            }
            if (MODE == GH_CLAIM_B1 && step >= 1) {
                out.slot = GH_DEFERRED;
                return true;
            }
            const gh_u64 slot = bucket * T::BUCKET + free_lane;
            const gh_u64 seen = gh_lane(w, free_lane);
            gh_u64 prev, prev_value;
            if (gh_swap_slot<T>(t.word(slot), seen, gh_lane(v, free_lane),
                                gh_make_word<T>(seen, key, vbits), vbits, &prev, &prev_value)) {
                if (step >= 1) gh_mark_overflow(t, home.left_first);
                if (step >= 2) gh_mark_overflow(t, home.left_second);
                out = {static_cast<gh_i64>(slot), true, vbits};
                return true;
            }
            gh_set_lane(w, free_lane, prev);  // lost the race: look at the slot's new words
            gh_set_lane(v, free_lane, prev_value);
        }
    });
    return out;
}

// Whether a key's sequence visited `bucket` before `step` (small tables revisit buckets; a
// multimap must count each copy once). Only the steps before the linear part can come back:
// a walk (at most num_buckets steps past them) is too short for the linear part to come round
// to itself, so at most 2 + GH_RANDOM_STEPS earlier steps are read. (Unbounded, the check would
// make a walk past one key's many copies quadratic in their number.)
template <class T>
__device__ __forceinline__ bool gh_visited_before(const T& t, const GhHome& home, gh_u64 step,
                                                  gh_u64 bucket) {
    gh_u64 earlier = home.b1;
    const gh_u64 steps = step < 2 + GH_RANDOM_STEPS ? step : 2 + GH_RANDOM_STEPS;
    for (gh_u64 j = 0; j < steps; ++j) {
        if (earlier == bucket) return true;
        earlier = gh_next_bucket(t, home, j, earlier);
    }
    return false;
}

// Calls f(slot) for every slot holding key (a multimap's copies), walking as a search does.
// The two sentinel keys are never stored in buckets (a multimap refuses them), and a walk for
// them would take EMPTY or erased slots for copies: they match nothing.
template <class T, bool COHERENT, class F>
__device__ __forceinline__ void gh_for_each_match(const T& t, gh_u64 key, F&& f) {
    if (key >= T::TOMB) return;
    const GhHome home = gh_home(t, key);
    gh_walk<T, true, COHERENT, false>(t, home, [&](gh_u64 bucket, gh_u64 step,
                                                   gh_u64 (&w)[T::BUCKET],
                                                   gh_u64 (&)[T::BUCKET]) {
        bool room = false, copies = false;
#pragma unroll
        for (int i = 0; i < T::BUCKET; ++i) {
            const gh_u64 part = w[i] & T::KEY_MASK;
            copies |= part == key;
            room |= part == T::EMPTY;
        }
        // worked out only where the bucket holds copies
        if (copies && !(step > 0 && gh_visited_before(t, home, step, bucket))) {
#pragma unroll
            for (int i = 0; i < T::BUCKET; ++i) {
                if ((w[i] & T::KEY_MASK) == key) f(bucket * T::BUCKET + i);
            }
        }
        return room;
    });
}

// What a search learns from a key's first bucket b1 (gh_warp_first_bucket): how many slots of
// b1 hold the key, the value word of the lowest of them, and whether the walk ends at b1 (b1
// has an EMPTY slot, or it is full and the key's filter bit says no copy went past it: the
// walker's own rules), in which case those are all the key's copies.
struct GhFirstLook {
    int copies;
    bool ends;
    gh_u64 first_value;
};

// The lanes of a warp read the first buckets of their keys together: in each of PIECES rounds,
// groups of PIECES lanes read one bucket, a 16-byte piece a lane, so a load instruction of the
// warp touches 32 / PIECES buckets, where a lane reading its own bucket touches 32 a piece. A
// probe of a table past L2 is bound by those L1 wavefronts and its instruction count, so the
// rounds keep to ballots and a few shuffles. This is the walk's first step only: a caller whose
// look does not end goes on with the walk (gh_for_each_match, which reads b1 again). Every lane
// of the warp must call it together. Inactive lanes, and the two sentinel keys (never stored in
// buckets: a multimap's rule), get no copy and ends = true. Layouts with the value beside the
// key only.
template <class T>
__device__ __forceinline__ GhFirstLook gh_warp_first_bucket(const T& t, gh_u64 key, bool active) {
    static_assert(T::LAYOUT != GH_ROWS && T::VALUE_BYTES > 0, "the value must be in the slots");
    using Key = typename GhIf<T::KEY_BYTES == 4, gh_u32, gh_u64>::type;  // shuffled as is
    using Value = typename GhIf<T::VALUE_BYTES <= 4, gh_u32, gh_u64>::type;
    constexpr int PIECES = T::BUCKET * T::WORDS / 2;  // 16-byte pieces of a bucket: 2 to 8
    constexpr int GROUPS = 32 / PIECES;               // buckets read in a round
    constexpr bool TWO = T::WORDS == 1;               // two slots a piece
    constexpr gh_u32 GROUP_BITS = (1u << PIECES) - 1;
    const int lane = threadIdx.x & 31;
    active = active && key < T::TOMB;
    const GhHome home = gh_home(t, key);
    const gh_u32 first_bucket = active ? static_cast<gh_u32>(home.b1) : 0;  // < 2**31
    const gh_u32 searching = __ballot_sync(0xffffffffu, active);
    // loads first, all rounds, so each lane has PIECES independent loads in flight
    ulonglong2 got[PIECES];
    Key sought[PIECES];
#pragma unroll
    for (int r = 0; r < PIECES; ++r) {
        const int owner = r * GROUPS + lane / PIECES;
        sought[r] = __shfl_sync(0xffffffffu, static_cast<Key>(key), owner);
        const gh_u32 bucket = __shfl_sync(0xffffffffu, first_bucket, owner);
        const ulonglong2* p = reinterpret_cast<const ulonglong2*>(
            t.word(static_cast<gh_u64>(bucket) * T::BUCKET));
        got[r] = ((searching >> owner) & 1) ? __ldg(p + lane % PIECES) : make_ulonglong2(0, 0);
    }
    GhFirstLook mine = {0, true, 0};
    const int my_round = lane / GROUPS, base = (lane % GROUPS) * PIECES;
#pragma unroll
    for (int r = 0; r < PIECES; ++r) {
        const Key first_key = static_cast<Key>(got[r].x);
        const Key second_key = static_cast<Key>(got[r].y);  // one-word slots only
        const bool hit0 = first_key == sought[r];
        const bool hit1 = TWO && second_key == sought[r];
        const bool empty = first_key == static_cast<Key>(T::EMPTY) ||
                           (TWO && second_key == static_cast<Key>(T::EMPTY));
        const Value value = static_cast<Value>(TWO ? (hit0 ? got[r].x : got[r].y) >> 32 : got[r].y);
        const gh_u32 hits0 = (__ballot_sync(0xffffffffu, hit0) >> base) & GROUP_BITS;
        const gh_u32 hits1 = TWO ? (__ballot_sync(0xffffffffu, hit1) >> base) & GROUP_BITS : 0;
        const gh_u32 empties = (__ballot_sync(0xffffffffu, empty) >> base) & GROUP_BITS;
        const gh_u32 pieces_hit = hits0 | hits1;
        const int src = base + (pieces_hit ? __ffs(pieces_hit) - 1 : 0);
        const Value first_value = __shfl_sync(0xffffffffu, value, src);
        if (r == my_round) mine = {__popc(hits0) + __popc(hits1), empties != 0, first_value};
    }
    if (!active) return {0, true, 0};
    if (!mine.ends) mine.ends = !gh_overflowed(t, home.left_first);  // b1 full
    return mine;
}

// --- row writes and erases: row_writes.cuh (they use the probe above) -----------------------
#include "row_writes.cuh"
