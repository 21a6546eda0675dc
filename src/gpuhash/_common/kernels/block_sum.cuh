// A block-wide exclusive prefix sum, shared by the join kernels (join_build.cuh's ranks,
// radix_join.cu's scatter and output).
#pragma once
#include "common.cuh"

// Exclusive prefix sums of one value a thread across a block of 256 threads; *total gets the
// block's sum. Every thread of the block must call it.
__device__ __forceinline__ gh_u64 gh_block_exclusive_sum(gh_u64 value, gh_u64* total) {
    __shared__ gh_u64 warp_sums[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    gh_u64 inclusive = value;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const gh_u64 up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += up;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    gh_u64 before = 0, sum = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        if (w < warp) before += warp_sums[w];
        sum += warp_sums[w];
    }
    *total = sum;
    __syncthreads();  // warp_sums is reused by the next call
    return before + inclusive - value;
}
