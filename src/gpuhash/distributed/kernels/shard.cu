// The owner rank of each key of a sharded table's batch, and the rows each rank is sent, in
// one pass over the keys (distributed/cuda/engine.py launches it; distributed/cpu/loops.py is
// its numba twin, and distributed/routing.py: owner_of, in torch operations, the definition
// both must match bit for bit: saved shards were split by it).
//
// A key's owner: the high GH_SHARD_BITS bits of gh_mix64(key ^ GH_SHARD_SALT), mapped onto the
// ranks by a multiply-high (any number of ranks, no modulo). A 32-bit key hashes as its bits
// zero-extended (K is unsigned: the int32 and uint32 views of a key have one owner).
//
// Counting: each warp's lanes of one owner add to that owner's count once (__match_any_sync:
// with a few ranks every lane of a warp meets a few others on one address, and atomics on one
// address serialise), into a block's 32-bit counts in shared memory, flushed with one global
// atomic an owner a block. The launch caps the blocks (each flush costs the ranks) and gives no
// block 2^31 rows. Past GH_SHARD_SHARED_RANKS ranks a warp adds straight to the global counts.
#include "common.cuh"

constexpr gh_u64 GH_SHARD_SHARED_RANKS = 1024;

__device__ __forceinline__ gh_u64 gh_shard_owner(gh_u64 key_bits, gh_u64 world) {
    const gh_u64 high = gh_mix64(key_bits ^ GH_SHARD_SALT) >> (64 - GH_SHARD_BITS);
    return (high * world) >> GH_SHARD_BITS;  // high < 2^32, world < 2^31: no overflow
}

// owners[row] = the owner of keys[row] (O: unsigned char below 257 ranks, else int);
// counts[r] += the rows owned by rank r (counts zeroed by the caller; world >= 1).
template <class K, class O>
__global__ void gh_shard_owners(const K* keys, gh_u64 n, gh_u64 world, O* owners,
                                gh_i64* counts) {
    __shared__ gh_u32 s_counts[GH_SHARD_SHARED_RANKS];
    const bool local = world <= GH_SHARD_SHARED_RANKS;  // the same in every thread
    if (local) {
        for (gh_u64 r = threadIdx.x; r < world; r += blockDim.x) s_counts[r] = 0;
        __syncthreads();
    }
    const unsigned lane = threadIdx.x & 31;
    // the loop's bound is the block's, not the thread's: every lane of a warp takes each
    // step, so the full-mask match below sees all 32 lanes
    for (gh_u64 base = static_cast<gh_u64>(blockIdx.x) * blockDim.x; base < n;
         base += gh_stride()) {
        const gh_u64 row = base + threadIdx.x;
        const bool here = row < n;
        gh_u64 owner = world;  // no rank's: lanes past the end match only each other
        if (here) {
            owner = gh_shard_owner(static_cast<gh_u64>(keys[row]), world);
            owners[row] = static_cast<O>(owner);
        }
        const unsigned same = __match_any_sync(0xffffffffu, owner);
        if (here && lane == static_cast<unsigned>(__ffs(same) - 1)) {
            const unsigned rows = static_cast<unsigned>(__popc(same));
            if (local) {
                atomicAdd(&s_counts[owner], rows);
            } else {
                atomicAdd(reinterpret_cast<gh_u64*>(&counts[owner]), static_cast<gh_u64>(rows));
            }
        }
    }
    if (!local) return;
    __syncthreads();
    for (gh_u64 r = threadIdx.x; r < world; r += blockDim.x) {
        if (s_counts[r] != 0) {
            atomicAdd(reinterpret_cast<gh_u64*>(&counts[r]), static_cast<gh_u64>(s_counts[r]));
        }
    }
}
