// What every table kernel receives: the table as six 8-byte parameters (pointers and 64-bit
// counts, so the host passes plain Python ints), first and in this order, and the batch's keys
// as raw bits. Kernels loop over rows, so any grid works.
#pragma once
#include "open_addressing.cuh"

#define GH_TABLE_PARAMS gh_u64 *slots, char *values, gh_u32 *overflow, gh_i64 *counts, \
                        gh_u64 num_buckets, gh_u64 seed
#define GH_REF(T) T{slots, values, overflow, counts, num_buckets, seed}

template <class T>
__device__ __forceinline__ gh_u64 gh_key_at(const char* keys, gh_u64 row) {
    if (T::KEY_BYTES == 4) return reinterpret_cast<const gh_u32*>(keys)[row];
    return reinterpret_cast<const gh_u64*>(keys)[row];
}

// Whether slot i of a source table (num_slots bucket slots + 2 out of band) holds a live key.
template <class T>
__device__ __forceinline__ bool gh_live_source(const gh_u64* source_slots, gh_u64 num_slots,
                                               gh_u64 i, gh_u64* key) {
    *key = source_slots[i * T::WORDS] & T::KEY_MASK;
    if (i < num_slots) return *key < T::TOMB;
    return *key == (i == num_slots ? T::EMPTY : T::TOMB);
}

template <class T>
__device__ __forceinline__ const char* gh_source_value(const gh_u64* source_slots,
                                                       const char* source_values, gh_u64 i) {
    if (T::LAYOUT == GH_ROWS) return source_values + i * T::VALUE_BYTES;
    return reinterpret_cast<const char*>(source_slots + i * T::WORDS) + T::VALUE_OFFSET;
}
