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

// --- joins -----------------------------------------------------------------------------------
// A join's build side is a multimap from key code to build row (the value, 4 or 8 bytes). Both
// kernels read the caller's key column as it is, IN_BYTES per row, and derive each row's code
// on the fly, so neither side is copied to be encoded first. `shape` says how:
//   0  the column holds codes already, as the table's key bits (IN_BYTES == KEY_BYTES)
//   1  signed values: code = value - low for low <= value <= high; others match nothing
//   2  the same for unsigned 32-bit values
// `valid` (one byte per row, or null) marks null rows, which match nothing. Codes stay below
// the two reserved key values or are reported: a non-null build row whose value lies outside
// [low, high], or whose code is reserved, is counted as unplaced (counts[2]) and never stored,
// so the host learns that the table lacks it (and refits its encoding) instead of losing it.
template <class T, int IN_BYTES>
__device__ __forceinline__ bool gh_join_code(const char* keys, const gh_u8* valid, gh_u64 row,
                                             gh_u64 shape, gh_i64 low, gh_i64 high,
                                             gh_u64* code) {
    if (valid != nullptr && !valid[row]) return false;
    gh_i64 value;
    if (IN_BYTES == 4) {
        const gh_u32 bits = reinterpret_cast<const gh_u32*>(keys)[row];
        if (shape == 0) {
            *code = bits;
            return true;
        }
        value = (shape == 2) ? static_cast<gh_i64>(bits) : static_cast<gh_i64>(static_cast<int>(bits));
    } else {
        const gh_u64 bits = reinterpret_cast<const gh_u64*>(keys)[row];
        if (shape == 0) {
            *code = bits;
            return true;
        }
        value = static_cast<gh_i64>(bits);
    }
    if (value < low || value > high) return false;
    *code = static_cast<gh_u64>(value - low);
    return true;
}

template <class T>
__device__ __forceinline__ gh_i64 gh_join_row(const T& t, gh_u64 slot) {
    if (T::VALUE_BYTES == 4) return *reinterpret_cast<const gh_u32*>(t.value(slot));
    return *reinterpret_cast<const gh_i64*>(t.value(slot));
}

// A build side of dense keys needs no hash table: its codes are distinct modulo a power of two
// at least its row count (integer ids over a range about their count are), so each code owns
// the entry at code & mask of an array of 64-bit words, ((build row + 1) << 32) | code, 0 when
// empty. The array is tried first, without the keys' range (learning it would cost the host a
// sync): an entry claimed twice (a repeated key, or two codes equal modulo the size) or a
// non-null row without a 32-bit code sets the word past the array (`failed`), and then the
// hash table is built and probed as if there were no array. So the array is used only when
// it holds every non-null build row. One word read or written by every warp costs as much as
// the claims (a 1M-row build: 22 us with dense keys, 111 with sparse ones, whose claims
// collide), so nothing reads `failed` here, and a block writes it once, when a claim of its
// fails; it then stops, since the array is given up (sparse keys collide in a block's first
// round). A thread takes several rows, a round at a time (engines/cuda.py: DIRECT_ROWS).
template <class T, int IN_BYTES>
__global__ void gh_join_direct_build(const char* keys, const gh_u8* valid, gh_u64 n,
                                     gh_u64 shape, gh_i64 low, gh_i64 high, gh_u64* direct,
                                     gh_u64 mask) {
    for (gh_u64 first = static_cast<gh_u64>(blockIdx.x) * blockDim.x; first < n;
         first += gh_stride()) {  // the same rounds for every thread of a block
        const gh_u64 row = first + threadIdx.x;
        bool lost = false;
        gh_u64 code;
        if (row >= n || (valid != nullptr && !valid[row])) {
            // past the end, or null: nulls match nothing and are not stored
        } else if (!gh_join_code<T, IN_BYTES>(keys, valid, row, shape, low, high, &code) ||
                   code > 0xffffffffull || row >= 0xffffffffull) {
            lost = true;
        } else {
            const gh_u64 entry = ((row + 1) << 32) | code;
            lost = atomicCAS(reinterpret_cast<unsigned long long*>(direct + (code & mask)),
                             0ull, static_cast<unsigned long long>(entry)) != 0ull;
        }
        if (__syncthreads_or(lost)) {
            if (threadIdx.x == 0) direct[mask + 1] = 1;  // failed
            return;
        }
    }
}

// Every usable build row becomes an entry: its key code -> its row number. With a direct
// array (`direct_failed`: the word past it, else null) that holds the build side, nothing.
template <class T, int IN_BYTES>
__global__ void gh_multi_join_build(GH_TABLE_PARAMS, const char* keys, const gh_u8* valid,
                                    gh_u64 n, gh_u64 shape, gh_i64 low, gh_i64 high,
                                    const gh_u64* direct_failed) {
    if (direct_failed != nullptr && *direct_failed == 0) return;
    const T t = GH_REF(T);
    gh_i64 placed = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        if (valid != nullptr && !valid[row]) continue;  // nulls match nothing: not stored
        gh_u64 code;
        const bool in_range = gh_join_code<T, IN_BYTES>(keys, valid, row, shape, low, high, &code);
        if (!in_range || code >= T::TOMB) {  // a reserved code would read as empty or erased
            gh_report_unplaced(t);
            continue;
        }
        const gh_u64 build_row = row;  // little-endian: its first VALUE_BYTES are the row
        placed += gh_add_copy(t, code, reinterpret_cast<const char*>(&build_row));
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}

constexpr gh_u64 GH_JOIN_KEEP_UNMATCHED = 1;  // a (row, -1) pair for a probe row with no match
constexpr gh_u64 GH_JOIN_MARK_BUILD = 2;      // build_hit[build row] = 1 for every match
constexpr gh_u64 GH_JOIN_HITS_ONLY = 4;       // no pairs: probe_hit[row] = whether it matched
constexpr gh_u64 GH_JOIN_WARP_READS = 8;      // first buckets read by the warp together
constexpr int GH_JOIN_ITEMS = 8;              // probe rows per thread per tile
#define GH_JOIN_BLOCKS 4  // resident blocks per SM: 64 registers (4-8 measured, bench/RESULTS.md)

// Probes every row and appends its (probe row, build row) pairs to out_probe / out_build.
// Output positions come from one atomic per block and tile (blockDim * GH_JOIN_ITEMS rows):
// per-warp atomics on the single counter would serialise (common.cuh: gh_block_count). Within
// a warp the pairs of item i of every lane are adjacent, so the stores coalesce. Pairs past
// `capacity` are counted in *total but not written: the caller sizes the output from *total
// and runs again when it was too small (only possible with repeated build keys). The order of
// the pairs is unspecified. total[1] gets the table's unplaced count (counts[2]), so one read
// of `total` tells the host both the output size and whether the build side is whole.
// The probe is bound by the latency of its bucket loads, so occupancy is what speeds it, and
// instruction fetch next: each item's match count and first build row live in shared memory
// (not registers), the item loops are not unrolled (eight inlined walks overflow the
// instruction cache), and the item-major offsets are scanned again while writing.
template <class T, int IN_BYTES>
__global__ void __launch_bounds__(256, GH_JOIN_BLOCKS)
gh_multi_join_probe(GH_TABLE_PARAMS, const char* keys, const gh_u8* valid, gh_u64 n,
                    gh_u64 shape, gh_i64 low, gh_i64 high, gh_u64 flags, gh_i64* out_probe,
                    gh_i64* out_build, gh_u64 capacity, gh_i64* total, gh_u8* build_hit,
                    gh_u8* probe_hit, const gh_u64* direct, gh_u64 direct_mask) {
    using Row = typename GhIf<T::VALUE_BYTES == 4, gh_u32, gh_i64>::type;
    const T t = GH_REF(T);
    __shared__ Row first[GH_JOIN_ITEMS][256];     // blocks of 256 threads (_cuda/launch.py)
    __shared__ gh_u32 count[GH_JOIN_ITEMS][256];  // a row's matches: < 2**32 (the build rows)
    __shared__ gh_i64 warp_base[32];
    __shared__ gh_i64 block_base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, me = threadIdx.x;
    const bool keep = flags & GH_JOIN_KEEP_UNMATCHED, mark = flags & GH_JOIN_MARK_BUILD;
    const bool together = flags & GH_JOIN_WARP_READS;  // the same for every lane
    const gh_u64 tile_rows = static_cast<gh_u64>(blockDim.x) * GH_JOIN_ITEMS;
    // the direct array (gh_join_direct_build), where it holds the build side: one read a row.
    // The engines pass one to tables of 4-byte codes only; others compile without its path.
    bool direct_used = false;
    if constexpr (T::KEY_BYTES == 4) direct_used = direct != nullptr && direct[direct_mask + 1] == 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) total[1] = t.counts[2];  // the build is done
    for (gh_u64 tile = blockIdx.x * tile_rows; tile < n; tile += gridDim.x * tile_rows) {
        gh_u64 mine = 0;  // pairs this thread emits in the tile
#pragma unroll 1
        for (int i = 0; i < GH_JOIN_ITEMS; ++i) {
            const gh_u64 row = tile + static_cast<gh_u64>(i) * blockDim.x + threadIdx.x;
            Row found = 0;
            gh_u32 matches = 0;
            gh_u64 code = 0;
            const bool usable =
                row < n && gh_join_code<T, IN_BYTES>(keys, valid, row, shape, low, high, &code);
            bool walk = usable && !direct_used;
            // one entry: this code's, another's, or none. In the item loop, not unrolled
            // apart: eight reads in flight a thread took the kernel from 48 registers to 64,
            // five resident blocks an SM to four, and the table's probes 198 -> 221 us (J3)
            if (direct_used && usable) {
                const gh_u64 entry = direct[code & direct_mask];
                if (entry != 0 && (entry & 0xffffffffull) == code) {
                    found = static_cast<Row>((entry >> 32) - 1);
                    matches = 1;
                    if (mark) build_hit[found] = 1;
                }
            }
            // Tables past L2: the warp reads first buckets together. From L2 the shuffles
            // cost more than the wavefronts they save, so there each lane walks alone
            // (both measured: bench/RESULTS.md, fourteenth session).
            if constexpr (T::LAYOUT != GH_ROWS) {
                if (together && !direct_used) {
                    const GhFirstLook look = gh_warp_first_bucket(t, code, usable);
                    walk = usable && !(look.ends && look.copies <= 1);
                    if (!walk && look.copies) {
                        found = static_cast<Row>(look.first_value);  // the low VALUE_BYTES
                        matches = 1;
                        if (mark) build_hit[found] = 1;
                    }
                }
            }
            if (walk) {  // copies past b1, or several in it: the whole walk, as one lane
                gh_for_each_match<T, false>(t, code, [&](gh_u64 slot) {
                    const Row build_row = static_cast<Row>(gh_join_row(t, slot));
                    if (matches == 0) found = build_row;
                    ++matches;
                    if (mark) build_hit[build_row] = 1;
                });
            }
            if ((flags & GH_JOIN_HITS_ONLY) && row < n) probe_hit[row] = matches > 0;
            first[i][me] = found;
            count[i][me] = matches;
            mine += matches ? matches : (keep && row < n ? 1 : 0);
        }
        if (flags & GH_JOIN_HITS_ONLY) continue;  // uniform: no barrier is skipped unevenly

        // the warps' totals, then their bases from one atomic per block
        gh_u64 warp_total = mine;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) warp_total += __shfl_xor_sync(0xffffffffu, warp_total, d);
        if (lane == 0) warp_base[warp] = static_cast<gh_i64>(warp_total);
        __syncthreads();
        if (threadIdx.x == 0) {
            gh_i64 sum = 0;
            for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
                const gh_i64 here = warp_base[w];
                warp_base[w] = sum;
                sum += here;
            }
            block_base = sum ? static_cast<gh_i64>(atomicAdd(
                                   reinterpret_cast<unsigned long long*>(total),
                                   static_cast<unsigned long long>(sum)))
                             : 0;
        }
        __syncthreads();
        gh_i64 base = block_base + warp_base[warp];  // where item i of lane 0 starts
#pragma unroll 1
        for (int i = 0; i < GH_JOIN_ITEMS; ++i) {
            const gh_u64 row = tile + static_cast<gh_u64>(i) * blockDim.x + threadIdx.x;
            const gh_u32 matches = count[i][me];
            const gh_u64 emit = matches ? matches : (keep && row < n ? 1 : 0);
            gh_i64 at;
            if (__all_sync(0xffffffffu, emit <= 1)) {  // the common case: a ballot, no scan
                const gh_u32 emitting = __ballot_sync(0xffffffffu, emit != 0);
                at = base + __popc(emitting & ((1u << lane) - 1));
                base += __popc(emitting);
            } else {
                gh_u64 inclusive = emit;
#pragma unroll
                for (int d = 1; d < 32; d <<= 1) {
                    const gh_u64 up = __shfl_up_sync(0xffffffffu, inclusive, d);
                    if (lane >= d) inclusive += up;
                }
                at = base + static_cast<gh_i64>(inclusive - emit);
                base += static_cast<gh_i64>(__shfl_sync(0xffffffffu, inclusive, 31));
            }
            const auto put = [&](gh_i64 build_row) {
                if (static_cast<gh_u64>(at) < capacity) {
                    out_probe[at] = static_cast<gh_i64>(row);
                    out_build[at] = build_row;
                }
                ++at;
            };
            if (matches == 1) {
                put(static_cast<gh_i64>(first[i][me]));
            } else if (matches > 1) {  // walk again: a thread keeps one match per row
                gh_u64 code;
                gh_join_code<T, IN_BYTES>(keys, valid, row, shape, low, high, &code);
                gh_for_each_match<T, false>(t, code, [&](gh_u64 slot) { put(gh_join_row(t, slot)); });
            } else if (keep && row < n) {
                put(-1);
            }
        }
        __syncthreads();  // warp_base and block_base are rewritten by the next tile
    }
}
