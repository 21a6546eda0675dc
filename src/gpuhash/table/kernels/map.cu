// The HashMap / HashSet kernels, templated on the table type (open_addressing.cuh: GhTable) and
// instantiated by name through NVRTC (table/cuda/engine.py: kernel_names). One thread per row,
// each a thin caller of the core.
//
// Counting: a plain insert adds its counts once per block (per-warp atomics on one counter
// serialise every insert of the launch on that counter). A deferred insert leaves them to the
// host, which adds the number of rows marked inserted after both launches: the displacing
// pass's rows take very different times, and a per-block count would end each block at a
// barrier waiting for its slowest row, which slowed default inserts at high load. The first,
// plain pass then corrects the host's used-slot count per block for claims that used no new
// bucket slot (out-of-band keys, reused erased slots); its rows take similar times, so that
// barrier should cost little (a per-warp atomic would avoid it; untried).
#include "apply.cuh"
#include "displacement.cuh"
#include "last_rows.cuh"
#include "launch_params.cuh"

constexpr gh_u8 GH_PENDING = 2;  // inserted[row] while the row waits for gh_insert_deferred

// Insert or assign rows whose `active` byte is set (all rows when active is null);
// inserted[row] says whether the row added a new key. With `defer` (only when the active keys
// are distinct), a new key whose first bucket is full is left for gh_insert_deferred.
// `row_locks` (rows layout, duplicates="any") makes concurrent writes of one key's row whole.
template <class T>
__global__ void gh_insert(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                          const gh_u8* active, gh_u8* inserted, gh_u64 n, gh_u64 defer,
                          gh_u32* row_locks) {
    const T t = GH_REF(T);
    gh_i64 live = 0, used = 0;  // every claim adds a live entry; bucket claims use a slot
    gh_i64 unused = 0;  // defer: claims the host will count as using a slot that do not
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        gh_u8 state = 0;
        if (active == nullptr || active[row]) {
            const gh_u64 key = gh_key_at<T>(keys, row);
            const char* src = in_values + row * T::VALUE_BYTES;
            const GhSlot s = defer ? gh_insert_one<T, GH_CLAIM_B1>(t, key, src, row_locks)
                                   : gh_insert_one<T, GH_CLAIM>(t, key, src, row_locks);
            if (s.slot == GH_DEFERRED) {
                state = GH_PENDING;
            } else if (s.slot < 0) {
                gh_report_unplaced(t);
            } else {
                state = s.claimed;
                live += s.claimed;
                used += s.claimed && key < T::TOMB && !s.reused;
                unused += s.claimed && (key >= T::TOMB || s.reused);
            }
        }
        inserted[row] = state;
    }
    // defer is grid-uniform: either every block counts its claims, or only the corrections to
    // the host's count (out-of-band claims and reused erased slots use no new bucket slot)
    if (!defer) gh_block_count(&t.counts[0], live, &t.counts[1], used);
    else gh_block_count(&t.counts[1], -unused, nullptr, 0);
}

template <class T>
__device__ __forceinline__ GhCarried<T> gh_carry(gh_u64 key, const char* src) {
    GhCarried<T> c;
    c.key = key;
    c.vbits = (T::LAYOUT != GH_ROWS) ? gh_value_bits<T::VALUE_BYTES>(src) : 0;
    if (T::LAYOUT == GH_ROWS) gh_copy_value<T::VALUE_BYTES>(c.row, src);
    return c;
}

// Second pass of a deferred insert: places the rows gh_insert left pending by displacement.
template <class T>
__global__ void gh_insert_deferred(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                                   gh_u8* inserted, gh_u64 n, gh_u32* locks, gh_u64* stash,
                                   char* stash_rows, gh_u64 stash_capacity) {
    const T t = GH_REF(T);
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        if (inserted[row] != GH_PENDING) continue;
        const GhCarried<T> c = gh_carry<T>(gh_key_at<T>(keys, row), in_values + row * T::VALUE_BYTES);
        inserted[row] =
            gh_place_displacing(t, locks, c, stash, stash_rows, stash_capacity, false) != 1;
    }
}

// find / find_index / contains: each output is optional (null to skip).
template <class T>
__global__ void gh_lookup(GH_TABLE_PARAMS, const char* keys, gh_u64 n, char* out_values,
                          const char* default_value, gh_i64* out_index, gh_u8* out_found) {
    const T t = GH_REF(T);
    // A default of up to 8 bytes is read before the probe, so its load overlaps the bucket's
    // instead of adding a round trip to every miss.
    const bool wanted = out_values != nullptr && T::LAYOUT != GH_ROWS;
    const gh_u64 default_bits = wanted ? gh_value_bits<T::VALUE_BYTES>(default_value) : 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const GhSlot s = gh_probe<T, GH_SEARCH, false>(t, gh_key_at<T>(keys, row), 0);
        if (out_values != nullptr) {
            char* out = out_values + row * T::VALUE_BYTES;
            if (s.slot < 0 && T::LAYOUT != GH_ROWS) {
                gh_store_value_bits<T::VALUE_BYTES>(out, default_bits);
            } else if (s.slot < 0) {
                gh_copy_value<T::VALUE_BYTES>(out, default_value);
            } else if (T::LAYOUT == GH_ROWS) {
                gh_copy_value<T::VALUE_BYTES>(out, t.value(s.slot));
            } else {
                gh_store_value_bits<T::VALUE_BYTES>(out, s.value);  // loaded by the probe
            }
        }
        if (out_index != nullptr) out_index[row] = s.slot;
        if (out_found != nullptr) out_found[row] = s.slot >= 0;
    }
}

template <class T>
__global__ void gh_erase(GH_TABLE_PARAMS, const char* keys, gh_u64 n, gh_u8* erased) {
    const T t = GH_REF(T);
    gh_i64 gone = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const bool erased_here = gh_erase_one(t, gh_key_at<T>(keys, row));
        erased[row] = erased_here;
        gone += erased_here;
    }
    gh_block_count(&t.counts[0], -gone, nullptr, 0);
}

// Inserts every live entry of a source table (same type) into this one: growth and
// compaction. Source keys are distinct, so entries whose first bucket is full are marked in
// `pending` (one byte per source slot) and placed by gh_rehash_deferred.
template <class T>
__global__ void gh_rehash(GH_TABLE_PARAMS, const gh_u64* source_slots, const char* source_values,
                          gh_u64 source_num_slots, gh_u8* pending) {
    const T t = GH_REF(T);
    gh_i64 live = 0, used = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots + 2; i += gh_stride()) {
        gh_u64 key;
        bool deferred = false;
        if (gh_live_source<T>(source_slots, source_num_slots, i, &key)) {
            const char* src = gh_source_value<T>(source_slots, source_values, i);
            const GhSlot s = gh_insert_one<T, GH_CLAIM_B1>(t, key, src, nullptr);
            deferred = s.slot == GH_DEFERRED;
            if (s.slot == -1) gh_report_unplaced(t);
            live += s.claimed;
            used += s.claimed && key < T::TOMB && !s.reused;  // (a fresh table: never reused)
        }
        pending[i] = deferred;
    }
    gh_block_count(&t.counts[0], live, &t.counts[1], used);
}

template <class T>
__global__ void gh_rehash_deferred(GH_TABLE_PARAMS, const gh_u64* source_slots,
                                   const char* source_values, gh_u64 source_num_slots,
                                   const gh_u8* pending, gh_u32* locks, gh_u64* stash,
                                   char* stash_rows, gh_u64 stash_capacity) {
    const T t = GH_REF(T);
    gh_i64 placed = 0;
    for (gh_u64 i = gh_row(); i < source_num_slots + 2; i += gh_stride()) {
        if (!pending[i]) continue;
        const GhCarried<T> c = gh_carry<T>(source_slots[i * T::WORDS] & T::KEY_MASK,
                                           gh_source_value<T>(source_slots, source_values, i));
        placed += gh_place_displacing(t, locks, c, stash, stash_rows, stash_capacity, true) != 1;
    }
    gh_block_count(&t.counts[0], placed, &t.counts[1], placed);
}

// Insert-or-apply (apply.cuh says why there are two schedules). phase 0: one launch, for
// tables that publish key and value in one CAS. phase 1: claim new keys with the identity and
// record each row's slot in row_slots; phase 2: apply every row at its recorded slot. Phase 0
// records the slots too where row_slots is given (the caller wants them: no find after).
template <class T, class V, int OP>
__global__ void gh_apply(GH_TABLE_PARAMS, const char* keys, const char* in_values,
                         gh_u8* inserted, gh_u64 n, gh_i64* row_slots, gh_u64 phase) {
    const T t = GH_REF(T);
    gh_i64 live = 0, used = 0;
    for (gh_u64 row = gh_row(); row < n; row += gh_stride()) {
        const char* src = in_values + row * T::VALUE_BYTES;
        if (phase == 2) {
            if (row_slots[row] >= 0) gh_apply_row<T, V, OP>(t, row_slots[row], src);
            continue;
        }
        const gh_u64 key = gh_key_at<T>(keys, row);
        alignas(16) char identity[T::VALUE_BYTES];
        if (phase == 1) gh_identity_row<T, V, OP>(identity);
        const char* first = (phase == 1) ? identity : src;
        const gh_u64 vbits = (T::LAYOUT != GH_ROWS) ? gh_value_bits<T::VALUE_BYTES>(first) : 0;
        const GhSlot s = gh_probe<T, GH_CLAIM, true>(t, key, vbits);
        if (s.slot < 0) {
            gh_report_unplaced(t);
        } else if (phase == 0 && !s.claimed) {
            gh_apply_row<T, V, OP>(t, s.slot, src);
        } else if (phase == 1 && s.claimed && T::LAYOUT == GH_ROWS) {
            gh_copy_value<T::VALUE_BYTES>(t.value(s.slot), identity);
        }
        if (phase == 1 || row_slots != nullptr) row_slots[row] = s.slot;
        inserted[row] = s.claimed;
        live += s.claimed;
        used += s.claimed && key < T::TOMB;
    }
    if (phase != 2) gh_block_count(&t.counts[0], live, &t.counts[1], used);
}
