// Per-group quantiles by selection: the values arrive grouped (each group's run at start[g],
// count[g] long, in no order within it) and a block finds the one or two ranks a group's
// quantile interpolates between, by radix selection over the values' order-preserving 64-bit
// keys, a byte a pass from the top; a sort of every value would cost several passes over all
// of them. A pass whose chosen byte holds a single key ends the search with one more pass.
//
// Linear interpolation as pandas: position = q * (count - 1), below = floor, above = ceil,
// result = v[below] + (v[above] - v[below]) * (position - below), each step rounded on its
// own (no fused multiply-add) so the CPU engine's torch arithmetic gives the same bits.
#pragma once

#define GH_SELECT_SIGN 0x8000000000000000ULL

template <class V> __device__ __forceinline__ bool gh_select_float() { return V(0.5) != V(0); }

// A key whose unsigned order is the values' numeric order (-0.0 as 0.0).
template <class V> __device__ __forceinline__ gh_u64 gh_order_key(V v) {
    if (gh_select_float<V>()) {
        const gh_u64 bits = static_cast<gh_u64>(__double_as_longlong(static_cast<double>(v) + 0.0));
        return (bits & GH_SELECT_SIGN) ? ~bits : bits | GH_SELECT_SIGN;
    }
    return static_cast<gh_u64>(static_cast<gh_i64>(v)) ^ GH_SELECT_SIGN;
}

template <class V> __device__ __forceinline__ double gh_order_value(gh_u64 key) {
    if (gh_select_float<V>()) {
        const gh_u64 bits = (key & GH_SELECT_SIGN) ? key ^ GH_SELECT_SIGN : ~key;
        return __longlong_as_double(static_cast<gh_i64>(bits));
    }
    return static_cast<double>(static_cast<gh_i64>(key ^ GH_SELECT_SIGN));
}

struct GhSelectShared {
    gh_u64 histogram[256];  // 64-bit: one group may hold 2^32 values
    gh_u64 prefix;
    gh_u64 found;
    gh_u64 above;
    gh_i64 rank;
    gh_u64 at_most;
    int single;
};

// The key of rank `rank` (0-based, ascending) among the block's `count` values.
template <class V>
__device__ gh_u64 gh_select_rank(const V* run, gh_i64 count, gh_i64 rank, GhSelectShared& s) {
    gh_u64 prefix = 0;
    gh_u64 mask = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) s.histogram[d] = 0;
        __syncthreads();
        // every lane of a warp runs every round (the bound is the block's), so the whole
        // warp meets at the match; a lane past the run or off the prefix brings no byte
        for (gh_i64 base = 0; base < count; base += blockDim.x) {
            const gh_i64 i = base + threadIdx.x;
            int digit = 256;
            if (i < count) {
                const gh_u64 key = gh_order_key<V>(run[i]);
                if ((key & mask) == prefix) digit = static_cast<int>((key >> shift) & 255);
            }
            // a warp's keys often share the byte (the exponent's, at first): one atomic for
            // each distinct byte of a warp, not one a key on one hot counter
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            if (digit < 256 && (threadIdx.x & 31) == __ffs(peers) - 1) {
                atomicAdd(&s.histogram[digit], static_cast<gh_u64>(__popc(peers)));
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            gh_u64 below = 0;
            int digit = 0;
            while (below + s.histogram[digit] <= static_cast<gh_u64>(rank)) below += s.histogram[digit++];
            s.prefix = prefix | (static_cast<gh_u64>(digit) << shift);
            s.rank = rank - static_cast<gh_i64>(below);
            s.single = s.histogram[digit] == 1;
        }
        __syncthreads();
        prefix = s.prefix;
        rank = s.rank;
        mask |= 255ULL << shift;
        const bool single = s.single;
        __syncthreads();  // every thread has read the pass's choice before the next one
        if (single && shift > 0) {  // one key left with this prefix: find it
            for (gh_i64 i = threadIdx.x; i < count; i += blockDim.x) {
                const gh_u64 key = gh_order_key<V>(run[i]);
                if ((key & mask) == prefix) s.found = key;
            }
            __syncthreads();
            prefix = s.found;
            __syncthreads();
            break;
        }
    }
    return prefix;
}

// out[g]: the q-quantile of group g's run; 0.0 for an empty group (the caller masks it).
template <class V>
__global__ void gh_group_quantile(const V* values, const gh_i64* start, const gh_i64* count,
                                  gh_u64 groups, double q, double* out) {
    __shared__ GhSelectShared s;
    for (gh_u64 g = blockIdx.x; g < groups; g += gridDim.x) {
        const gh_i64 n = count[g];
        if (n <= 0) {
            if (threadIdx.x == 0) out[g] = 0.0;
            continue;
        }
        const V* run = values + start[g];
        const double position = __dmul_rn(q, static_cast<double>(n - 1));
        const gh_i64 below = static_cast<gh_i64>(floor(position));
        const gh_i64 above = static_cast<gh_i64>(ceil(position));
        const gh_u64 low = gh_select_rank<V>(run, n, below, s);
        gh_u64 high = low;
        if (above != below) {  // the next rank: low again if low repeats, else the next key up
            if (threadIdx.x == 0) {
                s.at_most = 0;
                s.above = ~0ULL;
            }
            __syncthreads();
            gh_u64 at_most = 0;
            gh_u64 next = ~0ULL;
            for (gh_i64 i = threadIdx.x; i < n; i += blockDim.x) {
                const gh_u64 key = gh_order_key<V>(run[i]);
                if (key <= low) {
                    ++at_most;
                } else if (key < next) {
                    next = key;
                }
            }
            atomicAdd(&s.at_most, at_most);
            atomicMin(&s.above, next);
            __syncthreads();
            high = s.at_most > static_cast<gh_u64>(above) ? low : s.above;
        }
        if (threadIdx.x == 0) {
            const double v_low = gh_order_value<V>(low);
            const double v_high = gh_order_value<V>(high);
            const double share = __dsub_rn(position, static_cast<double>(below));
            out[g] = __dadd_rn(v_low, __dmul_rn(__dsub_rn(v_high, v_low), share));
        }
        __syncthreads();  // the shared state is free for the next group
    }
}
