// Grouped reductions over dense group codes: for each row, group = code - low (rows whose
// code is below low are dropped: a null key dropped by the caller), and per group the rows
// seen, the valid values seen and one accumulator (a sum, a min or a max). Templated on the
// code, value and accumulator types and the operation; instantiated by name from
// groupby/cuda/engine.py.
//
// gh_group_codes makes one code a row of several integer key columns without nulls, each
// coded by offset: the mixed-radix number of their digits (key - low), the first column most
// significant, in one pass over the columns (a chain of tensor operations would write an int64
// temporary a step).
//
// Few groups (at most GH_GROUP_SHARED): each block accumulates in shared memory, then adds its
// nonzero groups to the global result with one atomic each, so a hot group costs one global
// atomic a block instead of one a row. Many groups: global atomics straight away (rows of one
// group rarely meet). The launch caps the blocks (a block's flush costs the group count).
//
// Float min and max accumulate the value's bits mapped to an order-preserving int64 (a
// negative number's bits flipped but the sign), so integer atomicMin / atomicMax order them
// as numbers; the host maps them back. NaN is a null here (the caller skips it, as pandas).
#include "common.cuh"

#define GH_GROUP_SHARED 1024
#define GH_OP_SUM 0
#define GH_OP_MIN 1
#define GH_OP_MAX 2

template <class V> __device__ __forceinline__ bool gh_is_nan(V) { return false; }
template <> __device__ __forceinline__ bool gh_is_nan<float>(float v) { return v != v; }
template <> __device__ __forceinline__ bool gh_is_nan<double>(double v) { return v != v; }

// The order-preserving int64 of a double (min / max of floats).
__device__ __forceinline__ gh_i64 gh_ordered(double v) {
    const gh_i64 bits = __double_as_longlong(v + 0.0);  // -0.0 + 0.0 is 0.0
    return bits >= 0 ? bits : bits ^ 0x7fffffffffffffffLL;
}

template <class A, int OP> __device__ __forceinline__ A gh_identity();
template <> __device__ __forceinline__ double gh_identity<double, GH_OP_SUM>() { return 0.0; }
template <> __device__ __forceinline__ gh_i64 gh_identity<gh_i64, GH_OP_SUM>() { return 0; }
template <> __device__ __forceinline__ gh_i64 gh_identity<gh_i64, GH_OP_MIN>() {
    return 0x7fffffffffffffffLL;
}
template <> __device__ __forceinline__ gh_i64 gh_identity<gh_i64, GH_OP_MAX>() {
    return -0x7fffffffffffffffLL - 1;
}

// The accumulator's input from one value: the value itself for sums, ordered bits of floats
// for min and max.
template <class A, int OP, class V> __device__ __forceinline__ A gh_input(V v) {
    if (OP != GH_OP_SUM && (sizeof(V) == 4 || sizeof(V) == 8) && (V(0.5) != V(0))) {
        return static_cast<A>(gh_ordered(static_cast<double>(v)));
    }
    return static_cast<A>(v);
}

template <int OP> __device__ __forceinline__ void gh_apply(double* at, double v) {
    atomicAdd(at, v);  // only sums accumulate in double
}
template <int OP> __device__ __forceinline__ void gh_apply(gh_i64* at, gh_i64 v) {
    if (OP == GH_OP_SUM) {
        atomicAdd(reinterpret_cast<gh_u64*>(at), static_cast<gh_u64>(v));
    } else if (OP == GH_OP_MIN) {
        atomicMin(at, v);
    } else {
        atomicMax(at, v);
    }
}

// rows / counts may be null: the rows of each group are counted by the first pass over a
// group-by's codes only, and values are not counted where every row's value counts (integers
// without a validity mask: the caller takes the rows). Each skipped count is an atomic a row
// fewer.
template <class C, class V, class A, int OP>
__global__ void gh_group_reduce(const C* codes, gh_i64 low, gh_u64 n, const V* values,
                                const gh_u8* valid, gh_u64 groups, A* out, gh_i64* counts,
                                gh_i64* rows) {
    __shared__ A s_out[GH_GROUP_SHARED];
    __shared__ gh_i64 s_counts[GH_GROUP_SHARED];
    __shared__ gh_i64 s_rows[GH_GROUP_SHARED];
    const bool local = groups <= GH_GROUP_SHARED;
    if (local) {
        for (gh_u64 g = threadIdx.x; g < groups; g += blockDim.x) {
            s_out[g] = gh_identity<A, OP>();
            s_counts[g] = 0;
            s_rows[g] = 0;
        }
        __syncthreads();
    }
    const gh_u64 stride = static_cast<gh_u64>(gridDim.x) * blockDim.x;
    for (gh_u64 row = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x; row < n;
         row += stride) {
        const gh_i64 group = static_cast<gh_i64>(codes[row]) - low;
        if (group < 0) continue;
        const V v = values[row];
        if (rows != nullptr) {
            atomicAdd(reinterpret_cast<gh_u64*>(local ? &s_rows[group] : &rows[group]), 1ull);
        }
        if ((valid != nullptr && !valid[row]) || gh_is_nan(v)) continue;
        if (counts != nullptr) {
            atomicAdd(reinterpret_cast<gh_u64*>(local ? &s_counts[group] : &counts[group]),
                      1ull);
        }
        gh_apply<OP>(local ? &s_out[group] : &out[group], gh_input<A, OP, V>(v));
    }
    if (!local) return;
    __syncthreads();
    for (gh_u64 g = threadIdx.x; g < groups; g += blockDim.x) {
        if (rows != nullptr && s_rows[g] != 0) {
            atomicAdd(reinterpret_cast<gh_u64*>(&rows[g]), static_cast<gh_u64>(s_rows[g]));
        }
        if (counts != nullptr && s_counts[g] != 0) {
            atomicAdd(reinterpret_cast<gh_u64*>(&counts[g]), static_cast<gh_u64>(s_counts[g]));
        }
        if (s_out[g] != gh_identity<A, OP>()) gh_apply<OP>(&out[g], s_out[g]);
    }
}

#define GH_GROUP_MAX_KEYS 8

struct GhKeyColumns {
    gh_u64 data[GH_GROUP_MAX_KEYS];   // the columns' addresses
    gh_i64 low[GH_GROUP_MAX_KEYS];    // each column's smallest key
    gh_i64 span[GH_GROUP_MAX_KEYS];   // each column's digits: high - low + 1
    int width[GH_GROUP_MAX_KEYS];     // 1, 2, 4 or 8 bytes a key (signed)
    int count;
};

__device__ __forceinline__ gh_i64 gh_key_at(gh_u64 data, int width, gh_u64 row) {
    switch (width) {
        case 1: return reinterpret_cast<const signed char*>(data)[row];
        case 2: return reinterpret_cast<const short*>(data)[row];
        case 4: return reinterpret_cast<const int*>(data)[row];
        default: return reinterpret_cast<const gh_i64*>(data)[row];
    }
}

template <class OUT>
__global__ void gh_group_codes(const GhKeyColumns* columns, gh_u64 n, OUT* out) {
    const GhKeyColumns c = *columns;
    const gh_u64 stride = static_cast<gh_u64>(gridDim.x) * blockDim.x;
    for (gh_u64 row = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x; row < n;
         row += stride) {
        gh_i64 code = 0;
        for (int k = 0; k < c.count; ++k) {
            code = code * c.span[k] + (gh_key_at(c.data[k], c.width[k], row) - c.low[k]);
        }
        out[row] = static_cast<OUT>(code);
    }
}
