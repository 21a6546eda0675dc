// String keys made group codes on the GPU (groupby/string_keys.py): a 64-bit hash of each
// string's bytes, which the core's table then numbers, and a check that every string equals
// the first string of its number, so a collision of two strings' hashes is found, never
// merged into one group. The CPU engine's twins (groupby/cpu/loops.py: string_hashes,
// string_mismatches) compute the same hashes from the same bytes.
//
// A string is the bytes [offsets[i], offsets[i + 1]) of ``data`` (int64 offsets, Arrow's
// layout). Its hash: h = size * GOLDEN + GOLDEN, then for each eight bytes, read as a
// little-endian word (the last one padded with zeros), h = mix64(h ^ word). The size in the
// seed keeps "a" and "a\0" apart. Strings of db-benchmark's kind are 3-12 bytes: a byte at a
// time from global memory costs little beside the rows' other reads, and neighbouring threads
// share the cache lines.
#include "common.cuh"

__device__ __forceinline__ gh_u64 gh_string_hash(const gh_u8* bytes, gh_i64 size) {
    gh_u64 h = (gh_u64)size * GH_GOLDEN + GH_GOLDEN;
    for (gh_i64 k = 0; k < size; k += 8) {
        gh_u64 word = 0;
        const gh_i64 stop = size - k < 8 ? size - k : 8;
        for (gh_i64 j = 0; j < stop; ++j) word |= (gh_u64)bytes[k + j] << (8 * j);
        h = gh_mix64(h ^ word);
    }
    return h;
}

__global__ void gh_string_hashes(const gh_i64* offsets, const gh_u8* data, gh_i64 n,
                                 gh_u64* out) {
    const gh_i64 stride = (gh_i64)gridDim.x * blockDim.x;
    for (gh_i64 i = (gh_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const gh_i64 begin = offsets[i];
        out[i] = gh_string_hash(data + begin, offsets[i + 1] - begin);
    }
}

// Counts the rows whose string differs from their code's first row's (codes below zero: a
// null row, skipped). Any count above zero means two strings shared a hash.
__global__ void gh_string_mismatches(const gh_i64* offsets, const gh_u8* data,
                                     const gh_i64* codes, const gh_i64* first, gh_i64 n,
                                     gh_u64* mismatches) {
    const gh_i64 stride = (gh_i64)gridDim.x * blockDim.x;
    gh_u64 found = 0;
    for (gh_i64 i = (gh_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const gh_i64 code = codes[i];
        if (code < 0) continue;
        const gh_i64 row = first[code];
        if (row == i) continue;
        const gh_i64 begin = offsets[i], size = offsets[i + 1] - begin;
        const gh_i64 other = offsets[row];
        if (offsets[row + 1] - other != size) {
            ++found;
            continue;
        }
        for (gh_i64 k = 0; k < size; ++k) {
            if (data[begin + k] != data[other + k]) {
                ++found;
                break;
            }
        }
    }
    if (found) atomicAdd(mismatches, found);
}
