// Shared device helpers: fixed-width types, the hash, value copies, counters, and the memory
// orderings the tables rely on. Compiled by NVRTC without the standard library, so types are
// spelled out here and atomics with an explicit order are written as the PTX they lower to
// (cuda::atomic_ref<T, thread_scope_device> with that order produces the same instructions;
// the toolkit's libcu++ headers are not available to NVRTC everywhere a user installs us).
#pragma once

typedef unsigned long long gh_u64;
typedef long long gh_i64;
typedef unsigned int gh_u32;
typedef unsigned short gh_u16;
typedef unsigned char gh_u8;

// the numbers shared with the Python engines, generated from _common/constants.py
#include "gh_constants.cuh"

// A type chosen at compile time (NVRTC has no <type_traits> without extra headers).
template <bool C, class A, class B> struct GhIf { typedef A type; };
template <class A, class B> struct GhIf<false, A, B> { typedef B type; };

// --- hash bits -----------------------------------------------------------------------------
// Every table decision derives from one 64-bit hash of (key ^ seed), MurmurHash3's finalizer
// (every key bit reaches every hash bit). Its bits have one owner each:
//   bits  0..31  first bucket (multiply-high onto the bucket count)
//   bits 32..63  second bucket (multiply-high)
//   bits  0..2   filter fingerprint (which of a bucket's 8 filter bits a key sets)
// Radix partitions and shards must not reuse those bits, or every key of a partition would
// crowd the same buckets; they take their own hash, gh_partition_hash (the same mix of the key
// with a salted seed), whose high bits pick the partition and low bits the shard. The CPU
// engines compute the same functions (_common/hashing.py for torch, _common/cpu/probe.py for
// numba).
__device__ __forceinline__ gh_u64 gh_mix64(gh_u64 x) {
    x ^= x >> GH_MIX_SHIFT;
    x *= GH_MIX_1;
    x ^= x >> GH_MIX_SHIFT;
    x *= GH_MIX_2;
    x ^= x >> GH_MIX_SHIFT;
    return x;
}

__device__ __forceinline__ gh_u64 gh_partition_hash(gh_u64 key, gh_u64 seed) {
    return gh_mix64(key ^ seed ^ GH_GOLDEN);
}

// Maps 32 hash bits onto [0, n) by a multiply-high instead of a modulo, so any bucket count
// works (no power-of-two rounding of memory) and costs one multiply.
__device__ __forceinline__ gh_u64 gh_range(gh_u64 bits32, gh_u64 n) {
    return (bits32 * n) >> 32;
}

// --- value copies ----------------------------------------------------------------------------
// The widest aligned word that divides the value width: rows are copied in such words.
template <int BYTES> struct GhCopyWord { typedef gh_u8 type; };
template <> struct GhCopyWord<2> { typedef gh_u16 type; };
template <> struct GhCopyWord<4> { typedef gh_u32 type; };
template <> struct GhCopyWord<8> { typedef gh_u64 type; };
template <> struct GhCopyWord<16> { typedef ulonglong2 type; };

template <int VALUE_BYTES>
__device__ __forceinline__ void gh_copy_value(char* dst, const char* src) {
    constexpr int W = (VALUE_BYTES % 16 == 0) ? 16 : (VALUE_BYTES % 8 == 0) ? 8
                    : (VALUE_BYTES % 4 == 0) ? 4 : (VALUE_BYTES % 2 == 0) ? 2 : 1;
    typedef typename GhCopyWord<W>::type word;
#pragma unroll
    for (int i = 0; i < VALUE_BYTES / W; ++i) {
        reinterpret_cast<word*>(dst)[i] = reinterpret_cast<const word*>(src)[i];
    }
}

// A value of BYTES held in registers: read with one round of loads, written back later.
template <int BYTES>
struct GhHeldValue {
    static constexpr int W = (BYTES % 16 == 0) ? 16 : (BYTES % 8 == 0) ? 8
                           : (BYTES % 4 == 0) ? 4 : (BYTES % 2 == 0) ? 2 : 1;
    typedef typename GhCopyWord<W>::type word;
    word w[BYTES / W];
    __device__ __forceinline__ void load(const char* src) {
#pragma unroll
        for (int i = 0; i < BYTES / W; ++i) w[i] = reinterpret_cast<const word*>(src)[i];
    }
    __device__ __forceinline__ void store(char* dst) const {
#pragma unroll
        for (int i = 0; i < BYTES / W; ++i) reinterpret_cast<word*>(dst)[i] = w[i];
    }
};

// Reads up to 8 value bytes into the low bytes of a zeroed word (little-endian, as the slot
// holds them): the bytes above the value are zero, in both engines.
template <int VALUE_BYTES>
__device__ __forceinline__ gh_u64 gh_value_bits(const char* src) {
    gh_u64 bits = 0;
    if (VALUE_BYTES > 0) gh_copy_value<(VALUE_BYTES > 8 ? 8 : VALUE_BYTES)>(
        reinterpret_cast<char*>(&bits), src);
    return bits;
}

// Writes the low VALUE_BYTES bytes of a word (the inverse of gh_value_bits).
template <int VALUE_BYTES>
__device__ __forceinline__ void gh_store_value_bits(char* dst, gh_u64 bits) {
    if (VALUE_BYTES > 0) gh_copy_value<(VALUE_BYTES > 8 ? 8 : VALUE_BYTES)>(
        dst, reinterpret_cast<const char*>(&bits));
}

// --- ordered atomics -------------------------------------------------------------------------
// A lock word taken with acquire order and released with release order: every write made
// under the lock is visible to the next holder (device scope).
__device__ __forceinline__ void gh_lock(gh_u32* lock) {
    gh_u32 prev;
    while (true) {
        asm volatile("atom.acquire.gpu.global.cas.b32 %0, [%1], 0, 1;"
                     : "=r"(prev) : "l"(lock) : "memory");
        if (prev == 0) return;
        __nanosleep(32);
    }
}

__device__ __forceinline__ void gh_unlock(gh_u32* lock) {
    asm volatile("st.release.gpu.global.u32 [%0], 0;" :: "l"(lock) : "memory");
}

// Relaxed device-scope load of a word other threads of the launch may be changing; plain loads
// may be served from a stale L1 line, this one reads L2.
__device__ __forceinline__ gh_u64 gh_load_relaxed(const gh_u64* p) {
    gh_u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// --- counting --------------------------------------------------------------------------------
// Adds two per-thread amounts to two global counters with one atomic per block each (per-warp
// atomics on one address serialise, and would bound a launch's rows by that one address).
// Every thread of the block must call it; the block size must be a multiple of 32, at most 1024.
__device__ __forceinline__ void gh_block_count(gh_i64* first, gh_i64 a, gh_i64* second, gh_i64 b) {
    __shared__ gh_i64 partial[2][32];
    // per-thread amounts are small (a few keys each), so a signed 32-bit warp sum is exact
    a = __reduce_add_sync(0xffffffffu, static_cast<int>(a));
    b = __reduce_add_sync(0xffffffffu, static_cast<int>(b));
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        partial[0][warp] = a;
        partial[1][warp] = b;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        gh_i64 sum_a = 0, sum_b = 0;
        for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
            sum_a += partial[0][w];
            sum_b += partial[1][w];
        }
        if (sum_a) atomicAdd(reinterpret_cast<unsigned long long*>(first),
                             static_cast<unsigned long long>(sum_a));
        if (second != nullptr && sum_b) atomicAdd(reinterpret_cast<unsigned long long*>(second),
                                                  static_cast<unsigned long long>(sum_b));
    }
}

// A block's count without a barrier at its end: each warp adds its sum in shared memory and
// the last warp to finish adds the block's to the global counter, so no thread waits for the
// block's slowest row (rows whose times vary widely: the cache's claims and evictions).
// gh_tally_begin must run first, in every thread (it zeroes the tally behind a barrier, which
// costs little before any row has run); gh_tally_end once per thread after its rows.
struct GhTally {
    gh_i64 sum;
    gh_u32 warps_done;
};

__device__ __forceinline__ void gh_tally_begin(GhTally& tally) {
    if (threadIdx.x == 0) {
        tally.sum = 0;
        tally.warps_done = 0;
    }
    __syncthreads();
}

__device__ __forceinline__ void gh_tally_end(GhTally& tally, gh_i64* counter, gh_i64 amount) {
    const int warp_sum = __reduce_add_sync(0xffffffffu, static_cast<int>(amount));
    if ((threadIdx.x & 31) != 0) return;
    if (warp_sum) atomicAdd(reinterpret_cast<unsigned long long*>(&tally.sum),
                            static_cast<unsigned long long>(static_cast<gh_i64>(warp_sum)));
    __threadfence_block();  // the sum lands before this warp counts as done
    if (atomicAdd(&tally.warps_done, 1u) != blockDim.x / 32 - 1) return;
    __threadfence_block();
    const gh_i64 total = static_cast<gh_i64>(
        atomicAdd(reinterpret_cast<unsigned long long*>(&tally.sum), 0ULL));
    if (total) atomicAdd(reinterpret_cast<unsigned long long*>(counter),
                         static_cast<unsigned long long>(total));
}

__device__ __forceinline__ void gh_count_add(gh_i64* counter, gh_i64 amount) {
    atomicAdd(reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(amount));
}

__device__ __forceinline__ gh_u64 gh_row() {
    return static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ gh_u64 gh_stride() {
    return static_cast<gh_u64>(gridDim.x) * blockDim.x;
}
