// Displacement (cuckoo) placement for keys whose first bucket was full, so that at high load
// nearly every key sits in one of its two buckets and a find reads about one bucket.
// Used only on keys known to be absent and distinct within the launch, after every plain claim
// of the batch has finished (a separate launch), so a key "in hand" between two buckets is never
// one that another thread is looking for. Packed slots swap key and value in one CAS; pair
// slots change two words, so without a 128-bit CAS every change to a bucket here happens under
// that bucket's lock (one word per bucket; claims outside this pass never overlap it in time).
// Rows-layout tables move the value row with the key: every change to a bucket happens under
// its lock, and the victim's row travels in the carrying thread's buffer.
#pragma once
#include "open_addressing.cuh"

constexpr int GH_MAX_KICKS = 128;

template <class T>
struct GhCarried {
    static constexpr int ROW_BYTES = (T::LAYOUT == GH_ROWS) ? T::VALUE_BYTES : 8;
    gh_u64 key;
    gh_u64 vbits;                         // packed / pair: the value bits
    alignas(16) char row[ROW_BYTES];      // rows: the value row
};

// Buckets whose slots change in more than one store are locked while they change.
template <class T>
constexpr bool GH_BUCKET_LOCKED = (T::LAYOUT == GH_PAIR && !T::CAS128) || T::LAYOUT == GH_ROWS;

template <class T>
__device__ __forceinline__ void gh_lock_bucket(gh_u32* locks, gh_u64 bucket) {
    if constexpr (GH_BUCKET_LOCKED<T>) gh_lock(locks + bucket);
}

template <class T>
__device__ __forceinline__ void gh_unlock_bucket(gh_u32* locks, gh_u64 bucket) {
    if constexpr (GH_BUCKET_LOCKED<T>) gh_unlock(locks + bucket);
}

// Claims an EMPTY slot of one bucket for the carried entry; false if the bucket is full.
template <class T>
__device__ bool gh_claim_in(const T& t, gh_u32* locks, gh_u64 bucket, const GhCarried<T>& c) {
    gh_lock_bucket<T>(locks, bucket);
    gh_u64 w[T::BUCKET], v[T::BUCKET];
    gh_load_bucket<T, true, false>(t, bucket, w, v);
    bool ok = false;
#pragma unroll
    for (int i = 0; i < T::BUCKET; ++i) {
        while (!ok && (w[i] & T::KEY_MASK) == T::EMPTY) {
            const gh_u64 slot = bucket * T::BUCKET + i;
            if (gh_swap_slot<T>(t.word(slot), w[i], v[i], gh_make_word<T>(w[i], c.key, c.vbits),
                                c.vbits, &w[i], &v[i])) {
                if (T::LAYOUT == GH_ROWS) gh_copy_value<T::VALUE_BYTES>(t.value(slot), c.row);
                ok = true;
            }
        }
    }
    gh_unlock_bucket<T>(locks, bucket);
    return ok;
}

// Whether a bucket holds an EMPTY slot (a hint: it may change before anyone claims it).
template <class T>
__device__ __forceinline__ bool gh_has_room(const T& t, gh_u64 bucket) {
    gh_u64 w[T::BUCKET], v[T::BUCKET];
    gh_load_bucket<T, true, false>(t, bucket, w, v);
    bool room = false;
#pragma unroll
    for (int i = 0; i < T::BUCKET; ++i) room |= (w[i] & T::KEY_MASK) == T::EMPTY;
    return room;
}

// Swaps the carried entry into a slot of `bucket` holding a key that may also live in its
// other bucket; on success the carried entry becomes the evicted one. Looks one step ahead: a
// victim whose other bucket has room is preferred, so most chains end after one move.
template <class T>
__device__ __forceinline__ bool gh_evict_in(const T& t, gh_u32* locks, gh_u64 bucket,
                                            GhCarried<T>* c, gh_u64 random) {
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass) {
        for (int j = 0; j < T::BUCKET; ++j) {
            const int lane = static_cast<int>((random + j) & (T::BUCKET - 1));
            const gh_u64 victim = __ldcg(t.word(bucket * T::BUCKET + lane)) & T::KEY_MASK;
            if (victim >= T::TOMB) continue;  // a tombstone (EMPTY cannot occur: bucket full)
            const GhHome home = gh_home(t, victim);
            if (home.b1 == home.b2 || (bucket != home.b1 && bucket != home.b2)) continue;
            if (pass == 0 && !gh_has_room(t, bucket == home.b1 ? home.b2 : home.b1)) continue;
            chosen = lane;
            break;
        }
    }
    if (chosen < 0) return false;
    gh_lock_bucket<T>(locks, bucket);
    const gh_u64 slot = bucket * T::BUCKET + chosen;
    gh_u64* word = t.word(slot);
    const gh_u64 seen = __ldcg(word);
    const gh_u64 victim = seen & T::KEY_MASK;
    bool done = false;
    if (victim < T::TOMB) {  // re-checked: another thread may have moved it meanwhile
        const GhHome home = gh_home(t, victim);
        if (home.b1 != home.b2 && (bucket == home.b1 || bucket == home.b2)) {
            const gh_u64 victim_bits = (T::WORDS == 1) ? seen >> 32 : __ldcg(word + 1);
            gh_u64 prev, prev_value;
            if (gh_swap_slot<T>(word, seen, victim_bits, gh_make_word<T>(seen, c->key, c->vbits),
                                c->vbits, &prev, &prev_value)) {
                if constexpr (T::LAYOUT == GH_ROWS) {  // swap the rows too (bucket locked)
                    char held[T::VALUE_BYTES] __attribute__((aligned(16)));
                    gh_copy_value<T::VALUE_BYTES>(held, t.value(slot));
                    gh_copy_value<T::VALUE_BYTES>(t.value(slot), c->row);
                    gh_copy_value<T::VALUE_BYTES>(c->row, held);
                }
                c->key = victim;
                c->vbits = victim_bits;
                done = true;
            }
        }
    }
    gh_unlock_bucket<T>(locks, bucket);
    return done;
}

// Places an absent key whose first bucket was full: claims a free slot in either bucket, else
// evicts a key to its other bucket and carries that one on (at most GH_MAX_KICKS times), and
// finally walks the rest of the carried key's sequence. The first eviction is from the key's
// own first bucket: the key then sits at home and only the victim leaves its own.
// Returns 0 if everything carried found a slot, 1 if the row's own key found none (it is not in
// the table: the row is not marked inserted), 2 if the row's key was placed but a victim it
// displaced found none (kept in `stash` / `stash_rows` for the host to put back). Only a
// table with no EMPTY slot left (counters that lie about its use) can get there: the host's
// room check leaves at least 1% of slots EMPTY.
// With `keep_own` (a rehash, whose own keys are entries of the table), an own key that found no
// slot is stashed like a victim and 2 returned: no entry is ever lost without the host knowing.
template <class T>
__device__ int gh_place_displacing(const T& t, gh_u32* locks, GhCarried<T> c, gh_u64* stash,
                                   char* stash_rows, gh_u64 stash_capacity, bool keep_own) {
    gh_u64 random = gh_mix64(c.key ^ GH_GOLDEN);
    gh_u64 came_from = ~0ULL;  // the bucket the carried key was just evicted from
    bool own = true;           // still carrying the row's own key
    for (int kick = 0; kick < GH_MAX_KICKS; ++kick) {
        const GhHome home = gh_home(t, c.key);
        if (gh_claim_in(t, locks, home.b1, c)) return 0;
        if (gh_claim_in(t, locks, home.b2, c)) {
            gh_mark_overflow(t, home.left_first);
            return 0;
        }
        random = gh_mix64(random + kick);
        const gh_u64 target = (came_from == home.b1) ? home.b2 : home.b1;
        if (!gh_evict_in(t, locks, target, &c, random)) continue;
        if (target != home.b1) gh_mark_overflow(t, home.left_first);  // the key placed there
        came_from = target;
        own = false;
    }
    // the carried key (maybe a victim) walks its own sequence
    const GhHome home = gh_home(t, c.key);
    gh_u64 bucket = home.b1;
    for (gh_u64 step = 0; step <= t.num_buckets + GH_RANDOM_STEPS + 1; ++step) {
        if (gh_claim_in(t, locks, bucket, c)) return 0;
        if (step == 0) gh_mark_overflow(t, home.left_first);
        if (step == 1) gh_mark_overflow(t, home.left_second);
        bucket = gh_next_bucket(t, home, step, bucket);
    }
    gh_report_unplaced(t);
    if (own && !keep_own) return 1;
    const gh_u64 at = static_cast<gh_u64>(atomicAdd(
        reinterpret_cast<unsigned long long*>(&t.counts[3]), 1ULL));
    if (stash != nullptr && at < stash_capacity) {
        stash[2 * at] = c.key;
        stash[2 * at + 1] = c.vbits;
        if (T::LAYOUT == GH_ROWS) {
            gh_copy_value<T::VALUE_BYTES>(stash_rows + at * T::VALUE_BYTES, c.row);
        }
    }
    return 2;
}
