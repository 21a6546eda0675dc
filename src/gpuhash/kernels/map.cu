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

__device__ __forceinline__ gh_u64 gh_stride() {
    return static_cast<gh_u64>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ gh_u64 gh_key_at(const char* keys, gh_u64 row) {
    if (GH_KEY_BYTES == 4) return reinterpret_cast<const gh_u32*>(keys)[row];
    return reinterpret_cast<const gh_u64*>(keys)[row];
}

// Kernels that change the entry counts loop over rows with a grid sized to fill the GPU
// (launch.py: persistent=True) and add their counts once per block.

// Insert or assign rows whose `active` byte is set (all rows when active is null);
// inserted[row] (if not null) says whether the row added a new key.
extern "C" __global__ void gh_insert(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                                     const gh_u8* active, gh_u8* inserted, gh_u64 n) {
    const GhTable t = GH_TABLE;
    gh_i64 live = 0, used = 0;  // every claim adds a live entry; bucket claims use a slot
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        bool claimed = false;
        if (active == nullptr || active[row]) {
            const gh_u64 key = gh_key_at(keys, row);
            claimed = gh_insert_one(t, key, in_values + row * GH_VALUE_BYTES);
            live += claimed;
            used += claimed && key < GH_TOMB;
        }
        if (inserted != nullptr) inserted[row] = claimed;
    }
    gh_block_count(&t.counts[0], live, &t.counts[1], used);
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
    gh_i64 gone = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const bool erased_here = gh_erase_one(t, gh_key_at(keys, row));
        erased[row] = erased_here;
        gone += erased_here;
    }
    gh_block_count(&t.counts[0], -gone, nullptr, 0);
}

// Inserts every live entry of a source table (same key and value types) into this one:
// growth and compaction. The value is read straight from the source's slot or row.
extern "C" __global__ void gh_rehash(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                     const char* source_values, gh_u64 source_num_slots) {
    const GhTable t = GH_TABLE;
    gh_i64 live = 0, used = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots + 2; i += gh_stride()) {
        const gh_u64 key = source_slots[i * GH_WORDS] & GH_KEY_MASK;
        const bool present = (i < source_num_slots)
                                 ? key < GH_TOMB
                                 : key == (i == source_num_slots ? GH_EMPTY : GH_TOMB);
        if (present) {
            const char* src = (GH_LAYOUT == GH_ROWS)
                                  ? source_values + i * GH_VALUE_BYTES
                                  : reinterpret_cast<const char*>(source_slots + i * GH_WORDS) +
                                        GH_VALUE_OFFSET;
            const bool claimed = gh_insert_one(t, key, src);
            live += claimed;
            used += claimed && key < GH_TOMB;
        }
    }
    gh_block_count(&t.counts[0], live, &t.counts[1], used);
}
