// A new table's memory, set by one loop that the fill launch (fill.cu) and the join build's
// first phase (join_build.cuh) share: the table's words are one allocation, slots first, then
// the counters, the overflow bits and any spare words (table/cuda/engine.py: empty_state).
// Every slot word all ones (the EMPTY key of either width, its value bytes all ones too, as
// torch.full(-1) would leave them), the out-of-band TOMBSTONE slot's key word -2 (all ones
// minus one as a 64-bit key; as a 32-bit key in the low half, the high half all ones), the rest
// zero. Two words a store: the allocation is 16-byte aligned (torch's are 512-byte); one word
// a store ran as fast, so the width is not what bounds the fill.
#pragma once
#include "common.cuh"

// Words [begin, end) of the allocation; the rule depends on a word's place, not on the range.
__device__ __forceinline__ void gh_fill_words(long long* words, gh_u64 begin, gh_u64 end,
                                              gh_u64 slot_words, gh_u64 tombstone_word) {
    const auto word = [&](gh_u64 i) -> long long {
        return i < slot_words ? (i == tombstone_word ? -2LL : -1LL) : 0LL;
    };
    if (begin >= end) return;
    if (begin & 1) {  // pairs start at an even word
        if (gh_row() == 0) words[begin] = word(begin);
        ++begin;
    }
    longlong2* pairs = reinterpret_cast<longlong2*>(words + begin);
    for (gh_u64 i = gh_row(); i < (end - begin) / 2; i += gh_stride()) {
        pairs[i] = make_longlong2(word(begin + 2 * i), word(begin + 2 * i + 1));
    }
    if (((end - begin) & 1) && gh_row() == 0) words[end - 1] = word(end - 1);
}
