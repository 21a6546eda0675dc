// A new table's memory set in one launch (table/cuda/engine.py: empty_state), by fill.cuh's
// rule. One launch in place of four torch fills: a join makes a table per call, and small joins
// are host-bound.
#include "fill.cuh"

extern "C" __global__ void gh_fill_table(long long* words, gh_u64 slot_words, gh_u64 total,
                                         gh_u64 tombstone_word) {
    gh_fill_words(words, 0, total, slot_words, tombstone_word);
}
