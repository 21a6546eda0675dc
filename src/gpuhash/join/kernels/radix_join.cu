// The radix-partitioned join (the planner's "gpu-radix": join/strategies/radix.py). Both sides are
// split by the high bits of each key code's partition hash into partitions small enough that a
// partition's build rows fit a table in shared memory; one block then builds that table and
// probes it with the partition's probe rows, writing its matches with one global atomic a
// round. A partition pass is a histogram launch and a scatter launch over tiles of rows; two
// passes (8 bits of the partition number each at most) place every row, so a scatter writes
// each tile's rows to at most 256 runs, which the L2 merges into whole lines.
//
// Rows are 4-byte numbers of the caller's side (sides of fewer than 2**31 rows), so a row of -1
// marks an empty shared-memory slot and a code may take any value: the join's key codes
// (join_code.cuh: gh_join_code), 4 or 8 bytes, where a 32-bit key column is its own code over
// the whole 32-bit range. The layout constants are join/radix_format.py's; the CPU engine's
// twin is join/cpu/radix.py.
#include "block_sum.cuh"
#include "join_code.cuh"

// GH_RADIX_THREADS (every radix launch) and GH_RADIX_PROBE_CHUNK (probe rows a join block
// takes at most) come from gh_constants.cuh
// probe rows a join thread takes a round: four ran joins of distinct keys no faster than one,
// and joins of repeated build keys slower
constexpr int GH_RADIX_ITEMS = 1;

template <int CODE_BYTES>
struct GhRadix {
    typedef typename GhIf<CODE_BYTES == 4, gh_u32, gh_u64>::type Code;
    // rows a partition block stages, its codes and rows in dynamic shared memory (48 KB and
    // 64 KB, within what every GPU since sm_75 lets a block take): a tile's run of a bin
    // averages TILE / 256 rows a pass, a 128-byte line of codes (half a line, 4096 rows of
    // 4-byte codes, ran the scatters slower)
    static constexpr int TILE = CODE_BYTES == 4 ? GH_RADIX_TILE_4 : GH_RADIX_TILE_8;
    static constexpr int STAGED_BYTES = TILE * (CODE_BYTES + 4);
    // a partition's table: 32 KB (36 KB for 8-byte codes), so several blocks share an SM
    static constexpr int SLOTS = CODE_BYTES == 4 ? GH_RADIX_SLOTS_4 : GH_RADIX_SLOTS_8;
    // a partition with more build rows (skew, or many rows of one key) is left to the global
    // table (join/strategies/radix.py), so a table never passes 3/4 full and every walk ends
    static constexpr int LIMIT = SLOTS / 4 * 3;
};
constexpr int GH_RADIX_EMPTY = -1;  // the row of an empty slot

// The partition number of a code: the top `bits` bits of its partition hash (common.cuh);
// the shared-memory slot comes from the hash's low 32 bits, so the two never correlate.
__device__ __forceinline__ gh_u64 gh_radix_hash(gh_u64 code) { return gh_partition_hash(code, 0); }

// A block's tile: rows [first, first + rows) of the pass's input. The first pass tiles the
// side evenly (tiles == nullptr); the second takes (first, rows) pairs the host laid out so
// that no tile spans two of the first pass's runs.
template <int CODE_BYTES>
__device__ __forceinline__ void gh_radix_tile(const gh_i64* tiles, gh_u64 n, gh_i64* first,
                                              gh_i64* rows) {
    if (tiles == nullptr) {
        *first = static_cast<gh_i64>(blockIdx.x) * GhRadix<CODE_BYTES>::TILE;
        const gh_i64 left = static_cast<gh_i64>(n) - *first;
        *rows = left < GhRadix<CODE_BYTES>::TILE ? left : GhRadix<CODE_BYTES>::TILE;
    } else {
        *first = tiles[2 * blockIdx.x];
        *rows = tiles[2 * blockIdx.x + 1];
    }
}

// A row's bin in this pass: bits [shift, shift + bin_bits) of its partition number.
__device__ __forceinline__ gh_u32 gh_radix_bin(gh_u64 code, gh_u64 bits, gh_u64 shift,
                                               gh_u64 bin_bits) {
    const gh_u64 part = gh_radix_hash(code) >> (64 - bits);
    return static_cast<gh_u32>((part >> shift) & ((1ull << bin_bits) - 1));
}

// Counts a tile's usable rows a bin: counts[bin * blocks + block] (bin-major, so the host's
// scan of the counts in that order places every tile's run of every bin; tile-major counts,
// read in one run a block, made the host's scans slower than they made these launches
// faster).
template <int IN_BYTES, int CODE_BYTES>
__global__ void __launch_bounds__(GH_RADIX_THREADS)
gh_radix_hist(const char* keys, const gh_u8* valid, gh_u64 shape, gh_i64 low, gh_i64 high,
              const gh_i64* tiles, gh_u64 n, gh_u64 bits, gh_u64 shift, gh_u64 bin_bits,
              int* counts, gh_u64 blocks) {
    __shared__ int bin_rows[256];
    const int bins = 1 << bin_bits;
    for (int i = threadIdx.x; i < bins; i += blockDim.x) bin_rows[i] = 0;
    __syncthreads();
    gh_i64 first, rows;
    gh_radix_tile<CODE_BYTES>(tiles, n, &first, &rows);
    for (gh_i64 i = threadIdx.x; i < rows; i += blockDim.x) {
        gh_u64 code;
        if (gh_join_code<IN_BYTES>(keys, valid, first + i, shape, low, high, &code)) {
            // binned as the scatter stages it (CODE_BYTES wide), so the two always agree
            const gh_u64 staged = static_cast<typename GhRadix<CODE_BYTES>::Code>(code);
            atomicAdd(&bin_rows[gh_radix_bin(staged, bits, shift, bin_bits)], 1);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < bins; i += blockDim.x) counts[i * blocks + blockIdx.x] = bin_rows[i];
}

// Writes a tile's usable rows (code, row number) to their bins' runs: staged in shared memory
// in bin order first, then written so that consecutive threads write consecutive places of a
// run (a scatter writing each row straight to its bin, 32 bins a warp store, ran far
// slower). `offsets[bin * blocks + block]`: where the tile's run of the bin starts;
// `counts`: the histogram's. `rows_in`: the row numbers of the input (null: the input is the
// side itself, row i being row i).
template <int IN_BYTES, int CODE_BYTES>
__global__ void __launch_bounds__(GH_RADIX_THREADS)
gh_radix_scatter(const char* keys, const gh_u8* valid, gh_u64 shape, gh_i64 low, gh_i64 high,
                 const int* rows_in, const gh_i64* tiles, gh_u64 n, gh_u64 bits, gh_u64 shift,
                 gh_u64 bin_bits, const int* counts, const gh_i64* offsets, gh_u64 blocks,
                 typename GhRadix<CODE_BYTES>::Code* codes_out, int* rows_out) {
    typedef GhRadix<CODE_BYTES> R;
    extern __shared__ __align__(16) unsigned char gh_radix_staged[];  // R::STAGED_BYTES
    typename R::Code* staged_code = reinterpret_cast<typename R::Code*>(gh_radix_staged);
    int* staged_row = reinterpret_cast<int*>(staged_code + R::TILE);
    __shared__ int start[256];   // the tile's rows before each bin, in staged order
    __shared__ int cursor[256];
    __shared__ gh_i64 out_at[256];
    const int bins = 1 << bin_bits;
    const int bin = threadIdx.x;  // one bin a thread: bins <= 256 == GH_RADIX_THREADS
    const gh_u64 mine = bin < bins ? counts[bin * blocks + blockIdx.x] : 0;
    gh_u64 staged;
    const gh_u64 before = gh_block_exclusive_sum(mine, &staged);
    if (bin < bins) {
        start[bin] = cursor[bin] = static_cast<int>(before);
        out_at[bin] = offsets[bin * blocks + blockIdx.x];
    }
    __syncthreads();
    gh_i64 first, rows;
    gh_radix_tile<CODE_BYTES>(tiles, n, &first, &rows);
    for (gh_i64 i = threadIdx.x; i < rows; i += blockDim.x) {
        gh_u64 code;
        if (!gh_join_code<IN_BYTES>(keys, valid, first + i, shape, low, high, &code)) continue;
        const typename R::Code staged_as = static_cast<typename R::Code>(code);
        const int at = atomicAdd(&cursor[gh_radix_bin(staged_as, bits, shift, bin_bits)], 1);
        staged_code[at] = staged_as;
        staged_row[at] = rows_in == nullptr ? static_cast<int>(first + i) : rows_in[first + i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < static_cast<int>(staged); i += blockDim.x) {
        // the bin again from the code (a staged bin would take 2 bytes a row of the tile)
        const gh_u32 b = gh_radix_bin(staged_code[i], bits, shift, bin_bits);
        const gh_i64 at = out_at[b] + (i - start[b]);
        codes_out[at] = staged_code[i];
        rows_out[at] = staged_row[i];
    }
}

// A code's home slot in a partition's table: the hash's low 32 bits onto the slots.
template <int CODE_BYTES>
__device__ __forceinline__ gh_u32 gh_radix_home(gh_u64 code) {
    return static_cast<gh_u32>(gh_range(gh_radix_hash(code) & 0xffffffffull, GhRadix<CODE_BYTES>::SLOTS));
}

__device__ __forceinline__ gh_u32 gh_radix_next(gh_u32 slot, gh_u32 slots) {
    return slot + 1 == slots ? 0 : slot + 1;
}

// A partition's table in shared memory, filled by its block's threads, then read after a
// barrier. `walk` goes from a code's home slot to the first empty slot, calling `match(row)`
// at each slot holding the code (a partition may hold a code many times). 4-byte codes: a
// slot is one 8-byte word, the row in its high half and the code in its low, so a walk reads
// one word a step (separate arrays of rows and codes take two reads a step, and a key of
// many rows makes long walks); an empty slot is all ones (no row is -1).
template <int CODE_BYTES> struct GhRadixTable;

template <> struct GhRadixTable<4> {
    static constexpr gh_u32 SLOTS = GhRadix<4>::SLOTS;
    static constexpr gh_u64 EMPTY = ~0ull;
    gh_u64 words[SLOTS];
    __device__ __forceinline__ void clear() {
        for (gh_u32 i = threadIdx.x; i < SLOTS; i += blockDim.x) words[i] = EMPTY;
    }
    __device__ __forceinline__ void insert(gh_u32 code, int row) {
        const gh_u64 word = (static_cast<gh_u64>(static_cast<gh_u32>(row)) << 32) | code;
        gh_u32 slot = gh_radix_home<4>(code);
        while (atomicCAS(&words[slot], EMPTY, word) != EMPTY) slot = gh_radix_next(slot, SLOTS);
    }
    template <class Match>
    __device__ __forceinline__ void walk(gh_u32 code, Match match) const {
        for (gh_u32 slot = gh_radix_home<4>(code);; slot = gh_radix_next(slot, SLOTS)) {
            const gh_u64 word = words[slot];
            if (word == EMPTY) return;
            if (static_cast<gh_u32>(word) == code) match(static_cast<int>(word >> 32));
        }
    }
};

// 8-byte codes: codes and rows side by side (16 bytes a slot would halve the slots), an
// empty slot's row -1; a slot is claimed by its row, its code written before the barrier.
template <> struct GhRadixTable<8> {
    static constexpr gh_u32 SLOTS = GhRadix<8>::SLOTS;
    gh_u64 codes[SLOTS];
    int rows[SLOTS];
    __device__ __forceinline__ void clear() {
        for (gh_u32 i = threadIdx.x; i < SLOTS; i += blockDim.x) rows[i] = GH_RADIX_EMPTY;
    }
    __device__ __forceinline__ void insert(gh_u64 code, int row) {
        gh_u32 slot = gh_radix_home<8>(code);
        while (atomicCAS(&rows[slot], GH_RADIX_EMPTY, row) != GH_RADIX_EMPTY) {
            slot = gh_radix_next(slot, SLOTS);
        }
        codes[slot] = code;
    }
    template <class Match>
    __device__ __forceinline__ void walk(gh_u64 code, Match match) const {
        for (gh_u32 slot = gh_radix_home<8>(code);; slot = gh_radix_next(slot, SLOTS)) {
            const int row = rows[slot];
            if (row == GH_RADIX_EMPTY) return;
            if (codes[slot] == code) match(row);
        }
    }
};

// Flags of a join launch (join/cuda/radix.py: JOIN_FLAGS, _common/constants.py: RADIX_FLAGS).
// flags (gh_constants.cuh): GH_RADIX_MARK_BUILD, build_hit[row] = 1 at every matched build
// row; GH_RADIX_HITS_ONLY, probe_hit[row] = matched, no pairs written

// One block a work item: a partition's table, built from its build rows in shared memory, and
// up to GH_RADIX_PROBE_CHUNK of its probe rows (a partition with more probe rows has several
// items, each building the table again: skew in the probe side spreads over blocks).
// `item_first[p]`: the first item of partition p, `item_first[partitions]` the items in all.
// Pairs (probe row, build row) go to out_probe / out_build at places up to `capacity`; every
// pair is counted in counters[0] whether it fits or not, so the host can run again with room
// for all. A partition past LIMIT build rows writes its number to `overflow` (counters[1]
// of them) and joins nothing.
template <int CODE_BYTES>
__global__ void __launch_bounds__(GH_RADIX_THREADS)
gh_radix_join(const typename GhRadix<CODE_BYTES>::Code* build_codes, const int* build_rows,
              const gh_i64* build_bounds, const typename GhRadix<CODE_BYTES>::Code* probe_codes,
              const int* probe_rows, const gh_i64* probe_bounds, const gh_i64* item_first,
              gh_u64 partitions, gh_u64 flags, gh_i64* out_probe, gh_i64* out_build,
              gh_u64 capacity, unsigned long long* counters, gh_u8* build_hit, bool* probe_hit,
              gh_i64* overflow) {
    typedef GhRadix<CODE_BYTES> R;
    typedef typename R::Code Code;
    __shared__ GhRadixTable<CODE_BYTES> table;
    __shared__ unsigned long long round_base;
    const gh_i64 item = blockIdx.x;
    if (item >= item_first[partitions]) return;  // the launch covers the most items there may be
    gh_u64 lo = 0, hi = partitions - 1;  // the partition p whose items hold this one
    while (lo < hi) {
        const gh_u64 mid = (lo + hi + 1) / 2;
        if (item_first[mid] <= item) lo = mid; else hi = mid - 1;
    }
    const gh_u64 p = lo;
    const gh_i64 b0 = build_bounds[p], b1 = build_bounds[p + 1];
    if (b1 - b0 > R::LIMIT) {
        if (threadIdx.x == 0 && item == item_first[p]) overflow[atomicAdd(counters + 1, 1ull)] = p;
        return;
    }
    if (b0 == b1) return;  // nothing to match: probe_hit stays false, no pairs
    const gh_i64 p0 = probe_bounds[p] + (item - item_first[p]) * GH_RADIX_PROBE_CHUNK;
    const gh_i64 p_end = probe_bounds[p + 1];
    const gh_i64 p1 = p0 + static_cast<gh_i64>(GH_RADIX_PROBE_CHUNK) < p_end
                          ? p0 + static_cast<gh_i64>(GH_RADIX_PROBE_CHUNK) : p_end;
    if (p0 >= p1) return;  // an item of no probe rows (a partition with none has one)
    table.clear();
    __syncthreads();
    for (gh_i64 i = b0 + threadIdx.x; i < b1; i += blockDim.x) table.insert(build_codes[i], build_rows[i]);
    __syncthreads();
    const bool hits_only = flags & GH_RADIX_HITS_ONLY, mark = flags & GH_RADIX_MARK_BUILD;
    // a round: GH_RADIX_ITEMS probe rows a thread (row k of a thread at k * blockDim.x, so
    // each load is coalesced) and one scan for all of them
    constexpr gh_i64 ROUND = static_cast<gh_i64>(GH_RADIX_ITEMS) * GH_RADIX_THREADS;
    for (gh_i64 round = p0; round < p1; round += ROUND) {  // the same rounds every thread
        Code code[GH_RADIX_ITEMS];
        gh_u32 found[GH_RADIX_ITEMS];
        gh_u32 mine = 0;
#pragma unroll
        for (int k = 0; k < GH_RADIX_ITEMS; ++k) {
            const gh_i64 i = round + k * GH_RADIX_THREADS + threadIdx.x;
            code[k] = i < p1 ? probe_codes[i] : 0;
        }
#pragma unroll
        for (int k = 0; k < GH_RADIX_ITEMS; ++k) {
            const gh_i64 i = round + k * GH_RADIX_THREADS + threadIdx.x;
            found[k] = 0;
            if (i < p1) table.walk(code[k], [&](int) { ++found[k]; });
            if (hits_only && i < p1) probe_hit[probe_rows[i]] = found[k] > 0;
            mine += found[k];
        }
        if (hits_only) continue;
        gh_u64 total;
        const gh_u64 before = gh_block_exclusive_sum(mine, &total);
        if (threadIdx.x == 0) round_base = total ? atomicAdd(counters, static_cast<unsigned long long>(total)) : 0;
        __syncthreads();
        gh_u64 at = round_base + before;
#pragma unroll
        for (int k = 0; k < GH_RADIX_ITEMS; ++k) {
            if (!found[k]) continue;
            const gh_i64 probe_row = probe_rows[round + k * GH_RADIX_THREADS + threadIdx.x];
            table.walk(code[k], [&](int build_row) {
                if (at < capacity) {
                    out_probe[at] = probe_row;
                    out_build[at] = build_row;
                }
                if (mark) build_hit[build_row] = 1;
                ++at;
            });
        }
        __syncthreads();  // round_base is written again next round
    }
}
