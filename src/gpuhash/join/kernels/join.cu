// The join kernels over a MultiMap's table of build rows: the build (join_build.cuh) and the
// probe. Templated on the table type and the key column's width, instantiated by name.
#include "launch_params.cuh"
#include "join_build.cuh"

// The probe's flags (values in gh_constants.cuh): GH_JOIN_KEEP_UNMATCHED, a (row, -1) pair for
// a probe row with no match; GH_JOIN_MARK_BUILD, build_hit[build row] = 1 for every match;
// GH_JOIN_HITS_ONLY, no pairs: probe_hit[row] = whether it matched; GH_JOIN_WARP_READS, first
// buckets read by the warp together; GH_JOIN_SEMI / GH_JOIN_ANTI, one (row, -1) for a probe
// row with / without a match, none else. GH_JOIN_ITEMS: probe rows per thread per tile.
// Groups of at least this many build rows are written (or marked) by the whole warp, a lane a
// row: else one probe row of a key held many times is one thread's stores, one after another,
// while its warp waits. Smaller ones by their own lane: a few rows a lane take fewer turns
// than the warp going through its lanes' groups one by one.
constexpr gh_u32 GH_JOIN_WARP_GROUP = 32;

// Calls f(a, b, j, ordered[start + 1 + j]) for every row j of the group of each lane with
// `big` set, one group at a time, the warp's lanes taking its rows in turn; a and b are that
// lane's. Every lane of the warp must call it.
template <class Row, class F>
__device__ __forceinline__ void gh_warp_group_rows(bool big, gh_i64 start, gh_u32 count,
                                                   gh_i64 a, gh_i64 b, const Row* ordered,
                                                   F&& f) {
    const gh_u32 lane = threadIdx.x & 31;
    for (gh_u32 lanes = __ballot_sync(0xffffffffu, big); lanes; lanes &= lanes - 1) {
        const int src = __ffs(lanes) - 1;
        const gh_i64 first = __shfl_sync(0xffffffffu, start, src) + 1;
        const gh_u32 rows = __shfl_sync(0xffffffffu, count, src);
        const gh_i64 their_a = __shfl_sync(0xffffffffu, a, src);
        const gh_i64 their_b = __shfl_sync(0xffffffffu, b, src);
        for (gh_u32 j = lane; j < rows; j += 32) {
            f(their_a, their_b, j, static_cast<gh_i64>(ordered[first + j]));
        }
    }
}
#define GH_JOIN_BLOCKS 4  // resident blocks per SM (64 registers): more spilled and ran slower

// Probes every row and appends its (probe row, build row) pairs to out_probe / out_build
// (semi / anti: one (row, -1) for each row that has / lacks a match, so the host learns the
// rows' count in the same read as everything else).
// Output positions come from one atomic per block and tile (blockDim * GH_JOIN_ITEMS rows):
// per-warp atomics on the single counter would serialise (common.cuh: gh_block_count). Within
// a warp the pairs of item i of every lane are adjacent, so the stores coalesce. Pairs past
// `capacity` are counted in *total but not written: the caller sizes the output from *total
// and runs again when it was too small (only possible with repeated build keys). The order of
// the pairs is unspecified. total[1] gets the table's unplaced count (counts[2]), so one read
// of `total` tells the host both the output size and whether the build side is whole.
// A code has one entry; a code of several build rows holds ~start of its group in `ordered`
// (gh_join_group_rows), whose row count the first pass reads and whose rows the second writes.
// The probe is bound by the latency of its bucket loads, so occupancy is what speeds it, and
// instruction fetch next: each item's match count and first build row live in shared memory
// (not registers), the item loops are not unrolled (eight inlined walks overflow the
// instruction cache), and the item-major offsets are scanned again while writing.
template <class T, int IN_BYTES>
__global__ void __launch_bounds__(256, GH_JOIN_BLOCKS)
gh_join_probe(GH_TABLE_PARAMS, const char* keys, const gh_u8* valid, gh_u64 n,
                    gh_u64 shape, gh_i64 low, gh_i64 high, gh_u64 flags, gh_i64* out_probe,
                    gh_i64* out_build, gh_u64 capacity, gh_i64* total, gh_u8* build_hit,
                    gh_u8* probe_hit, const gh_u64* direct, gh_u64 direct_mask,
                    const gh_u64* ranked, const GhJoinRow<T>* ordered) {
    using Row = GhJoinRow<T>;
    const T t = GH_REF(T);
    __shared__ Row first[GH_JOIN_ITEMS][256];     // blocks of 256 threads (_common/cuda/launch.py)
    __shared__ gh_u32 count[GH_JOIN_ITEMS][256];  // a row's matches: < 2**32 (the build rows)
    __shared__ gh_i64 warp_base[32];
    __shared__ gh_i64 block_base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, me = threadIdx.x;
    const bool keep = flags & GH_JOIN_KEEP_UNMATCHED, mark = flags & GH_JOIN_MARK_BUILD;
    const bool together = flags & GH_JOIN_WARP_READS;  // the same for every lane
    const gh_u64 tile_rows = static_cast<gh_u64>(blockDim.x) * GH_JOIN_ITEMS;
    // the direct array (join_build.cuh: gh_join_direct_rows), where it holds the build side:
    // one read a row.
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
                row < n && gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code);
            bool walk = usable && !direct_used;
            // one entry: this code's, another's, or none. In the item loop, not unrolled
            // apart: eight reads in flight a thread cost registers, so a resident block an
            // SM, and slowed the table's probe
            if (direct_used && usable && ranked == nullptr) {
                const gh_u64 entry = direct[code & direct_mask];
                if (entry != 0 && (entry & 0xffffffffull) == code) {
                    found = static_cast<Row>((entry >> 32) - 1);
                    matches = 1;
                }
            } else if (direct_used && usable && code <= 0xffffffffull) {
                // the ranked array (join_build.cuh: gh_join_ranked_bits): the code's word,
                // then, where its bit is set, the row at its rank. Its base is read here, a
                // word every row of the launch reads, rather than held across the loop:
                // the registers it took cost the table's probe a resident block an SM.
                const gh_u64 at = code - gh_join_ranked_base_of(ranked[0]);
                if ((at >> 5) <= direct_mask) {
                    const gh_u64 word = direct[at >> 5];
                    if ((word >> (at & 31)) & 1u) {
                        found = static_cast<Row>(
                            reinterpret_cast<const int*>(ranked + 1)[gh_join_rank_of(word, at)]);
                        matches = 1;
                    }
                }
            }
            // Tables past L2: the warp reads first buckets together. From L2 the shuffles
            // cost more than the wavefronts they save, so there each lane walks alone.
            if constexpr (T::LAYOUT != GH_ROWS) {
                if (together && !direct_used) {
                    const GhFirstLook look = gh_warp_first_bucket(t, code, usable);
                    walk = usable && !(look.ends && look.copies <= 1);
                    if (!walk && look.copies) {
                        found = static_cast<Row>(look.first_value);  // the low VALUE_BYTES
                        matches = 1;
                    }
                }
            }
            if (walk) {  // the code past b1: the walk, as one lane (a code has one entry)
                gh_for_each_match<T, false>(t, code, [&](gh_u64 slot) {
                    found = static_cast<Row>(gh_join_row(t, slot));
                    matches = 1;
                });
            }
            const bool group = matches && found < 0;  // its row count, then its rows
            const gh_i64 start = ~static_cast<gh_i64>(found);
            if (group) matches = static_cast<gh_u32>(ordered[start]);
            if (mark) {  // uniform
                if (matches && !group) build_hit[found] = 1;
                if (group && matches < GH_JOIN_WARP_GROUP) {
                    for (gh_u32 j = 0; j < matches; ++j) build_hit[ordered[start + 1 + j]] = 1;
                }
                gh_warp_group_rows(group && matches >= GH_JOIN_WARP_GROUP, start, matches, 0, 0,
                                   ordered, [&](gh_i64, gh_i64, gh_u32, gh_i64 build_row) {
                                       build_hit[build_row] = 1;
                                   });
            }
            if ((flags & GH_JOIN_HITS_ONLY) && row < n) probe_hit[row] = matches > 0;
            if (flags & (GH_JOIN_SEMI | GH_JOIN_ANTI)) {  // uniform: the row itself, or nothing
                const bool hit = matches > 0;
                matches = ((flags & GH_JOIN_SEMI) ? hit : (!hit && row < n)) ? 1u : 0u;
                found = static_cast<Row>(-1);
            }
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
            const gh_i64 found = first[i][me];
            const bool big = matches >= GH_JOIN_WARP_GROUP;  // a group the warp writes
            if (matches == 1) {
                put(found);
            } else if (matches > 1 && !big) {  // a small group's rows, by its lane
                for (gh_u32 j = 0; j < matches; ++j) put(static_cast<gh_i64>(ordered[~found + 1 + j]));
            } else if (matches == 0 && keep && row < n) {
                put(-1);
            }
            gh_warp_group_rows(big, ~found, matches, at, static_cast<gh_i64>(row), ordered,
                               [&](gh_i64 from, gh_i64 probe_row, gh_u32 j, gh_i64 build_row) {
                                   if (static_cast<gh_u64>(from + j) < capacity) {
                                       out_probe[from + j] = probe_row;
                                       out_build[from + j] = build_row;
                                   }
                               });
        }
        __syncthreads();  // warp_base and block_base are rewritten by the next tile
    }
}
