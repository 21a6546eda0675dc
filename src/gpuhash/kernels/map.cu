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

// Kernels loop over rows, so any grid works. Counting: a plain insert adds its counts once per
// block (per-warp atomics on one counter serialised inserts: 4.5 G/s on the H100). A deferred
// insert leaves them to the host, which adds the number of rows marked inserted after both
// launches (one reduction over the output): the displacing pass's rows take very different
// times, and a per-block count would end each block at a barrier waiting for its slowest row
// (measured: default-path inserts +11% at load 0.9, +14% at 0.99; plain inserts, whose rows
// take similar times, lost 4-6% that way). Only the rare claim of an out-of-band slot, which
// uses no bucket slot, is then counted here.

// Displacement keeps every key in one of its two buckets at high load; it moves values with
// their keys, so the rows layout (values addressed by slot) keeps the linear fallback instead.
constexpr bool GH_CAN_DEFER = (GH_LAYOUT != GH_ROWS);
constexpr gh_u8 GH_PENDING = 2;  // inserted[row] while the row waits for gh_insert_deferred

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
            const gh_u64 key = gh_key_at(keys, row);
            const char* src = in_values + row * GH_VALUE_BYTES;
            bool deferred = false;
            const bool claimed = (GH_CAN_DEFER && defer)
                                     ? gh_insert_one<GH_CAN_DEFER>(t, key, src, &deferred)
                                     : gh_insert_one(t, key, src);
            live += claimed;
            used += claimed && key < GH_TOMB;
            if (defer && claimed && key >= GH_TOMB) {  // the host counts it as a bucket slot
                atomicAdd(reinterpret_cast<unsigned long long*>(&t.counts[1]), ~0ULL);
            }
            state = deferred ? GH_PENDING : claimed;
        }
        inserted[row] = state;
    }
    if (!defer) gh_block_count(&t.counts[0], live, &t.counts[1], used);  // defer: grid-uniform
}

// Second pass of a deferred insert: places the rows gh_insert left pending by displacement.
extern "C" __global__ void gh_insert_deferred(GH_TABLE_PARAMS, const char* keys,
                                              const char* in_values, gh_u8* inserted, gh_u64 n,
                                              gh_u32* locks) {
    const GhTable t = GH_TABLE;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        if (inserted[row] != GH_PENDING) continue;
        const gh_u64 vbits = gh_value_bits<(GH_VALUE_BYTES > 8 ? 8 : GH_VALUE_BYTES)>(
            in_values + row * GH_VALUE_BYTES);
        gh_place_displacing(t, locks, gh_key_at(keys, row), vbits);
        inserted[row] = 1;  // counted by the host with the rest
    }
}

// find / find_index / contains: each output is optional (null to skip).
extern "C" __global__ void GH_BOUNDS gh_lookup(GH_TABLE_PARAMS, const char* keys, gh_u64 n,
                                               char* out_values, const char* default_value,
                                               gh_i64* out_index, gh_u8* out_found) {
    const GhTable t = GH_TABLE;
    const gh_u64 row = gh_row();
    if (row >= n) return;
    // A default of up to 8 bytes is read before the probe, so its load overlaps the bucket's
    // instead of adding a round trip to every miss.
    const bool wanted = out_values != nullptr && GH_LAYOUT != GH_ROWS;
    const gh_u64 default_bits = wanted ? gh_value_bits<(GH_VALUE_BYTES > 8 ? 8 : GH_VALUE_BYTES)>(
                                             default_value) : 0;
    const GhSlot s = gh_probe<false, false>(t, gh_key_at(keys, row), 0);
    if (out_values != nullptr) {
        char* out = out_values + row * GH_VALUE_BYTES;
        if (s.slot < 0 && GH_LAYOUT != GH_ROWS) {
            gh_store_value_bits<GH_VALUE_BYTES>(out, default_bits);
        } else if (s.slot < 0) {
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
