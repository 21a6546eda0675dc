// gh_last_rows: which row of a batch is the last (or, with `first`, the first) of its key, in
// one pass over a scratch table of the core. Used by every structure whose writes follow dict
// semantics (map.cu, cache.cu), and by the cache's find_or_insert, whose first row acts.
#pragma once
#include "launch_params.cuh"

// Dict semantics without a sort: clears active[row] on every row but the last of its key
// (active starts all ones; the host then inserts the rows left set as distinct keys). S is a
// scratch table sized for the batch at load 0.5 whose value is the largest row of each key seen
// so far: a claim publishes the key with -1, then every row raises the value by an atomic max
// on that slot (S's layout keeps the claim from ever writing the value after a raise: packed
// slots publish key and value in one CAS; rows keep values out of the slot words). The row
// that raises it clears the row it replaced; a row finding a larger one clears itself. Rows
// only ever clear flags, so the order of those stores does not matter: every row but the
// largest of its key is cleared by the row that passed it, and the largest never is. With
// `first` set the rule is mirrored: an atomic min as unsigned (the claim's -1 reads as the
// largest value) keeps each key's smallest row, its first.
template <class S>
__global__ void gh_last_rows(GH_TABLE_PARAMS, const char* keys, gh_u64 n, gh_u8* active,
                             gh_u64 first) {
    static_assert(S::LAYOUT == GH_PACKED || S::LAYOUT == GH_ROWS, "a claim must not write values");
    const S t = GH_REF(S);
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const gh_u64 key = gh_key_at<S>(keys, row);
        // the two sentinel keys own the out-of-band slots outright: only their values are used
        // (so the scratch needs no out-of-band markers, just its fill of all ones)
        GhSlot s = {static_cast<gh_i64>(t.num_slots() + (key == S::TOMB)), false, 0};
        if (key < S::TOMB) s = gh_probe<S, GH_CLAIM, true>(t, key, 0xffffffffULL);
        if (s.slot < 0) {  // never: the scratch has twice the batch's slots
            gh_report_unplaced(t);
            continue;
        }
        gh_i64 prev;
        if constexpr (S::VALUE_BYTES == 4) {  // rows < 2^31 (the host takes the 8-byte
                                               // instance, or splits, past that)
            int* value = reinterpret_cast<int*>(t.value(s.slot));
            prev = first ? static_cast<int>(atomicMin(reinterpret_cast<unsigned int*>(value),
                                                      static_cast<unsigned int>(row)))
                         : atomicMax(value, static_cast<int>(row));
        } else {
            long long* value = reinterpret_cast<long long*>(t.value(s.slot));
            prev = first ? static_cast<long long>(atomicMin(
                               reinterpret_cast<unsigned long long*>(value),
                               static_cast<unsigned long long>(row)))
                         : atomicMax(value, static_cast<long long>(row));
        }
        // prev < 0: the claim's -1, no row of the key before this one
        if (prev >= 0 && (first ? prev < static_cast<gh_i64>(row)
                                : prev > static_cast<gh_i64>(row))) {
            active[row] = 0;
        } else if (prev >= 0) {
            active[prev] = 0;
        }
    }
}
