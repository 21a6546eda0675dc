// Fixed benchmark kernels, not part of the library's tables:
//  * gh_gather: the random-gather ceiling (read an index, fetch one 8-byte word at that index,
//    write it), the same shape of memory traffic as a hash find.
//  * gh_gather_rows: the row-gather ceiling (a thread per 16-byte word of the output: read the
//    row's index, fetch the word), for value rows wherever they live (GPU or pinned host).
//  * seed_*: three plain layouts of a GPU hash table (u32 -> u32, linear probing, at most 64
//    probes, capacity a power of two), the project's first reference: V1 SoA + simple hash +
//    atomic loads, V2 SoA + fmix32 + plain loads, V3 AoS (key and value in one 64-bit word) +
//    fmix32. Their silent drop after 64 probes is kept but counted, so the benchmark can
//    report it.
#include "common.cuh"

extern "C" __global__ void gh_gather(const gh_u64* table, const gh_u32* index, gh_u64* out,
                                     gh_u64 n) {
    const gh_u64 i = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __ldg(table + __ldg(index + i));
}

extern "C" __global__ void gh_gather_rows(const uint4* table, const gh_i64* index, uint4* out,
                                          gh_u64 rows, gh_u64 words_per_row) {
    const gh_u64 i = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < rows * words_per_row) {
        const gh_u64 row = i / words_per_row;
        out[i] = table[__ldg(index + row) * words_per_row + i % words_per_row];
    }
}

#define SEED_EMPTY 0xffffffffu
#define SEED_PROBES 64

__device__ __forceinline__ gh_u32 seed_simple_hash(gh_u32 k) {
    k ^= k >> 16;
    k *= 0x45d9f3bu;
    k ^= k >> 16;
    return k;
}

__device__ __forceinline__ gh_u32 seed_fmix32(gh_u32 h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

__device__ __forceinline__ gh_u32 seed_atomic_load(const gh_u32* p) {
    gh_u32 v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// V1 and V2: keys[] and values[] in separate arrays.
template <bool V2>
__device__ void seed_soa_insert(gh_u32* keys, gh_u32* values, gh_u64 mask, gh_u32 k, gh_u32 v,
                                unsigned long long* dropped) {
    gh_u64 h = (V2 ? seed_fmix32(k) : seed_simple_hash(k)) & mask;
    for (int p = 0; p < SEED_PROBES; ++p) {
        const gh_u32 prev = atomicCAS(keys + h, SEED_EMPTY, k);
        if (prev == SEED_EMPTY || prev == k) {
            values[h] = v;
            return;
        }
        h = (h + 1) & mask;
    }
    atomicAdd(dropped, 1ull);
}

template <bool V2>
__device__ gh_u32 seed_soa_find(const gh_u32* keys, const gh_u32* values, gh_u64 mask, gh_u32 k) {
    gh_u64 h = (V2 ? seed_fmix32(k) : seed_simple_hash(k)) & mask;
    for (int p = 0; p < SEED_PROBES; ++p) {
        const gh_u32 stored = V2 ? keys[h] : seed_atomic_load(keys + h);
        if (stored == k) return values[h];
        if (stored == SEED_EMPTY) return SEED_EMPTY;
        h = (h + 1) & mask;
    }
    return SEED_EMPTY;
}

// V3: key in the low half, value in the high half of one word, claimed by one 64-bit CAS.
__device__ void seed_aos_insert(gh_u64* slots, gh_u64 mask, gh_u32 k, gh_u32 v,
                                unsigned long long* dropped) {
    gh_u64 h = seed_fmix32(k) & mask;
    const gh_u64 word = static_cast<gh_u64>(k) | (static_cast<gh_u64>(v) << 32);
    for (int p = 0; p < SEED_PROBES; ++p) {
        gh_u64 seen = slots[h];
        while (static_cast<gh_u32>(seen) == SEED_EMPTY) {
            const gh_u64 prev = atomicCAS(slots + h, seen, word);
            if (prev == seen) return;
            seen = prev;
        }
        if (static_cast<gh_u32>(seen) == k) {
            slots[h] = word;
            return;
        }
        h = (h + 1) & mask;
    }
    atomicAdd(dropped, 1ull);
}

__device__ gh_u32 seed_aos_find(const gh_u64* slots, gh_u64 mask, gh_u32 k) {
    gh_u64 h = seed_fmix32(k) & mask;
    for (int p = 0; p < SEED_PROBES; ++p) {
        const gh_u64 word = slots[h];
        if (static_cast<gh_u32>(word) == k) return static_cast<gh_u32>(word >> 32);
        if (static_cast<gh_u32>(word) == SEED_EMPTY) return SEED_EMPTY;
        h = (h + 1) & mask;
    }
    return SEED_EMPTY;
}

// One entry point per version and operation; `values` is unused by V3.
#define SEED_KERNELS(NAME, INSERT, FIND)                                                       \
    extern "C" __global__ void NAME##_insert(gh_u64* table, gh_u32* values, gh_u64 mask,      \
                                             const gh_u32* in_keys, const gh_u32* in_values,  \
                                             gh_u64 n, unsigned long long* dropped) {         \
        const gh_u64 i = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;         \
        if (i < n) INSERT;                                                                    \
    }                                                                                         \
    extern "C" __global__ void NAME##_find(const gh_u64* table, const gh_u32* values,         \
                                           gh_u64 mask, const gh_u32* in_keys,                \
                                           gh_u32* out, gh_u64 n) {                           \
        const gh_u64 i = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;         \
        if (i < n) out[i] = FIND;                                                             \
    }

SEED_KERNELS(seed_v1,
             seed_soa_insert<false>(reinterpret_cast<gh_u32*>(table), values, mask, in_keys[i],
                                    in_values[i], dropped),
             seed_soa_find<false>(reinterpret_cast<const gh_u32*>(table), values, mask,
                                  in_keys[i]))
SEED_KERNELS(seed_v2,
             seed_soa_insert<true>(reinterpret_cast<gh_u32*>(table), values, mask, in_keys[i],
                                   in_values[i], dropped),
             seed_soa_find<true>(reinterpret_cast<const gh_u32*>(table), values, mask,
                                 in_keys[i]))
SEED_KERNELS(seed_v3, seed_aos_insert(table, mask, in_keys[i], in_values[i], dropped),
             seed_aos_find(table, mask, in_keys[i]))

// The ceiling of insert-or-apply: one atomicAdd per row to a random word of a buffer as large
// as the table (index read, one atomic), the same traffic shape as applying to a found slot.
extern "C" __global__ void gh_atomic_add(int* buffer, const gh_u32* index, gh_u64 n) {
    const gh_u64 i = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(buffer + __ldg(index + i), 1);
}

// A launch that does nothing: the cost of a bare cuda.core launch, which a small call's host
// time is measured against.
extern "C" __global__ void gh_noop() {}
