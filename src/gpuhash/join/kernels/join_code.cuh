// A join row's key code, the one rule every join kernel (the hash-table join's build and probe,
// join_build.cuh and join.cu, and the radix join, radix_join.cu) derives codes by; the CPU
// engine's twin is join/cpu/engine.py: join_codes.
#pragma once
#include "common.cuh"

// The kernels read the caller's key column as it is, IN_BYTES per row, and derive each row's
// code on the fly, so no side is copied to be encoded first. `shape` says how:
//   0  the column holds codes already, as the table's key bits (IN_BYTES == KEY_BYTES)
//   1  signed values: code = value - low for low <= value <= high; others match nothing
//   2  the same for unsigned 32-bit values
// `valid` (one byte per row, or null) marks null rows, which match nothing. Codes stay below
// the two reserved key values (so all ones never is one) or are reported: the hash-table
// build counts a non-null build row whose value lies outside [low, high], or whose code is
// reserved, as unplaced (counts[2]) and never stores it, so the host learns that the table
// lacks it (and refits its encoding) instead of losing it. (The radix join's encoder is
// fitted on its build side: every usable build row has a code.)
template <int IN_BYTES>
__device__ __forceinline__ bool gh_join_code(const char* keys, const gh_u8* valid, gh_u64 row,
                                             gh_u64 shape, gh_i64 low, gh_i64 high,
                                             gh_u64* code) {
    if (valid != nullptr && !valid[row]) return false;
    gh_i64 value;
    if (IN_BYTES == 4) {
        const gh_u32 bits = reinterpret_cast<const gh_u32*>(keys)[row];
        if (shape == 0) {
            *code = bits;
            return true;
        }
        value = (shape == 2) ? static_cast<gh_i64>(bits) : static_cast<gh_i64>(static_cast<int>(bits));
    } else {
        const gh_u64 bits = reinterpret_cast<const gh_u64*>(keys)[row];
        if (shape == 0) {
            *code = bits;
            return true;
        }
        value = static_cast<gh_i64>(bits);
    }
    if (value < low || value > high) return false;
    *code = static_cast<gh_u64>(value - low);
    return true;
}
