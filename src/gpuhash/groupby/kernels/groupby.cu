// Grouped reductions over dense group codes: for each row, group = code - low (rows whose
// group falls outside [0, groups) are dropped: a null key dropped by the caller), and per
// group the rows seen, the valid values seen and one accumulator (a sum, a min or a max).
// Templated on the code, value and accumulator types and the operation; instantiated by name
// from groupby/cuda/engine.py. The quantile selection lives in group_select.cuh.
//
// gh_group_codes makes one code a row of several integer key columns without nulls, each
// coded by offset: the mixed-radix number of their digits (key - low), the first column most
// significant, in one pass over the columns (a chain of tensor operations would write an int64
// temporary a step).
//
// Shared-memory windows: a block accumulates the groups of one window, [blockIdx.y * window,
// + window), in dynamic shared memory and skips the rows of other groups, then adds its
// nonzero groups to the global result with one atomic each; a hot group costs one global
// atomic a block instead of one a row. Several windows read the rows once each, which beats
// global atomics while the groups are few thousands. window == 0: global atomics straight
// away (rows of one group rarely meet). The launch caps the blocks (a block's flush costs its
// window). Counts in shared memory are 32-bit: the launch gives no block 2^31 rows.
//
// Copies: where a window is small (a few hundred groups), each warp of a block accumulates
// into its own copy of it, and the flush combines the copies: rows of one group meet in every
// warp then, and 64-bit shared atomics (a compare-and-swap loop for doubles) retry only
// against their own warp's lanes.
//
// Float min and max accumulate the value's bits mapped to an order-preserving int64 (a
// negative number's bits flipped but the sign), so integer atomicMin / atomicMax order them
// as numbers; the host maps them back. NaN is a null here (the caller skips it, as pandas).
#include "common.cuh"

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

// A sum of two accumulators: int64 sums wrap as the atomics do (signed overflow is undefined).
__device__ __forceinline__ double gh_sum(double a, double b) { return a + b; }
__device__ __forceinline__ gh_i64 gh_sum(gh_i64 a, gh_i64 b) {
    return static_cast<gh_i64>(static_cast<gh_u64>(a) + static_cast<gh_u64>(b));
}

// Two accumulators of one group as one (the flush's combination of a window's copies).
template <int OP, class A> __device__ __forceinline__ A gh_combine(A a, A b) {
    if (OP == GH_OP_SUM) return gh_sum(a, b);
    if (OP == GH_OP_MIN) return b < a ? b : a;
    return b > a ? b : a;
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

// The groups of this block's window: [first, first + width); all of them without a window.
struct GhWindow {
    gh_i64 first;
    gh_i64 width;
};

__device__ __forceinline__ GhWindow gh_window(gh_u64 groups, gh_u64 window) {
    GhWindow w;
    w.first = window == 0 ? 0 : static_cast<gh_i64>(blockIdx.y) * static_cast<gh_i64>(window);
    const gh_i64 left = static_cast<gh_i64>(groups) - w.first;
    w.width = window == 0 ? left : min(static_cast<gh_i64>(window), left);
    return w;
}

#define GH_REDUCE_UNROLL 4

// rows / counts may be null: the rows of each group are counted by the first pass over a
// group-by's codes only, and values are not counted where every row's value counts (integers
// without a validity mask: the caller takes the rows). Each skipped count is an atomic a row
// fewer. Dynamic shared memory: copies x window accumulators, then as many 32-bit counts and
// as many rows; copies divides the block's warps (1: one copy a block).
template <class C, class V, class A, int OP>
__global__ void gh_group_reduce(const C* codes, gh_i64 low, gh_u64 n, const V* values,
                                const gh_u8* valid, gh_u64 groups, gh_u64 window,
                                gh_u64 copies, A* out, gh_i64* counts, gh_i64* rows) {
    extern __shared__ __align__(8) unsigned char gh_shared[];
    const gh_u64 cells = window * copies;
    A* s_out = reinterpret_cast<A*>(gh_shared);
    gh_u32* s_counts = reinterpret_cast<gh_u32*>(s_out + cells);
    gh_u32* s_rows = s_counts + cells;
    const bool local = window != 0;
    const GhWindow w = gh_window(groups, window);
    if (local) {
        for (gh_u64 g = threadIdx.x; g < cells; g += blockDim.x) {
            s_out[g] = gh_identity<A, OP>();
            s_counts[g] = 0;
            s_rows[g] = 0;
        }
        __syncthreads();
    }
    // this warp's copy: its cells start here
    const gh_i64 mine = static_cast<gh_i64>((threadIdx.x / 32) % copies * window);
    const auto take = [&](gh_u64 row, C code, V v) {
        gh_i64 group = static_cast<gh_i64>(code) - low - w.first;
        if (group < 0 || group >= w.width) return;
        if (local) group += mine;
        if (rows != nullptr) {
            if (local) {
                atomicAdd(&s_rows[group], 1u);
            } else {
                atomicAdd(reinterpret_cast<gh_u64*>(&rows[group]), 1ull);
            }
        }
        if ((valid != nullptr && !valid[row]) || gh_is_nan(v)) return;
        if (counts != nullptr) {
            if (local) {
                atomicAdd(&s_counts[group], 1u);
            } else {
                atomicAdd(reinterpret_cast<gh_u64*>(&counts[group]), 1ull);
            }
        }
        gh_apply<OP>(local ? &s_out[group] : &out[group], gh_input<A, OP, V>(v));
    };
    // GH_REDUCE_UNROLL rows a step, a grid stride apart (each load coalesced), their codes
    // and values loaded before any of them is applied: a thread then waits on one round
    // trip for several rows.
    const gh_u64 stride = static_cast<gh_u64>(gridDim.x) * blockDim.x;
    gh_u64 row = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; row + (GH_REDUCE_UNROLL - 1) * stride < n; row += GH_REDUCE_UNROLL * stride) {
        C c[GH_REDUCE_UNROLL];
        V v[GH_REDUCE_UNROLL];
#pragma unroll
        for (int k = 0; k < GH_REDUCE_UNROLL; ++k) {
            c[k] = codes[row + k * stride];
            v[k] = values[row + k * stride];
        }
#pragma unroll
        for (int k = 0; k < GH_REDUCE_UNROLL; ++k) take(row + k * stride, c[k], v[k]);
    }
    for (; row < n; row += stride) take(row, codes[row], values[row]);
    if (!local) return;
    __syncthreads();
    for (gh_i64 g = threadIdx.x; g < w.width; g += blockDim.x) {
        const gh_i64 at = w.first + g;
        gh_u64 seen = 0, counted = 0;
        A acc = gh_identity<A, OP>();
        for (gh_u64 k = 0; k < copies; ++k) {
            const gh_u64 cell = k * window + static_cast<gh_u64>(g);
            seen += s_rows[cell];
            counted += s_counts[cell];
            acc = gh_combine<OP>(acc, s_out[cell]);
        }
        if (rows != nullptr && seen != 0) {
            atomicAdd(reinterpret_cast<gh_u64*>(&rows[at]), seen);
        }
        if (counts != nullptr && counted != 0) {
            atomicAdd(reinterpret_cast<gh_u64*>(&counts[at]), counted);
        }
        if (acc != gh_identity<A, OP>()) gh_apply<OP>(&out[at], acc);
    }
}

// Per group, over rows whose code is in [0, groups) and whose use flag is set (use null:
// every row): the sums of (a - mean_a)^2, (b - mean_b)^2 and their product (a and b read as
// V, computed in double), into out[0..3) x groups. Windows as gh_group_reduce; dynamic shared
// memory: three window sums.
template <class C, class V>
__global__ void gh_group_comoments(const C* codes, gh_u64 n, const V* a, const V* b,
                                   const gh_u8* use, gh_u64 groups, gh_u64 window,
                                   const double* mean_a, const double* mean_b, double* out) {
    extern __shared__ __align__(8) unsigned char gh_shared[];
    double* s_sums = reinterpret_cast<double*>(gh_shared);
    const bool local = window != 0;
    const GhWindow w = gh_window(groups, window);
    if (local) {
        for (gh_i64 g = threadIdx.x; g < 3 * w.width; g += blockDim.x) s_sums[g] = 0.0;
        __syncthreads();
    }
    double* sums = local ? s_sums : out;
    const gh_i64 lane = local ? w.width : static_cast<gh_i64>(groups);
    const gh_u64 stride = static_cast<gh_u64>(gridDim.x) * blockDim.x;
    for (gh_u64 row = static_cast<gh_u64>(blockIdx.x) * blockDim.x + threadIdx.x; row < n;
         row += stride) {
        const gh_i64 code = static_cast<gh_i64>(codes[row]);
        const gh_i64 group = code - w.first;
        if (group < 0 || group >= w.width || (use != nullptr && !use[row])) continue;
        const double da = static_cast<double>(a[row]) - mean_a[code];
        const double db = static_cast<double>(b[row]) - mean_b[code];
        atomicAdd(&sums[group], da * da);
        atomicAdd(&sums[lane + group], db * db);
        atomicAdd(&sums[2 * lane + group], da * db);
    }
    if (!local) return;
    __syncthreads();
    for (gh_i64 g = threadIdx.x; g < w.width; g += blockDim.x) {
        for (int k = 0; k < 3; ++k) {
            const double sum = s_sums[k * w.width + g];
            if (sum != 0.0) atomicAdd(&out[k * static_cast<gh_i64>(groups) + w.first + g], sum);
        }
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

// The column descriptions are read into shared memory once a block: a copy a thread (in
// local memory, indexed by column) would cost its bytes a row.
template <class OUT>
__global__ void gh_group_codes(const GhKeyColumns* columns, gh_u64 n, OUT* out) {
    __shared__ GhKeyColumns c;
    if (threadIdx.x == 0) c = *columns;
    __syncthreads();
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

#include "group_select.cuh"
