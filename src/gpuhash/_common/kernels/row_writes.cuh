// The core's row writes and erases over the probe walk of open_addressing.cuh, which includes
// this file at its end (every name used here is defined there first): a row's value copied
// under its bucket's lock where rows of one key may race, a key's insert, its erase, and the
// report of a row no bucket could take.
#pragma once

// Values wider than a word (rows layout) are copied in several stores. When rows of one key
// may write in the same launch (duplicates="any"), each copy happens under its bucket's lock
// (num_buckets + 1 words: the last guards the two out-of-band slots), so one row wins whole.
// A lock per bucket, not a few thousand striped ones: with every row of a launch taking a
// lock, a small stripe set serialises the launch.
// `locks` is null when the launch's keys are distinct.

template <class T>
__device__ __forceinline__ void gh_write_row(const T& t, gh_u32* locks, gh_u64 slot,
                                             const char* src) {
    if (locks == nullptr) {
        gh_copy_value<T::VALUE_BYTES>(t.value(slot), src);
        return;
    }
    gh_u32* lock = locks + slot / T::BUCKET;
    gh_lock(lock);
    gh_copy_value<T::VALUE_BYTES>(t.value(slot), src);
    gh_unlock(lock);
}

// Inserts or assigns one key; the value is read from value_src (T::VALUE_BYTES bytes).
// Returns the probe's result: slot -1 means no slot could be found (the caller reports it);
// with GH_CLAIM_B1, slot GH_DEFERRED means both the key is absent and b1 was full.
template <class T, int MODE>
__device__ __forceinline__ GhSlot gh_insert_one(const T& t, gh_u64 key, const char* value_src,
                                                gh_u32* row_locks) {
    const gh_u64 vbits = (T::LAYOUT != GH_ROWS) ? gh_value_bits<T::VALUE_BYTES>(value_src) : 0;
    const GhSlot s = gh_probe<T, MODE, true>(t, key, vbits);
    if (s.slot < 0) return s;
    if (T::VALUE_BYTES > 0) {
        if (T::LAYOUT == GH_PACKED) {
            if (!s.claimed) {  // one store rewrites key and value: a value never tears
                *reinterpret_cast<volatile gh_u64*>(t.word(s.slot)) = gh_make_word<T>(0, key, vbits);
            }
        } else if (T::LAYOUT == GH_PAIR) {
            if (!s.claimed) *reinterpret_cast<volatile gh_u64*>(t.word(s.slot) + 1) = vbits;
        } else {
            gh_write_row(t, row_locks, s.slot, value_src);
        }
    }
    return s;
}

// Erases one key: CAS its slot's key part to the erased marker. True if this call removed it.
template <class T>
__device__ __forceinline__ bool gh_erase_one(const T& t, gh_u64 key) {
    const GhSlot s = gh_probe<T, GH_SEARCH, true>(t, key, 0);
    if (s.slot < 0) return false;
    const gh_u64 marker = (key >= T::TOMB) ? (key == T::EMPTY ? T::TOMB : T::EMPTY) : T::TOMB;
    gh_u64* w = t.word(s.slot);
    gh_u64 cur = __ldcg(w);
    while ((cur & T::KEY_MASK) == key) {
        const gh_u64 prev = atomicCAS(w, cur, (cur & ~T::KEY_MASK) | marker);
        if (prev == cur) return true;
        cur = prev;
    }
    return false;
}

// Erases every copy of a key (multimap); returns how many this call removed.
template <class T>
__device__ __forceinline__ gh_i64 gh_erase_all(const T& t, gh_u64 key) {
    gh_i64 gone = 0;
    gh_for_each_match<T, true>(t, key, [&](gh_u64 slot) {
        gh_u64* w = t.word(slot);
        gh_u64 cur = __ldcg(w);
        while ((cur & T::KEY_MASK) == key) {
            const gh_u64 prev = atomicCAS(w, cur, (cur & ~T::KEY_MASK) | T::TOMB);
            if (prev == cur) {
                ++gone;
                break;
            }
            cur = prev;
        }
    });
    return gone;
}

// Records a row the kernels could not place: counts[2] tells the host at its next
// synchronising call, which then raises (and first puts any stashed entry back).
template <class T>
__device__ __forceinline__ void gh_report_unplaced(const T& t) {
    gh_count_add(&t.counts[2], 1);
}
