// The HashMap / HashSet kernels: one thread per key, each a thin caller of the core in
// open_addressing.cuh. Every parameter is 8 bytes wide (pointers, 64-bit counts) so the host
// can pass plain Python ints. Table parameters come first, in GH_TABLE_PARAMS order.
#include "open_addressing.cuh"

#define GH_TABLE_PARAMS gh_u64 *slots, char *values, gh_u32 *overflow, gh_i64 *counts, \
                        gh_u64 num_buckets, gh_u64 seed
#define GH_TABLE GhTable{slots, values, overflow, counts, num_buckets, seed}

__device__ __forceinline__ gh_u64 gh_row() {
    return static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ gh_u64 gh_key_at(const char* keys, gh_u64 row) {
    if (GH_KEY_BYTES == 4) return reinterpret_cast<const gh_u32*>(keys)[row];
    return reinterpret_cast<const gh_u64*>(keys)[row];
}

// Counts a claim: every claim adds a live entry; only bucket claims use a bucket slot.
__device__ __forceinline__ void gh_count_claims(const GhTable& t, bool claimed, gh_u64 key) {
    const unsigned in_bucket = (claimed && key < GH_TOMB) ? 1u : 0u;
    gh_count(&t.counts[0], claimed ? 1u : 0u);
    gh_count(&t.counts[1], in_bucket);
}

// Insert or assign rows whose `active` byte is set (all rows when active is null);
// inserted[row] (if not null) says whether the row added a new key.
extern "C" __global__ void gh_insert(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                                     const gh_u8* active, gh_u8* inserted, gh_u64 n) {
    const GhTable t = GH_TABLE;
    const gh_u64 row = gh_row();
    bool claimed = false;
    gh_u64 key = 0;
    if (row < n) {
        if (active == nullptr || active[row]) {
            key = gh_key_at(keys, row);
            claimed = gh_insert_one(t, key, in_values + row * GH_VALUE_BYTES);
        }
        if (inserted != nullptr) inserted[row] = claimed;
    }
    gh_count_claims(t, claimed, key);
}

// find / find_index / contains: each output is optional (null to skip).
extern "C" __global__ void gh_lookup(GH_TABLE_PARAMS, const char* keys, gh_u64 n,
                                     char* out_values, const char* default_value,
                                     gh_i64* out_index, gh_u8* out_found) {
    const GhTable t = GH_TABLE;
    const gh_u64 row = gh_row();
    if (row >= n) return;
    const GhSlot s = gh_probe<false, false>(t, gh_key_at(keys, row), 0);
    if (out_values != nullptr) {
        gh_copy_value<GH_VALUE_BYTES>(out_values + row * GH_VALUE_BYTES,
                                      s.slot >= 0 ? t.value(s.slot) : default_value);
    }
    if (out_index != nullptr) out_index[row] = s.slot;
    if (out_found != nullptr) out_found[row] = s.slot >= 0;
}

extern "C" __global__ void gh_erase(GH_TABLE_PARAMS, const char* keys, gh_u64 n,
                                    gh_u8* erased) {
    const GhTable t = GH_TABLE;
    const gh_u64 row = gh_row();
    bool gone = false;
    if (row < n) {
        gone = gh_erase_one(t, gh_key_at(keys, row));
        erased[row] = gone;
    }
    gh_uncount(&t.counts[0], gone ? 1u : 0u);
}

// Inserts every live entry of a source table (same key and value types) into this one:
// growth and compaction. The value is read straight from the source's slot or row.
extern "C" __global__ void gh_rehash(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                     const char* source_values, gh_u64 source_num_slots) {
    const GhTable t = GH_TABLE;
    const gh_u64 i = gh_row();
    bool claimed = false;
    gh_u64 key = 0;
    if (i < source_num_slots + 2) {
        key = source_slots[i * GH_WORDS] & GH_KEY_MASK;
        const bool live = (i < source_num_slots)
                              ? key < GH_TOMB
                              : key == (i == source_num_slots ? GH_EMPTY : GH_TOMB);
        if (live) {
            const char* src = (GH_LAYOUT == GH_ROWS)
                                  ? source_values + i * GH_VALUE_BYTES
                                  : reinterpret_cast<const char*>(source_slots + i * GH_WORDS) +
                                        GH_VALUE_OFFSET;
            claimed = gh_insert_one(t, key, src);
        }
    }
    gh_count_claims(t, claimed, key);
}
