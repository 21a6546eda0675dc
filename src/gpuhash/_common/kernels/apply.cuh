// Insert-or-apply: a value combined into the stored one with add, min or max, element by
// element, by atomics on int32 / int64 / float32 / float64 elements.
//
// The stored row must hold a value before any row applies to it. Where one CAS publishes key
// and value together (packed slots; pair slots with a 128-bit CAS), the row that claims a new
// key publishes its own value and every other row of that key applies to it, in one launch.
// Elsewhere (rows layout; pair slots on sm_80) a first launch claims new keys with the
// operator's identity as value and records each row's slot, and a second launch applies every
// row: the launch boundary orders the initialisation before every application.
#pragma once
#include "open_addressing.cuh"

constexpr int GH_OP_ADD = 0;
constexpr int GH_OP_MIN = 1;
constexpr int GH_OP_MAX = 2;

template <class V> struct GhElement;

// Whether x would replace the stored value under min / max. A stored min only falls and a max
// only rises, so a row that loses to what it reads loses to every later value too and skips
// its atomic: where many rows share a key (a group's first row, a group's min), most rows
// then read the slot and leave it, instead of queueing atomics on one address.
template <int OP, class V>
__device__ __forceinline__ bool gh_wins(V x, V stored) {
    return OP == GH_OP_MIN ? x < stored : x > stored;
}

template <> struct GhElement<int> {
    static __device__ __forceinline__ int lowest() { return -2147483647 - 1; }
    static __device__ __forceinline__ int highest() { return 2147483647; }
    template <int OP>
    static __device__ __forceinline__ void apply(int* p, int x) {
        if (OP == GH_OP_ADD) {
            atomicAdd(p, x);
            return;
        }
        if (!gh_wins<OP>(x, *reinterpret_cast<volatile int*>(p))) return;
        if (OP == GH_OP_MIN) atomicMin(p, x);
        if (OP == GH_OP_MAX) atomicMax(p, x);
    }
};

template <> struct GhElement<long long> {
    static __device__ __forceinline__ long long lowest() { return -9223372036854775807LL - 1; }
    static __device__ __forceinline__ long long highest() { return 9223372036854775807LL; }
    template <int OP>
    static __device__ __forceinline__ void apply(long long* p, long long x) {
        if (OP == GH_OP_ADD) {
            atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(x));
            return;
        }
        if (!gh_wins<OP>(x, *reinterpret_cast<volatile long long*>(p))) return;
        if (OP == GH_OP_MIN) atomicMin(p, x);
        if (OP == GH_OP_MAX) atomicMax(p, x);
    }
};

// Floating-point min / max have no hardware atomic: a CAS loop on the bits, which stops as soon
// as the stored value already wins (no write, so no contention once the extreme is in place).
template <> struct GhElement<float> {
    static __device__ __forceinline__ float lowest() { return -__int_as_float(0x7f800000); }
    static __device__ __forceinline__ float highest() { return __int_as_float(0x7f800000); }
    template <int OP>
    static __device__ __forceinline__ void apply(float* p, float x) {
        if (OP == GH_OP_ADD) {
            atomicAdd(p, x);
            return;
        }
        int* bits = reinterpret_cast<int*>(p);
        int cur = __float_as_int(*reinterpret_cast<volatile float*>(p));
        while (OP == GH_OP_MIN ? x < __int_as_float(cur) : x > __int_as_float(cur)) {
            const int prev = atomicCAS(bits, cur, __float_as_int(x));
            if (prev == cur) return;
            cur = prev;
        }
    }
};

template <> struct GhElement<double> {
    static __device__ __forceinline__ double lowest() { return -__longlong_as_double(0x7ff0000000000000LL); }
    static __device__ __forceinline__ double highest() { return __longlong_as_double(0x7ff0000000000000LL); }
    template <int OP>
    static __device__ __forceinline__ void apply(double* p, double x) {
        if (OP == GH_OP_ADD) {
            atomicAdd(p, x);
            return;
        }
        unsigned long long* bits = reinterpret_cast<unsigned long long*>(p);
        unsigned long long cur = __double_as_longlong(*reinterpret_cast<volatile double*>(p));
        while (OP == GH_OP_MIN ? x < __longlong_as_double(cur) : x > __longlong_as_double(cur)) {
            const unsigned long long prev = atomicCAS(bits, cur, __double_as_longlong(x));
            if (prev == cur) return;
            cur = prev;
        }
    }
};

template <class V, int OP>
__device__ __forceinline__ V gh_identity() {
    if (OP == GH_OP_ADD) return V(0);
    return OP == GH_OP_MIN ? GhElement<V>::highest() : GhElement<V>::lowest();
}

// Applies one row of values (T::VALUE_BYTES / sizeof(V) elements) to a stored value.
template <class T, class V, int OP>
__device__ __forceinline__ void gh_apply_row(const T& t, gh_u64 slot, const char* src) {
    V* dst = reinterpret_cast<V*>(t.value(slot));
    const V* in = reinterpret_cast<const V*>(src);
#pragma unroll 4
    for (int i = 0; i < T::VALUE_BYTES / static_cast<int>(sizeof(V)); ++i) {
        GhElement<V>::template apply<OP>(dst + i, in[i]);
    }
}

// The value bits (packed / pair) or row (rows) of the identity, for first-launch claims.
template <class T, class V, int OP>
__device__ __forceinline__ void gh_identity_row(char* out) {
#pragma unroll 4
    for (int i = 0; i < T::VALUE_BYTES / static_cast<int>(sizeof(V)); ++i) {
        reinterpret_cast<V*>(out)[i] = gh_identity<V, OP>();
    }
}
