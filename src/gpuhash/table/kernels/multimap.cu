// The MultiMap kernels: every row is kept, repeated keys included. Templated on the table type
// and instantiated by name like map.cu. Retrieval is two-phase: gh_multi_count gives each query
// row its number of matches, the host takes an exclusive scan, and gh_multi_retrieve writes each
// row's matches at its offset, so no output position is contended. The two sentinel keys are
// refused by the Python layer (they have one out-of-band slot each, no room for copies).
#include "launch_params.cuh"

// Adds one entry (a new copy of its key) with the value at src; false (reported) if no slot.
template <class T>
__device__ __forceinline__ bool gh_add_copy(const T& t, gh_u64 key, const char* src) {
    const gh_u64 vbits = (T::LAYOUT != GH_ROWS) ? gh_value_bits<T::VALUE_BYTES>(src) : 0;
    const GhSlot s = gh_probe<T, GH_CLAIM_NEW, true>(t, key, vbits);
    if (s.slot < 0) {
        gh_report_unplaced(t);
        return false;
    }
    if (T::LAYOUT == GH_ROWS) gh_copy_value<T::VALUE_BYTES>(t.value(s.slot), src);
    return true;
}

template <class T>
__global__ void gh_multi_insert(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                                gh_u64 n) {
    const T t = GH_REF(T);
    gh_i64 placed = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        placed += gh_add_copy(t, gh_key_at<T>(keys, row), in_values + row * T::VALUE_BYTES);
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}

template <class T>
__global__ void gh_multi_count(GH_TABLE_PARAMS, const char* keys, gh_u64 n, gh_i64* out_counts) {
    const T t = GH_REF(T);
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_i64 count = 0;
        gh_for_each_match<T, false>(t, gh_key_at<T>(keys, row), [&](gh_u64) { ++count; });
        out_counts[row] = count;
    }
}

// offsets: exclusive scan of gh_multi_count's output; writes (query row, slot) pairs.
template <class T>
__global__ void gh_multi_retrieve(GH_TABLE_PARAMS, const char* keys, gh_u64 n,
                                  const gh_i64* offsets, gh_i64* out_rows, gh_i64* out_index) {
    const T t = GH_REF(T);
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_i64 at = offsets[row];
        gh_for_each_match<T, false>(t, gh_key_at<T>(keys, row), [&](gh_u64 slot) {
            out_rows[at] = static_cast<gh_i64>(row);
            out_index[at] = static_cast<gh_i64>(slot);
            ++at;
        });
    }
}

template <class T>
__global__ void gh_multi_erase(GH_TABLE_PARAMS, const char* keys, gh_u64 n, gh_i64* erased) {
    const T t = GH_REF(T);
    gh_i64 gone = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const gh_i64 here = gh_erase_all(t, gh_key_at<T>(keys, row));
        erased[row] = here;
        gone += here;
    }
    gh_block_count(&t.counts[0], -gone, nullptr, 0);
}

// Growth and compaction: every live entry of the source, copies included.
template <class T>
__global__ void gh_multi_rehash(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                const char* source_values, gh_u64 source_num_slots) {
    const T t = GH_REF(T);
    gh_i64 placed = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots; i += gh_stride()) {
        gh_u64 key;
        if (!gh_live_source<T>(source_slots, source_num_slots, i, &key)) continue;
        placed += gh_add_copy(t, key, gh_source_value<T>(source_slots, source_values, i));
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}
