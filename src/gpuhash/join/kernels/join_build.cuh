// The join kernels' shared rules (a row's key code, a table value's meaning) and the build:
// one cooperative launch (join/cuda/engine.py: build) that fills the new table's memory, tries
// the direct array, builds the hash table where the array failed and groups the rows of
// repeated codes, its phases separated by grid barriers. A small join's time is mostly the
// host's, and every launch costs host time: one launch stands for four, of which at most one
// has work for dense distinct keys.
#pragma once
#include "fill.cuh"
#include "block_sum.cuh"
#include "join_code.cuh"

// A join table's value, sign-extended: a build row number, or ~start of a group of rows
// (gh_join_group_rows). Row numbers of tables with 4-byte values stay below 2**30, so neither a
// row nor a group start reads with the wrong sign (join/build.py: build_spec).
template <class T>
__device__ __forceinline__ gh_i64 gh_join_value(gh_u64 bits) {
    if (T::VALUE_BYTES == 4) return static_cast<int>(static_cast<gh_u32>(bits));
    return static_cast<gh_i64>(bits);
}

template <class T>
__device__ __forceinline__ gh_i64 gh_join_row(const T& t, gh_u64 slot) {
    if (T::VALUE_BYTES == 4) return *reinterpret_cast<const int*>(t.value(slot));
    return *reinterpret_cast<const gh_i64*>(t.value(slot));
}

// The element types of a join table's group array `ordered` (its values' width, signed) and of
// its counters a slot (gh_join_claim_rows), which count rows and then index `ordered`.
template <class T>
using GhJoinRow = typename GhIf<T::VALUE_BYTES == 4, int, gh_i64>::type;
template <class T>
using GhJoinCount = typename GhIf<T::VALUE_BYTES == 4, gh_u32, unsigned long long>::type;

// A slot's value while a row opens its group (gh_join_group_rows): below every ~start, since
// a group's start stays below 1.5 times the rows.
template <class T>
__device__ __forceinline__ constexpr gh_i64 gh_join_opening() {
    return T::VALUE_BYTES == 4 ? -(1ll << 31) : static_cast<gh_i64>(1ull << 63);
}

// A barrier across every block of a cooperative launch (all of them resident at once). The
// first thread of each block adds to *word: block 0 adds 2**31 - (blocks - 1), the others 1, so
// once all have added, bit 31 differs from what each one saw. The low 31 bits must start at
// zero (else the ones can carry into bit 31 before block 0 adds, and the blocks fall out of
// step and wait forever); they are back at zero after every barrier, so a word serves any
// number of barriers and launches, one launch at a time (join/cuda/engine.py: a word per
// stream, _barrier_word). Release on the add and acquire on the polls order each block's writes
// before the others' reads.
__device__ __forceinline__ void gh_grid_barrier(unsigned int* word) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned int before, now;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;"
                     : "=r"(before) : "l"(word), "r"(add) : "memory");
        do {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(word) : "memory");
        } while (((before ^ now) & 0x80000000u) == 0);
    }
    __syncthreads();
}

// A build side of dense keys needs no hash table: its codes are distinct modulo a power of two
// at least its row count (integer ids over a range about their count are), so each code owns
// the entry at code & mask of an array of 64-bit words, ((build row + 1) << 32) | code, 0 when
// empty. The array is tried first, without the keys' range (learning it would cost the host a
// sync): an entry claimed twice (a repeated key, or two codes equal modulo the size) or a
// non-null row without a 32-bit code sets the word past the array (`failed`), and then the hash
// table is built and probed as if there were no array. So the array is used only when it holds
// every non-null build row. One word read or written by every warp costs as much as the claims
// themselves (which collide only for sparse keys), so nothing reads `failed` here, and a block
// writes it once, when a claim of its fails; it then stops, since the array is given up (sparse
// keys collide in a block's first round).
// The rounds of an array's try, shared by the direct and the ranked array: each thread of a
// block takes a row a round, `claim(row, code)` stores a non-null row whose code has 32 bits
// and returns false where it could not, and the block stops at the first round one of its
// rows was lost, after setting *failed.
template <class T, int IN_BYTES, class Claim>
__device__ __forceinline__ void gh_join_array_rows(const char* keys, const gh_u8* valid,
                                                   gh_u64 n, gh_u64 shape, gh_i64 low,
                                                   gh_i64 high, gh_u64* failed, Claim&& claim) {
    for (gh_u64 first = static_cast<gh_u64>(blockIdx.x) * blockDim.x; first < n;
         first += gh_stride()) {  // the same rounds for every thread of a block
        const gh_u64 row = first + threadIdx.x;
        bool lost = false;
        gh_u64 code;
        if (row >= n || (valid != nullptr && !valid[row])) {
            // past the end, or null: nulls match nothing and are not stored
        } else if (!gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code) ||
                   code > 0xffffffffull) {
            lost = true;
        } else {
            lost = !claim(row, code);
        }
        if (__syncthreads_or(lost)) {
            if (threadIdx.x == 0) *failed = 1;
            return;
        }
    }
}

template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_direct_rows(const char* keys, const gh_u8* valid,
                                                    gh_u64 n, gh_u64 shape, gh_i64 low,
                                                    gh_i64 high, gh_u64* direct, gh_u64 mask) {
    gh_join_array_rows<T, IN_BYTES>(keys, valid, n, shape, low, high, direct + mask + 1,
                                    [&](gh_u64 row, gh_u64 code) {
        if (row >= 0xffffffffull) return false;  // row + 1 must fit the entry's 32 bits
        const gh_u64 entry = ((row + 1) << 32) | code;
        return atomicCAS(reinterpret_cast<unsigned long long*>(direct + (code & mask)), 0ull,
                         static_cast<unsigned long long>(entry)) == 0ull;
    });
}

// A build side too large for the direct array's L2 budget tries a ranked array instead: a bit
// a code, 32 of them a word, the word's high half the number of bits set in the words before
// it (its rank), and beside it the build rows in code order (a 4-byte row a code held). A
// probe row reads its code's word, and where the bit is set, the row at the rank: 8 bytes a
// word for 32 codes and 4 a row, so a 10M-row build whose codes span 20M takes 8 + 40 MB,
// mostly L2-resident, against 256 MB of direct entries or the table's 160 MB of slots. The bits
// count from the build's smallest code (the base, found first), since the entry does not
// hold the code; a code past the bits, a repeated code or a row without a 32-bit code gives
// the array up, as for the direct array: then `words[words count]`, the failed word, is set
// and the hash table is built. `ranked` holds the base's complement (its first word's low
// half), then the sorted rows, then a word a chunk of GH_RANK_CHUNK words (the ranks' sums).
// GH_RANK_CHUNK (gh_constants.cuh): words a block sums and ranks at once (8 a thread)

// The smallest 32-bit code of the usable rows, kept as its complement by an atomic max of
// one word a block (the fill left the word zero: no code yet).
template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_ranked_base(const char* keys, const gh_u8* valid,
                                                    gh_u64 n, gh_u64 shape, gh_i64 low,
                                                    gh_i64 high, gh_u64* ranked) {
    __shared__ gh_u32 block_low;
    if (threadIdx.x == 0) block_low = 0;
    __syncthreads();
    gh_u32 mine = 0;  // the complement of the smallest code seen
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_u64 code;
        if (gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code) &&
            code <= 0xffffffffull) {
            mine = max(mine, ~static_cast<gh_u32>(code));
        }
    }
    mine = __reduce_max_sync(0xffffffffu, mine);
    if ((threadIdx.x & 31) == 0 && mine) atomicMax(&block_low, mine);
    __syncthreads();
    if (threadIdx.x == 0 && block_low) {
        atomicMax(reinterpret_cast<unsigned int*>(ranked), block_low);
    }
}

template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_ranked_bits(const char* keys, const gh_u8* valid,
                                                    gh_u64 n, gh_u64 shape, gh_i64 low,
                                                    gh_i64 high, gh_u64* words,
                                                    gh_u64 num_words, gh_u64 base) {
    gh_join_array_rows<T, IN_BYTES>(keys, valid, n, shape, low, high, words + num_words,
                                    [&](gh_u64 row, gh_u64 code) {
        const gh_u64 at = code - base;
        if ((at >> 5) >= num_words || row >= 0x7fffffffull) return false;  // 4-byte rows
        const gh_u32 bit = 1u << (at & 31);  // the word's low half (little-endian): its bits
        return (atomicOr(reinterpret_cast<unsigned int*>(words + (at >> 5)), bit) & bit) == 0;
    });
}

// The ranks, once every bit is set: each chunk's bit count (chunk_sums), their exclusive
// prefix sums (one block), then each word's rank written into its high half.
__device__ __forceinline__ void gh_join_ranks(gh_u64* words, gh_u64 num_words,
                                              gh_u64* chunk_sums, unsigned int* barrier) {
    constexpr int PER_THREAD = GH_RANK_CHUNK / 256;
    const gh_u64 chunks = (num_words + GH_RANK_CHUNK - 1) / GH_RANK_CHUNK;
    gh_u64 total;
    for (gh_u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        gh_u64 bits = 0;
        for (gh_u64 w = c * GH_RANK_CHUNK + threadIdx.x; w < num_words &&
             w < (c + 1) * GH_RANK_CHUNK; w += 256) {
            bits += __popc(static_cast<gh_u32>(__ldcg(words + w)));
        }
        gh_block_exclusive_sum(bits, &total);
        if (threadIdx.x == 0) chunk_sums[c] = total;
    }
    gh_grid_barrier(barrier);
    if (blockIdx.x == 0) {
        gh_u64 carry = 0;
        for (gh_u64 base = 0; base < chunks; base += 256) {
            const gh_u64 c = base + threadIdx.x;
            const gh_u64 mine = c < chunks ? __ldcg(chunk_sums + c) : 0;
            const gh_u64 before = gh_block_exclusive_sum(mine, &total);
            if (c < chunks) chunk_sums[c] = carry + before;
            carry += total;
        }
    }
    gh_grid_barrier(barrier);
    for (gh_u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        const gh_u64 first = c * GH_RANK_CHUNK + threadIdx.x * PER_THREAD;
        gh_u32 bits[PER_THREAD];
        gh_u64 mine = 0;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            bits[i] = first + i < num_words ? static_cast<gh_u32>(__ldcg(words + first + i)) : 0u;
            mine += __popc(bits[i]);
        }
        gh_u64 rank = __ldcg(chunk_sums + c) + gh_block_exclusive_sum(mine, &total);
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            if (first + i < num_words) words[first + i] = (rank << 32) | bits[i];
            rank += __popc(bits[i]);
        }
    }
}

// The base of a ranked array (the smallest code) from its first word.
__device__ __forceinline__ gh_u64 gh_join_ranked_base_of(gh_u64 first_word) {
    return ~static_cast<gh_u32>(first_word);
}

// The rank of a held code's bit (`at`: the code less the base): its row is sorted[rank].
__device__ __forceinline__ gh_u64 gh_join_rank_of(gh_u64 word, gh_u64 at) {
    return (word >> 32) + __popc(static_cast<gh_u32>(word) & ((1u << (at & 31)) - 1u));
}

// Each held row's number at its code's rank (the array held every usable row).
template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_ranked_rows(const char* keys, const gh_u8* valid,
                                                    gh_u64 n, gh_u64 shape, gh_i64 low,
                                                    gh_i64 high, const gh_u64* words,
                                                    gh_u64 base, int* sorted) {
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_u64 code;
        if (!gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code)) continue;
        const gh_u64 at = code - base;
        sorted[gh_join_rank_of(__ldcg(words + (at >> 5)), at)] = static_cast<int>(row);
    }
}

// Every usable build row's key code is stored once, by a map claim: the first row to claim it
// writes its row number. A row that finds its code there already adds one to the slot's
// counter (group_count: a word of the values' width a slot, zeroed with the table) and to
// group_words[0]; those codes' rows are then grouped (gh_join_group_rows). Stored as copies,
// a key's K rows would walk past each other, Theta(K^2 / B) bucket reads, and so would every
// probe row of it.
template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_claim_rows(const T& t, const char* keys,
                                                   const gh_u8* valid, gh_u64 n, gh_u64 shape,
                                                   gh_i64 low, gh_i64 high, gh_i64* group_words,
                                                   GhJoinCount<T>* group_count) {
    gh_i64 placed = 0, repeats = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        if (valid != nullptr && !valid[row]) continue;  // nulls match nothing: not stored
        gh_u64 code;
        const bool in_range = gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code);
        if (!in_range || code >= T::TOMB) {  // a reserved code would read as empty or erased
            gh_report_unplaced(t);
            continue;
        }
        const gh_u64 build_row = row;  // little-endian: its first VALUE_BYTES are the row
        const char* src = reinterpret_cast<const char*>(&build_row);
        const GhSlot s = gh_probe<T, GH_CLAIM, true>(t, code, gh_value_bits<T::VALUE_BYTES>(src));
        if (s.slot < 0) {
            gh_report_unplaced(t);
        } else if (s.claimed) {
            ++placed;
        } else {
            atomicAdd(group_count + s.slot, GhJoinCount<T>{1});
            ++repeats;
        }
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
    __syncthreads();  // gh_block_count's shared partials are reused
    gh_block_count(group_words, repeats, nullptr, 0);
}

// Writes every row of a code held by several build rows (group_count[slot] > 0 after the
// claims count the rows past the first) into the code's group: ordered[start] = its number of
// rows, the rows after it in no set order, and the slot's value ~start (a row number is never
// negative, so the sign tells a probe which it reads). The first row of a code to come opens
// the group: it swaps the value (still the claiming row's number) for gh_join_opening, takes
// the group's place from group_words[1], makes group_count[slot] the group's write cursor and
// then publishes ~start; the code's other rows wait for that (every block is resident).
template <class T, int IN_BYTES>
__device__ __forceinline__ void gh_join_group_rows(const T& t, const char* keys,
                                                   const gh_u8* valid, gh_u64 n, gh_u64 shape,
                                                   gh_i64 low, gh_i64 high, gh_i64* group_words,
                                                   GhJoinCount<T>* group_count,
                                                   GhJoinRow<T>* ordered) {
    static_assert(T::LAYOUT != GH_ROWS, "a join table keeps its values in the slots");
    constexpr int SHIFT = T::LAYOUT == GH_PACKED ? 32 : 0;  // the value's place in its word
    constexpr gh_u64 MASK = (T::VALUE_BYTES == 4 ? 0xffffffffull : ~0ull) << SHIFT;
    const auto with_value = [](gh_u64 word, gh_i64 value) {
        return (word & ~MASK) | ((static_cast<gh_u64>(value) << SHIFT) & MASK);
    };
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_u64 code;
        if (!gh_join_code<IN_BYTES>(keys, valid, row, shape, low, high, &code) ||
            code >= T::TOMB) {
            continue;  // null, or unplaced (reported by the claims)
        }
        // coherent loads: this launch wrote the table
        const GhSlot s = gh_probe<T, GH_SEARCH, true>(t, code, 0);
        if (s.slot < 0) continue;
        gh_u64* word = t.word(s.slot) + (T::LAYOUT == GH_PACKED ? 0 : 1);
        volatile GhJoinCount<T>* count = group_count + s.slot;
        while (true) {
            const gh_u64 seen = *reinterpret_cast<volatile gh_u64*>(word);
            const gh_i64 value = gh_join_value<T>(seen >> SHIFT);
            if (value == gh_join_opening<T>()) continue;  // another row is opening it
            if (value >= 0) {  // the claiming row's number: no group, or one not yet open
                const GhJoinCount<T> more = *count;
                if (more == 0) break;  // a code of one row
                if (atomicCAS(word, seen, with_value(seen, gh_join_opening<T>())) != seen) continue;
                const gh_u64 start = atomicAdd(
                    reinterpret_cast<unsigned long long*>(group_words + 1),
                    static_cast<unsigned long long>(more) + 2);
                ordered[start] = static_cast<GhJoinRow<T>>(more + 1);
                *count = static_cast<GhJoinCount<T>>(start + 1);
                __threadfence();  // the cursor before the group is seen open
                atomicExch(word, with_value(seen, ~static_cast<gh_i64>(start)));
            }
            __threadfence();  // the cursor after the group was seen open
            const gh_u64 at = atomicAdd(group_count + s.slot, GhJoinCount<T>{1});
            ordered[at] = static_cast<GhJoinRow<T>>(row);
            break;
        }
    }
}

// A join's build, one cooperative launch (every block resident; _common/cuda/launch.py:
// launch_cooperative sizes the grid from the kernel's occupancy): the table's memory filled
// (`words`, `fill_words` of them, none for a table filled already; with a direct array, the
// slots' part only where the array fails), then the direct array tried where there is one
// (`direct`, else null; with `ranked`, `direct` holds a ranked array's bits:
// gh_join_ranked_bits), then, where it failed or there is none, every usable row's code
// claimed, then, where codes repeat, their rows grouped. group_words: the number of rows that
// repeat a code, the group array's fill, then the counters a slot.
template <class T, int IN_BYTES>
__global__ void gh_join_build(GH_TABLE_PARAMS, long long* words, gh_u64 slot_words,
                              gh_u64 fill_words, gh_u64 tombstone_word, const char* keys,
                              const gh_u8* valid, gh_u64 n, gh_u64 shape, gh_i64 low,
                              gh_i64 high, gh_u64* direct, gh_u64 direct_mask,
                              gh_u64* ranked, gh_i64* group_words, GhJoinRow<T>* ordered,
                              unsigned int* barrier) {
    if (direct == nullptr) {
        gh_fill_words(words, 0, fill_words, slot_words, tombstone_word);
        gh_grid_barrier(barrier);
    } else {
        // Where the array holds every row, nothing reads the slots or the counters a slot
        // (the probe reads the array and the table's counters), so those are filled only if
        // it fails: 24 of a 1M-row build's 40 MB. The spare words end with the counters a
        // slot, after the group words' two (table/cuda/engine.py: empty_state;
        // join/build.py: group_words).
        const gh_u64 slot_counters =
            fill_words ? static_cast<gh_u64>(reinterpret_cast<long long*>(group_words + 2) - words)
                       : 0;
        gh_fill_words(words, slot_words, slot_counters, slot_words, tombstone_word);
        gh_grid_barrier(barrier);
        gh_u64 base = 0;
        if (ranked == nullptr) {
            gh_join_direct_rows<T, IN_BYTES>(keys, valid, n, shape, low, high, direct,
                                             direct_mask);
        } else {
            gh_join_ranked_base<T, IN_BYTES>(keys, valid, n, shape, low, high, ranked);
            gh_grid_barrier(barrier);
            base = gh_join_ranked_base_of(__ldcg(ranked));
            gh_join_ranked_bits<T, IN_BYTES>(keys, valid, n, shape, low, high, direct,
                                             direct_mask + 1, base);
        }
        gh_grid_barrier(barrier);
        if (__ldcg(direct + direct_mask + 1) == 0) {  // it holds every row
            if (ranked == nullptr) return;
            gh_join_ranks(direct, direct_mask + 1, ranked + 1 + (n + 1) / 2, barrier);
            gh_grid_barrier(barrier);
            gh_join_ranked_rows<T, IN_BYTES>(keys, valid, n, shape, low, high, direct, base,
                                             reinterpret_cast<int*>(ranked + 1));
            return;
        }
        gh_fill_words(words, 0, slot_words, slot_words, tombstone_word);
        gh_fill_words(words, slot_counters, fill_words, slot_words, tombstone_word);
        gh_grid_barrier(barrier);
    }
    const T t = GH_REF(T);
    auto* group_count = reinterpret_cast<GhJoinCount<T>*>(group_words + 2);
    gh_join_claim_rows<T, IN_BYTES>(t, keys, valid, n, shape, low, high, group_words,
                                    group_count);
    gh_grid_barrier(barrier);
    if (__ldcg(group_words) == 0) return;  // no code repeats
    gh_join_group_rows<T, IN_BYTES>(t, keys, valid, n, shape, low, high, group_words,
                                    group_count, ordered);
}
