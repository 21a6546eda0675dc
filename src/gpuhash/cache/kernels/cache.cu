// The CacheMap kernels, templated on the cache type (cache.cuh: GhCache) and instantiated by
// name through NVRTC (cache/cuda/engine.py: kernel_names). One thread per row, each a thin
// caller of the cache's probe and its index (cache_index.cuh); the host keeps one acting row
// per key (gh_last_rows).
#include "cache.cuh"
#include "last_rows.cuh"

// One row's value copy in a kernel that copies wide rows with the whole warp (gh_warp_copy):
// a narrow row (WARP_COPY false) is copied at once; a wide one is noted for the warp's copy.
template <int BYTES, bool WARP_COPY>
__device__ __forceinline__ void gh_copy_or_note(char* dst, const char* src,
                                                const char*& noted_src, char*& noted_dst) {
    if (WARP_COPY) {
        noted_src = src;
        noted_dst = dst;
    } else {
        gh_copy_value<BYTES>(dst, src);
    }
}

// write modes: GhWriteMode (gh_constants.cuh, from _common/constants.py: WRITE_MODES)

// One write per acting row: insert-or-assign (UPSERT), insert if absent (FIND_OR_INSERT: a
// present key's value is left alone), assign to present keys only (ASSIGN), or, on rows with
// accumulate set, only locate a present key (ACCUMULATE: the host adds to its value; the other
// rows upsert). status / index / found for every row (non-acting rows: SUPERSEDED, -1, 0).
// Row r's value is in_values + r * value_stride * VALUE_BYTES (stride 0: one row for all).
// A write is two launches (three where one evicts: gh_cache_index_settle). This one places
// every row that finds its key (through the index) or a free slot and marks the others
// GH_TO_EVICT; gh_cache_evict then moves an entry or evicts for those. No entry is evicted in
// this launch, and its rows hold distinct keys (the host keeps one acting row per key), so a
// row's slot is its own from the moment it finds its key or wins a free slot by CAS: it
// writes value, score and digest with plain stores, no lock, no fence (the launch boundary
// publishes them). (Locking each slot and publishing it with a release store, as evictors
// must, slowed the whole write path.) A free slot is one whose digest is 0:
// a claimer that sees 0 after another row took the slot fails its CAS and looks further.
// New entries are counted by gh_tally (no barrier: one per block ended each block waiting for
// its slowest row, a visible share of the kernel's stalls).
// With `out` (FIND_OR_INSERT), each acting row's value as it found it (else its own).
template <class C, int MODE>
__global__ void __launch_bounds__(256, 4) gh_cache_write(GH_CACHE_PARAMS, const gh_u64* rows, const gh_u8* acting,
                               const gh_u8* accumulate, const gh_u64* given,
                               const char* in_values, gh_u64 value_stride, gh_u64 has_values,
                               gh_u64 n, gh_u64 policy, gh_u64 step, gh_u64 epoch,
                               signed char* status, gh_i64* index, gh_u8* found, char* out) {
    const C t = GH_CACHE_REF(C);
    __shared__ GhTally tally;
    gh_tally_begin(tally);
    gh_i64 added = 0;
    // Wide rows are copied by the whole warp (gh_warp_copy) once its rows have decided, each
    // lane's copies noted meanwhile (at most two: the value it returns, and the row it writes
    // to its slot): a thread copying a wide row of its own left writes far behind finds. The
    // lanes take consecutive rows and leave the loop together for it. Narrow rows (up to 32
    // bytes, two 16-byte words) are copied where they are decided, as before.
    constexpr bool WARP_COPY = C::VALUE_BYTES > 32;
    const auto copy = [](char* dst, const char* src, const char*& noted_src, char*& noted_dst) {
        gh_copy_or_note<C::VALUE_BYTES, WARP_COPY>(dst, src, noted_src, noted_dst);
    };
    const int lane = threadIdx.x & 31;
    for (gh_u64 base = gh_row() - lane; base < n; base += gh_stride()) {
        const gh_u64 r = base + lane;
        const char* out_src = nullptr;  // this row's value out, and its row into its slot
        char* out_dst = nullptr;
        const char* in_src = nullptr;
        char* in_dst = nullptr;
        if (r < n) do {
            if (!acting[r]) {
                status[r] = GH_SUPERSEDED;
                index[r] = -1;
                found[r] = 0;
                break;
            }
            const gh_u64 key = rows[r];
            const char* row = has_values ? in_values + r * value_stride * C::VALUE_BYTES : nullptr;
            char* mine_out = out == nullptr ? nullptr : out + r * C::VALUE_BYTES;
            if (key >= GH_LOCKED) {  // the two reserved keys: no entry may hold them
                if (mine_out != nullptr) copy(mine_out, row, out_src, out_dst);
                status[r] = GH_REFUSED;
                index[r] = -1;
                found[r] = 0;
                break;
            }
            const GhHome home = gh_home(t, key);
            const gh_u32 digest = gh_digest(home.hash);
            const bool adds = MODE == GH_ACCUMULATE && accumulate[r];
            const bool has = given != nullptr;
            const gh_u64 mine = has ? given[r] : 0;
            const int rule = static_cast<int>(policy);
            // Every row searches through the index (cache_index.cuh): one bucket, where the digest
            // walk read one or two buckets' digests and a key word for each false match. (In an
            // ASSIGN launch nothing adds an entry, so through the read-only path.) Only a row
            // whose key is absent reads its buckets' digests, for the free slots a claim needs.
            gh_i64 slot = gh_index_find<MODE != GH_ASSIGN>(t.index, t.index_buckets, home.hash, key);
            found[r] = slot >= 0;
            if (slot >= 0) {
                if (mine_out != nullptr) copy(mine_out, t.value(slot), out_src, out_dst);
                index[r] = slot;
                if (MODE == GH_ACCUMULATE && !adds) {  // an assigning row leaves a present key be
                    status[r] = GH_SKIPPED;
                    break;
                }
                const gh_u64 old = gh_reads_score(rule) ? t.scores[slot] : 0;
                t.scores[slot] = gh_new_score(rule, old, true, has, mine, step, epoch);
                if (MODE != GH_FIND_OR_INSERT && !adds && row != nullptr) {
                    copy(t.value(slot), row, in_src, in_dst);
                }
                status[r] = GH_ASSIGNED;
                break;
            }
            if (mine_out != nullptr) copy(mine_out, row, out_src, out_dst);
            index[r] = -1;
            if (MODE == GH_ASSIGN || adds) {
                status[r] = GH_SKIPPED;
                break;
            }
            GhMasks<C> m1, m2;
            gh_bucket_masks<C, true>(t, home.b1, 0u, m1);
            if (home.b2 != home.b1) gh_bucket_masks<C, true>(t, home.b2, 0u, m2);
            else m2 = m1;
            slot = gh_cache_claim_free(t, home, key, m1, m2);
            if (slot < 0) {
                status[r] = GH_TO_EVICT;
                break;
            }
            if (row != nullptr) copy(t.value(slot), row, in_src, in_dst);
            t.scores[slot] = gh_new_score(rule, 0, false, has, mine, step, epoch);
            t.digests[slot] = static_cast<gh_u8>(digest);
            gh_index_insert(t.index, t.index_buckets, home.hash, key, slot);
            status[r] = GH_INSERTED;
            index[r] = slot;
            ++added;
        } while (false);
        if (WARP_COPY) {  // the value out first: it may be the slot's before the row lands
            gh_warp_copy<C::VALUE_BYTES>(out_src, out_dst);
            gh_warp_copy<C::VALUE_BYTES>(in_src, in_dst);
        }
    }
    gh_tally_end(tally, &t.counts[0], added);
}

// The second launch of a write: the rows gh_cache_write marked GH_TO_EVICT (both buckets full).
// While the cache holds fewer than `move_below` entries (read once per warp), a row first moves
// an entry of its buckets to that entry's other bucket and takes the slot it left
// (gh_cache_movable, gh_cache_move: INSERTED); otherwise, or when no entry can move, it takes
// the lowest-scored entry of its two buckets, or is REFUSED when it scores below it (HKV's
// rule). Rows race for entries, so here a slot is locked (its key word GH_LOCKED, taken with
// acquire order) and published with a release store, and an entry is re-checked after it is
// locked (gh_cache_try_evict). A warp's lanes take consecutive rows and leave the loop
// together. The warp finds the candidates of up to GH_EVICT_BATCH waiting rows in turn
// (gh_cache_lowest: whole-warp reads; one row at a time while entries may move), then those
// rows' lanes lock and write together, so their chains of round trips overlap; a row that lost
// a race is served again. A lane locks by exchange and reads the old value with the old score;
// where values fit registers (HOLD: up to 32 bytes) each lane keeps its evicted entry until the
// warp's rows are served, then the warp writes them to ev_* at slots taken by one atomicAdd, so
// no publish waits on an output store nor on the shared counter. Larger values are copied by
// the whole warp, out before the row lands, while its lanes' slots are locked. Evicted entries go to ev_* while they have room. 3 blocks of
// 256 an SM: at 4 the batch's registers spilled and the launch gained little. At full load the
// launch's time is mostly the scans, two buckets' scores a row.
// A move changes the index at once (its entry's slot, the new key's entry); an eviction
// leaves the evicted key in replaced[r] and both index changes to gh_cache_index_settle, the
// launch after: made here, inside the rows' chains of round trips, they lengthen every chain,
// which slowed the launch by more than a launch of their own costs.
constexpr gh_u32 GH_EVICT_BATCH = 4;  // rows whose chains run together (gh_cache_evict)

template <class C>
__global__ void __launch_bounds__(256, 3) gh_cache_evict(GH_CACHE_PARAMS, const gh_u64* rows,
                               const gh_u64* given, const char* in_values, gh_u64 value_stride,
                               gh_u64 has_values, gh_u64 n, gh_u64 policy, gh_u64 step,
                               gh_u64 epoch, gh_u64 move_below, signed char* status,
                               gh_i64* index, gh_u64* ev_keys, char* ev_values,
                               gh_u64* ev_scores, gh_u64* evicted, gh_u64 ev_capacity,
                               gh_u64* replaced) {
    constexpr bool HOLD = C::VALUE_BYTES <= 32;
    typedef GhHeldValue<C::VALUE_BYTES> Held;
    // Wider rows are copied by the whole warp (gh_warp_copy, as gh_cache_write copies them)
    // while the batch's slots are locked, and the slots published after; narrow ones where
    // they are decided.
    constexpr bool WARP_COPY = !HOLD;
    const auto copy = [](char* dst, const char* src, const char*& noted_src, char*& noted_dst) {
        gh_copy_or_note<C::VALUE_BYTES, WARP_COPY>(dst, src, noted_src, noted_dst);
    };
    const C t = GH_CACHE_REF(C);
    const int lane = threadIdx.x & 31;
    const bool keeps = ev_keys != nullptr;
    // one answer a warp: its lanes call gh_cache_movable together
    const bool moves = __shfl_sync(
        0xffffffffu, lane == 0 && static_cast<gh_u64>(__ldcg(t.counts)) < move_below, 0);
    // A move puts a new entry, of any score, in a slot of its row's bucket without comparing
    // scores, so a batch-mate sharing that bucket would decide on the table as it was: while
    // entries may move, the warp serves one row at a time, as the CPU twin does. An eviction
    // needs no such care: the entry it puts in scores at least the lowest that the
    // batch-mates saw, and a shared victim is caught by the lock's re-check. (Under lfu a new
    // entry starts at its increment, which may be below that: a batch-mate sharing one of its
    // buckets may then evict its own victim where the CPU twin, row by row, would take the new
    // entry. Which entry goes differs; nothing is lost or reported wrongly.)
    const gh_u32 batch_rows = moves ? 1 : GH_EVICT_BATCH;
    for (gh_u64 base = gh_row() - lane; base < n; base += gh_stride()) {
        const gh_u64 r = base + lane;
        const bool evicts = r < n && status[r] == GH_TO_EVICT;
        gh_u32 waiting = __ballot_sync(0xffffffffu, evicts);
        if (waiting == 0) continue;
        gh_u64 key = 0, score = 0, admission = 0;
        gh_u32 digest = 0;
        GhHome home = {0, 0, 0, 0, 0};
        const char* row = nullptr;
        if (evicts) {
            key = rows[r];
            home = gh_home(t, key);
            digest = gh_digest(home.hash);
            score = gh_new_score(static_cast<int>(policy), 0, false, given != nullptr,
                                 given == nullptr ? 0 : given[r], step, epoch);
            admission = gh_admission_score(static_cast<int>(policy), score);
            row = has_values ? in_values + r * value_stride * C::VALUE_BYTES : nullptr;
        }
        bool held_out = false;  // HOLD: this lane evicted an entry it keeps until the end
        gh_u64 out_key = 0, out_score = 0;
        Held out_value;
        while (waiting != 0) {
            // Up to GH_EVICT_BATCH waiting rows at once: the warp finds each one's candidate
            // in turn (whole-warp reads), then their leaders lock and write together, so the
            // round trips of their chains overlap instead of following one another.
            gh_u32 batch = 0;
            gh_i64 from = -1, victim = -1;
            gh_u64 moving = 0, to = 0, lowest = 0;
#pragma unroll 1
            for (gh_u32 left = waiting, k = 0; left != 0 && k < batch_rows;
                 left &= left - 1, ++k) {
                const int leader = __ffs(left) - 1;
                batch |= 1u << leader;
                const gh_u64 b1 = __shfl_sync(0xffffffffu, home.b1, leader);
                const gh_u64 b2 = __shfl_sync(0xffffffffu, home.b2, leader);
                gh_u64 its_moving = 0, its_to = 0, its_lowest = 0;
                gh_i64 its_victim = -1;
                const gh_i64 its_from = moves ? gh_cache_movable(
                    t, b1, b2, __shfl_sync(0xffffffffu, digest, leader), &its_moving,
                    &its_to) : -1;
                if (its_from < 0) gh_cache_lowest(t, b1, b2, &its_victim, &its_lowest);
                if (lane == leader) {
                    from = its_from;
                    moving = its_moving;
                    to = its_to;
                    victim = its_victim;
                    lowest = its_lowest;
                }
            }
            int outcome = -1;
            gh_i64 claimed = -1;  // the slot this lane fills, published after the copies
            const char* out_src = nullptr;  // WARP_COPY: the evicted value out, then the row in
            char* out_dst = nullptr;
            const char* in_src = nullptr;
            char* in_dst = nullptr;
            if ((batch >> lane) & 1) {
                if (from >= 0) {
                    if (gh_cache_move(t, from, moving, to)) {
                        claimed = from;
                        outcome = GH_INSERTED;
                    }
                } else {
                    gh_u64 old_key = 0, old_score = 0;
                    outcome = gh_cache_try_evict(t, victim, lowest, admission, &old_key,
                                                 &old_score, HOLD && keeps, out_value);
                    if (outcome == GH_REFUSED) {
                        status[r] = GH_REFUSED;
                    } else if (outcome == GH_INSERTED_EVICTING) {
                        claimed = victim;
                        if (HOLD) {
                            held_out = keeps;
                            out_key = old_key;
                            out_score = old_score;
                        } else if (keeps) {  // copied out before the slot is rewritten
                            const gh_u64 at =
                                atomicAdd(reinterpret_cast<unsigned long long*>(evicted), 1ULL);
                            if (at < ev_capacity) {
                                ev_keys[at] = old_key;
                                ev_scores[at] = old_score;
                                copy(ev_values + at * C::VALUE_BYTES, t.value(victim), out_src,
                                     out_dst);
                            }
                        }
                        replaced[r] = old_key;  // the index changes in gh_cache_index_settle
                    }
                }
                if (claimed >= 0 && row != nullptr) copy(t.value(claimed), row, in_src, in_dst);
            }
            if (WARP_COPY) {  // the whole warp, its lanes' slots still locked; the value out
                gh_warp_copy<C::VALUE_BYTES>(out_src, out_dst);  // before the row lands on it
                __syncwarp();
                gh_warp_copy<C::VALUE_BYTES>(in_src, in_dst);
                __syncwarp();  // every lane's stores ordered before each lane's publish
            }
            if (claimed >= 0 && outcome == GH_INSERTED) {
                gh_index_insert(t.index, t.index_buckets, home.hash, key, claimed);
                gh_cache_publish(t, claimed, key, digest, score);
                atomicAdd(reinterpret_cast<unsigned long long*>(t.counts), 1ULL);
                status[r] = GH_INSERTED;
                index[r] = claimed;
            } else if (claimed >= 0) {
                gh_cache_publish(t, claimed, key, digest, score);
                status[r] = GH_INSERTED_EVICTING;
                index[r] = claimed;
            }
            waiting &= ~__ballot_sync(0xffffffffu, outcome >= 0);
        }
        if (HOLD && keeps) {
            const gh_u32 out = __ballot_sync(0xffffffffu, held_out);
            if (out != 0) {
                const int first_lane = __ffs(out) - 1;
                gh_u64 first = 0;
                if (lane == first_lane) {
                    first = atomicAdd(reinterpret_cast<unsigned long long*>(evicted),
                                      static_cast<unsigned long long>(__popc(out)));
                }
                first = __shfl_sync(0xffffffffu, first, first_lane);
                const gh_u64 at = first + __popc(out & ((1u << lane) - 1));
                if (held_out && at < ev_capacity) {
                    ev_keys[at] = out_key;
                    ev_scores[at] = out_score;
                    out_value.store(ev_values + at * C::VALUE_BYTES);
                }
            }
        }
    }
}

// Slot of each row's key (-1 where absent), found through the index (cache_index.cuh), and
// found; with `out`, its value (where absent,
// `default_row` + r * default_stride rows); on rows with update[r] set, the score raised as a
// touch does. Rows with `only` given and only[r] clear are left alone. No key moves in this
// launch: read-only loads.
// COPY: whether `out` may be given; find_index's instance leaves the warp copy out, whose
// loads in flight cost registers (and occupancy) a lookup of slots alone does not need.
// (The bound of five blocks an SM was set for the digest walk's registers; through the index
// both instances use fewer registers than it allows, so it does not bind.)
// verify (find_index's instance only; the acting rows of a write just made, index holding
// their slots): rows with it set keep their slot while it still holds their key.
template <class C, bool COPY>
__global__ void __launch_bounds__(256, 5)
gh_cache_lookup(GH_CACHE_PARAMS, const gh_u64* rows, gh_u64 n, const gh_u8* only,
                const gh_u8* update, gh_u64 policy, gh_u64 step, gh_u64 epoch,
                const char* default_row, gh_u64 default_stride, char* out, gh_i64* index,
                gh_u8* found, const gh_u8* verify) {
    const C t = GH_CACHE_REF(C);
    const int lane = threadIdx.x & 31;
    // lanes take consecutive rows and leave the loop together, so the warp can copy its rows'
    // values together (gh_warp_copy)
    for (gh_u64 base = gh_row() - lane; base < n; base += gh_stride()) {
        const gh_u64 r = base + lane;
        bool mine = r < n && (only == nullptr || only[r]);
        bool keeps_found = false;
        if (!COPY && mine && verify != nullptr && verify[r]) {
            // a row that acted in the write before: its slot stands unless a later row of that
            // write moved the entry to its other bucket or evicted it; then it is looked up
            // again (its found flag says what the write found, and stays)
            const gh_i64 at = index[r];
            mine = at >= 0 && __ldg(t.keys + at) != rows[r];
            keeps_found = true;
        }
        const char* src = nullptr;  // the value this row returns
        if (mine) {
            const gh_u64 key = rows[r];
            const gh_i64 slot = key >= GH_LOCKED
                ? -1 : gh_index_find<false>(t.index, t.index_buckets, gh_home(t, key).hash, key);
            index[r] = slot;
            if (!keeps_found) found[r] = slot >= 0;
            src = slot >= 0 ? t.value(slot) : default_row + r * default_stride * C::VALUE_BYTES;
            if (slot >= 0 && update != nullptr && update[r]) {
                const int rule = static_cast<int>(policy);
                const gh_u64 old = gh_reads_score(rule) ? t.scores[slot] : 0;
                t.scores[slot] = gh_new_score(rule, old, true, false, 0, step, epoch);
            }
        }
        if (COPY && out != nullptr) {
            gh_warp_copy<C::VALUE_BYTES>(src, out + r * C::VALUE_BYTES);
        }
    }
}

// Frees each row's key's slot; erased[r] on the row that did.
template <class C>
__global__ void gh_cache_erase(GH_CACHE_PARAMS, const gh_u64* rows, gh_u64 n, gh_u8* erased) {
    const C t = GH_CACHE_REF(C);
    gh_i64 gone = 0;
    for (gh_u64 r = gh_row(); r < n; r += gh_stride()) {
        const gh_u64 key = rows[r];
        const GhHome home = gh_home(t, key);
        const gh_i64 slot =
            key >= GH_LOCKED ? -1 : gh_cache_lock(t, home, key, gh_digest(home.hash));
        erased[r] = slot >= 0;
        if (slot < 0) continue;
        gh_index_erase(t.index, t.index_buckets, home.hash, key);
        t.scores[slot] = 0;
        t.digests[slot] = 0;
        if (t.pins != nullptr) t.pins[slot] = 0;  // an erased entry is unlocked
        gh_store_release(t.keys + slot, ~0ULL);
        ++gone;
    }
    gh_block_count(&t.counts[0], -gone, nullptr, 0);
}

// Value rows by slot, whichever memory holds them: out row r = the row of slot index[r]
// (gather), or the row of slot index[r] = in row r (scatter); rows with index -1 are skipped.
// The warp copies its rows together (gh_warp_copy), so rows in host memory move in whole
// pieces over the link. The rows of one scatter name distinct slots.
template <class C>
__global__ void gh_cache_gather(GH_CACHE_PARAMS, const gh_i64* index, gh_u64 n, char* out) {
    const C t = GH_CACHE_REF(C);
    const int lane = threadIdx.x & 31;
    for (gh_u64 base = gh_row() - lane; base < n; base += gh_stride()) {
        const gh_u64 r = base + lane;
        const gh_i64 slot = r < n ? index[r] : -1;
        gh_warp_copy<C::VALUE_BYTES>(slot >= 0 ? t.value(slot) : nullptr,
                                     out + r * C::VALUE_BYTES);
    }
}

template <class C>
__global__ void gh_cache_scatter(GH_CACHE_PARAMS, const gh_i64* index, gh_u64 n,
                                 const char* rows) {
    const C t = GH_CACHE_REF(C);
    const int lane = threadIdx.x & 31;
    for (gh_u64 base = gh_row() - lane; base < n; base += gh_stride()) {
        const gh_u64 r = base + lane;
        const gh_i64 slot = r < n ? index[r] : -1;
        gh_warp_copy<C::VALUE_BYTES>(slot >= 0 ? rows + r * C::VALUE_BYTES : nullptr,
                                     slot >= 0 ? t.value(slot) : nullptr);
    }
}

// Makes the index (cache_index.cuh) of the key words, from an index of free entries (key
// words EMPTY, second words 0): the CUDA engine's first use of a cache, and after key words
// were changed by torch (erase_if, clear).
template <class C>
__global__ void gh_cache_index_build(GH_CACHE_PARAMS) {
    const C t = GH_CACHE_REF(C);
    const gh_u64 slots = t.num_buckets * C::BUCKET;
    for (gh_u64 s = gh_row(); s < slots; s += gh_stride()) {
        const gh_u64 key = __ldg(t.keys + s);
        if (key < GH_LOCKED) {
            gh_index_insert(t.index, t.index_buckets, gh_home(t, key).hash, key, s);
        }
    }
}

// The third launch of a write that evicts: the index changes of the rows gh_cache_evict
// marked INSERTED_EVICTING, made after every slot of the write is settled. The evicted key
// (replaced[r]) loses its entry, if it has one (an entry this write evicted may have been
// given no entry yet); the row's key gets one at the slot it holds now: index[r] unless a
// later row of the write moved the entry (then found by the digest walk), none if a later row
// evicted it. No slot changes in this launch (read-only loads of the slots), and its index
// changes are for distinct keys: a removed key was evicted, so is in no slot now, and a key
// is added only by its own row, and only if it is in a slot.
template <class C>
__global__ void gh_cache_index_settle(GH_CACHE_PARAMS, const gh_u64* rows, gh_u64 n,
                                      const signed char* status, const gh_i64* index,
                                      const gh_u64* replaced) {
    const C t = GH_CACHE_REF(C);
    for (gh_u64 r = gh_row(); r < n; r += gh_stride()) {
        if (status[r] != GH_INSERTED_EVICTING) continue;
        const gh_u64 old_key = replaced[r];
        gh_index_erase(t.index, t.index_buckets, gh_home(t, old_key).hash, old_key);
        const gh_u64 key = rows[r];
        const GhHome home = gh_home(t, key);
        gh_i64 slot = index[r];
        if (__ldg(t.keys + slot) != key) {
            slot = gh_cache_locate<C, false>(t, home, key, gh_digest(home.hash));
        }
        if (slot >= 0) gh_index_insert(t.index, t.index_buckets, home.hash, key, slot);
    }
}
