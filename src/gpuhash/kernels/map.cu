// The HashMap / HashSet kernels: one thread per key, each a thin caller of the core in
// open_addressing.cuh. Every parameter is 8 bytes wide (pointers, 64-bit counts) so the host
// can pass plain Python ints. Table parameters come first, in GH_TABLE_PARAMS order.
#include "open_addressing.cuh"

#define GH_TABLE_PARAMS gh_u64 *slots, char *values, gh_u32 *overflow, gh_i64 *counts, \
                        gh_u64 num_buckets, gh_u64 seed
#define GH_TABLE GhTable{slots, values, overflow, counts, num_buckets, seed}

// Register caps for the hot kernels (min resident blocks of 256 threads; 8 leaves 32 registers
// per thread) are off: measured on the H100 (scripts/occupancy_variants.py) a cap of 8 lost
// everywhere (u32 misses at load 0.5: 0.82 against 0.91 of C_hbm) and 6 was mixed, so the
// kernels are not occupancy-bound at their 36-56 registers. Defined only by that script.
#ifdef GH_MIN_BLOCKS
#define GH_BOUNDS __launch_bounds__(256, GH_MIN_BLOCKS)
#else
#define GH_BOUNDS
#endif

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

// Kernels that change the entry counts loop over rows (any grid works) and add their counts
// once per block: per-warp atomics on one counter serialised inserts (4.5 G/s on the H100).

// Displacement keeps every key in one of its two buckets at high load; it moves values with
// their keys, so the rows layout (values addressed by slot) keeps the linear fallback instead.
constexpr bool GH_CAN_DEFER = (GH_LAYOUT != GH_ROWS);
#ifndef GH_COUNT  // 0 only in scripts/insert_variants.py, to time what counting costs
#define GH_COUNT 1
#endif
constexpr gh_u8 GH_PENDING = 2;  // inserted[row] while the row waits for gh_insert_deferred

// Inserts or assigns one row and counts it; returns the row's `inserted` state (0, 1, or
// GH_PENDING when `defer` left it for gh_insert_deferred).
__device__ __forceinline__ gh_u8 gh_insert_row(const GhTable& t, gh_u64 key, const char* src,
                                               gh_u64 defer, gh_i64* live, gh_i64* used) {
    bool deferred = false;
    const bool claimed = (GH_CAN_DEFER && defer)
                             ? gh_insert_one<GH_CAN_DEFER>(t, key, src, &deferred)
                             : gh_insert_one(t, key, src);
    *live += claimed;
    *used += claimed && key < GH_TOMB;
    return deferred ? GH_PENDING : claimed;
}

// Insert or assign rows whose `active` byte is set (all rows when active is null);
// inserted[row] says whether the row added a new key. With `defer` (only when the active keys
// are distinct), a new key whose first bucket is full is left for gh_insert_deferred.
extern "C" __global__ void GH_BOUNDS gh_insert(GH_TABLE_PARAMS, const char* keys,
                                               const char* in_values, const gh_u8* active,
                                               gh_u8* inserted, gh_u64 n, gh_u64 defer) {
    const GhTable t = GH_TABLE;
    gh_i64 live = 0, used = 0;  // every claim adds a live entry; bucket claims use a slot
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_u8 state = 0;
        if (active == nullptr || active[row]) {
            state = gh_insert_row(t, gh_key_at(keys, row), in_values + row * GH_VALUE_BYTES,
                                  defer, &live, &used);
        }
        inserted[row] = state;
    }
    if (GH_COUNT) gh_block_count(&t.counts[0], live, &t.counts[1], used);
}

// gh_insert over rows that gh_partition_scatter put in table order: keys and values are the
// ordered copies, rows[i] the original row of copy i, and *total (on the device, so the host
// need not wait for it) how many copies there are.
extern "C" __global__ void GH_BOUNDS gh_insert_ordered(GH_TABLE_PARAMS, const char* keys,
                                                       const char* in_values,
                                                       const gh_u32* rows, const gh_i64* total,
                                                       gh_u8* inserted, gh_u64 n,
                                                       gh_u64 defer) {
    const GhTable t = GH_TABLE;
    gh_i64 live = 0, used = 0;
    const gh_u64 count = static_cast<gh_u64>(*total) < n ? static_cast<gh_u64>(*total) : n;
    for (gh_u64 i = gh_row(); i < count; i += gh_stride()) {
        inserted[rows[i]] = gh_insert_row(t, gh_key_at(keys, i), in_values + i * GH_VALUE_BYTES,
                                          defer, &live, &used);
    }
    gh_block_count(&t.counts[0], live, &t.counts[1], used);
}

// --- Table-ordered inserts -----------------------------------------------------------------
// A big batch into a table larger than L2 is first put in the order of the table's regions
// (seed 001's radix partitioning): copies of its rows grouped by the part of the table their
// first bucket lies in, so the insert then works through the table a few regions at a time,
// each cached in L2, instead of missing L2 on every row. Block b owns rows
// [b * rows_per_block, (b + 1) * rows_per_block); part_counts[part * gridDim.x + b] is how
// many of them go to `part`, and the host's inclusive cumulative sum of those, in that order, gives
// each (part, block) its place.
constexpr int GH_MAX_PARTS = 2048;

// Parts are contiguous bucket ranges: both the part and the first bucket are the same 32 hash
// bits scaled to their range. The two out-of-band keys go to part 0.
__device__ __forceinline__ gh_u32 gh_part_of(const GhTable& t, gh_u64 key, gh_u64 num_parts) {
    if (key >= GH_TOMB) return 0;
    return static_cast<gh_u32>(gh_range(gh_mix64(key ^ t.seed) & 0xffffffffULL, num_parts));
}

extern "C" __global__ void gh_partition_count(GH_TABLE_PARAMS, const char* keys,
                                              const gh_u8* active, gh_u64 n, gh_u64 num_parts,
                                              gh_u64 rows_per_block, gh_u32* part_counts) {
    const GhTable t = GH_TABLE;
    __shared__ gh_u32 local[GH_MAX_PARTS];
    for (gh_u64 p = threadIdx.x; p < num_parts; p += blockDim.x) local[p] = 0;
    __syncthreads();
    const gh_u64 begin = static_cast<gh_u64>(blockIdx.x) * rows_per_block;
    const gh_u64 end = begin + rows_per_block < n ? begin + rows_per_block : n;
    for (gh_u64 row = begin + threadIdx.x; row < end; row += blockDim.x) {
        if (active != nullptr && !active[row]) continue;
        atomicAdd(&local[gh_part_of(t, gh_key_at(keys, row), num_parts)], 1u);
    }
    __syncthreads();
    for (gh_u64 p = threadIdx.x; p < num_parts; p += blockDim.x) {
        part_counts[p * gridDim.x + blockIdx.x] = local[p];
    }
}

// Copies each active row's key and value to its place in table order, and its row number.
extern "C" __global__ void gh_partition_scatter(GH_TABLE_PARAMS, const char* keys,
                                                const char* in_values, const gh_u8* active,
                                                gh_u64 n, gh_u64 num_parts,
                                                gh_u64 rows_per_block, const gh_u32* part_counts,
                                                const gh_i64* ends, char* out_keys,
                                                char* out_values, gh_u32* out_rows) {
    const GhTable t = GH_TABLE;
    __shared__ gh_u32 cursor[GH_MAX_PARTS];
    for (gh_u64 p = threadIdx.x; p < num_parts; p += blockDim.x) {
        const gh_u64 at = p * gridDim.x + blockIdx.x;
        cursor[p] = static_cast<gh_u32>(ends[at] - part_counts[at]);
    }
    __syncthreads();
    const gh_u64 begin = static_cast<gh_u64>(blockIdx.x) * rows_per_block;
    const gh_u64 end = begin + rows_per_block < n ? begin + rows_per_block : n;
    for (gh_u64 row = begin + threadIdx.x; row < end; row += blockDim.x) {
        if (active != nullptr && !active[row]) continue;
        const gh_u64 key = gh_key_at(keys, row);
        const gh_u64 at = atomicAdd(&cursor[gh_part_of(t, key, num_parts)], 1u);
        if (GH_KEY_BYTES == 4) {
            reinterpret_cast<gh_u32*>(out_keys)[at] = static_cast<gh_u32>(key);
        } else {
            reinterpret_cast<gh_u64*>(out_keys)[at] = key;
        }
        if (GH_VALUE_BYTES > 0) {
            gh_copy_value<GH_VALUE_BYTES>(out_values + at * GH_VALUE_BYTES,
                                          in_values + row * GH_VALUE_BYTES);
        }
        out_rows[at] = static_cast<gh_u32>(row);
    }
}

// Second pass of a deferred insert: places the rows gh_insert left pending by displacement.
extern "C" __global__ void gh_insert_deferred(GH_TABLE_PARAMS, const char* keys,
                                              const char* in_values, gh_u8* inserted, gh_u64 n,
                                              gh_u32* locks) {
    const GhTable t = GH_TABLE;
    gh_i64 placed = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        if (inserted[row] != GH_PENDING) continue;
        const gh_u64 vbits = gh_value_bits<(GH_VALUE_BYTES > 8 ? 8 : GH_VALUE_BYTES)>(
            in_values + row * GH_VALUE_BYTES);
        gh_place_displacing(t, locks, gh_key_at(keys, row), vbits);
        inserted[row] = 1;
        ++placed;
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}

// find / find_index / contains: each output is optional (null to skip).
extern "C" __global__ void GH_BOUNDS gh_lookup(GH_TABLE_PARAMS, const char* keys, gh_u64 n,
                                               char* out_values, const char* default_value,
                                               gh_i64* out_index, gh_u8* out_found) {
    const GhTable t = GH_TABLE;
    const gh_u64 row = gh_row();
    if (row >= n) return;
    const GhSlot s = gh_probe<false, false>(t, gh_key_at(keys, row), 0);
    if (out_values != nullptr) {
        char* out = out_values + row * GH_VALUE_BYTES;
        if (s.slot < 0) {
            gh_copy_value<GH_VALUE_BYTES>(out, default_value);
        } else if (GH_LAYOUT == GH_ROWS) {
            gh_copy_value<GH_VALUE_BYTES>(out, t.value(s.slot));
        } else {
            gh_store_value_bits<GH_VALUE_BYTES>(out, s.value);  // already loaded by the probe
        }
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
// Source keys are distinct, so entries whose first bucket is full are marked in `pending` (one
// byte per source slot) and placed by gh_rehash_deferred.
__device__ __forceinline__ const char* gh_source_value(const gh_u64* source_slots,
                                                       const char* source_values, gh_u64 i) {
    if (GH_LAYOUT == GH_ROWS) return source_values + i * GH_VALUE_BYTES;
    return reinterpret_cast<const char*>(source_slots + i * GH_WORDS) + GH_VALUE_OFFSET;
}

extern "C" __global__ void gh_rehash(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                     const char* source_values, gh_u64 source_num_slots,
                                     gh_u8* pending) {
    const GhTable t = GH_TABLE;
    gh_i64 live = 0, used = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots + 2; i += gh_stride()) {
        const gh_u64 key = source_slots[i * GH_WORDS] & GH_KEY_MASK;
        const bool present = (i < source_num_slots)
                                 ? key < GH_TOMB
                                 : key == (i == source_num_slots ? GH_EMPTY : GH_TOMB);
        bool deferred = false;
        if (present) {
            const char* src = gh_source_value(source_slots, source_values, i);
            const bool claimed = gh_insert_one<GH_CAN_DEFER>(t, key, src, &deferred);
            live += claimed;
            used += claimed && key < GH_TOMB;
        }
        pending[i] = deferred;
    }
    gh_block_count(&t.counts[0], live, &t.counts[1], used);
}

extern "C" __global__ void gh_rehash_deferred(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                              const char* source_values,
                                              gh_u64 source_num_slots, const gh_u8* pending,
                                              gh_u32* locks) {
    const GhTable t = GH_TABLE;
    gh_i64 placed = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots + 2; i += gh_stride()) {
        if (!pending[i]) continue;
        const gh_u64 vbits = gh_value_bits<(GH_VALUE_BYTES > 8 ? 8 : GH_VALUE_BYTES)>(
            gh_source_value(source_slots, source_values, i));
        gh_place_displacing(t, locks, source_slots[i * GH_WORDS] & GH_KEY_MASK, vbits);
        ++placed;
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}
