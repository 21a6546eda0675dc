// A new table's memory set in one launch (engines/cuda.py: empty_state): the table's words
// are one allocation, slots first, then the counters and the overflow bits. Every slot word
// all ones (the EMPTY key of either width, its value bytes all ones too, as torch.full(-1)
// left them), the out-of-band TOMBSTONE slot's key word -2 (all ones minus one, as a 64-bit
// key; as a 32-bit key in the low half, the high half all ones), the rest zero. One launch in
// place of four torch fills: a join makes a table per call, and small joins are host-bound.
#include "common.cuh"

extern "C" __global__ void gh_fill_table(long long* words, gh_u64 slot_words, gh_u64 total,
                                         gh_u64 tombstone_word) {
    for (gh_u64 i = gh_row(); i < total; i += gh_stride()) {
        words[i] = i < slot_words ? (i == tombstone_word ? -2LL : -1LL) : 0LL;
    }
}
