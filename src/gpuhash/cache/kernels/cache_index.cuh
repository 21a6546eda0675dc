// The CUDA engine's exact index from key to slot beside a cache's slots. A search through it
// reads one 64-byte bucket a key, where the digest walk reads b1's digest bytes, b2's for
// every miss and for keys placed in b2, and a key word for every false digest match, whose
// number grows with load: finds through the index are faster at every load, and most at full
// load.
// Finds and writes search through it; a write's absent keys read their buckets' digests for
// the free slots a claim needs; erase keeps the digest walk. Every change of a slot's key
// word changes the index with it, so it stays exact: a claim adds the key's entry (write
// launch), a move repoints the moved key's entry and adds the new key's (evict launch), an
// eviction's two changes wait for gh_cache_index_settle (the launch after), erase removes.
//
// Layout: index_buckets buckets of 4 entries, 16 bytes an entry (two u64 words: the key,
// EMPTY where free; then the slot in bits 0..39), half a line a bucket, 2 entries a slot; bits
// 40..63 of a bucket's first entry's second word count the keys stored past the bucket (a
// key goes to the next bucket, wrapping, when its own is full). A search reads its key's
// bucket and stops there unless that count is nonzero (the index is at most half full). Four
// entries a bucket, not eight or two: eight (128 bytes) read twice the bytes a find for no
// fewer buckets, and two (32 bytes) let more keys pass their bucket, each then reading a
// second; finds and writes ran fastest at four. A bucket is read by its key's thread alone:
// four lanes reading it together, an entry each, made finds slower, although random 64-byte
// reads alone run faster shared by four lanes than one thread a read (the shuffles cost more
// than the loads save). A second word is changed by atomics alone (AND, OR, XOR, ADD), so a
// slot's bits and a count's never overwrite each other.
//
// Concurrency: lookups run when no write does (the host orders them) and read through the
// read-only path. Within a launch, index changes are for distinct keys: in the write and
// evict launches each change is made by the owner of the key's slot (the host keeps one row
// per key; an evictor or mover holds the slot locked); in the settle launch only the rows
// that evicted act, each removing the key it evicted and adding its own key if the write
// left it in the cache, and a key the write evicted is in no slot when the launch runs, so
// no row adds it. An entry is claimed by a CAS of its key word from EMPTY, and only its
// claimer, or the owner of its key's slot, touches it after; a writer changes a key's entry
// before it publishes the slot (gh_cache_publish's release store), so a later owner of that
// slot, who acquires it, finds the entry.
// The CPU engine keeps no index: its searches walk the digests (cache/cpu/loops.py).
#pragma once
#include "common.cuh"

constexpr gh_u64 GH_INDEX_SLOT_MASK = (1ULL << GH_INDEX_SLOT_BITS) - 1;

// Takes an entry's key word from `expected` to `desired` with acquire order (what the thread
// that freed the entry wrote before its release is visible after a success).
__device__ __forceinline__ gh_u64 gh_index_cas_acquire(gh_u64* p, gh_u64 expected,
                                                       gh_u64 desired) {
    gh_u64 prev;
    asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(prev) : "l"(p), "l"(expected), "l"(desired) : "memory");
    return prev;
}

// The index bucket of a key's hash (gh_home's): bits that choose neither b1, b2 nor the
// digest (the digest is the top byte of the same mix).
__device__ __forceinline__ gh_u64 gh_index_home(gh_u64 hash, gh_u64 index_buckets) {
    return gh_range(gh_mix64(hash) & 0xffffffffULL, index_buckets);
}

__device__ __forceinline__ gh_u64 gh_index_next(gh_u64 bucket, gh_u64 index_buckets) {
    return bucket + 1 == index_buckets ? 0 : bucket + 1;
}

// The count word of a bucket (its first entry's second word).
__device__ __forceinline__ gh_u64* gh_index_count_word(gh_u64* index, gh_u64 bucket) {
    return index + bucket * 2 * GH_INDEX_ENTRIES + 1;
}

// A bucket in one go (its 16-byte loads in flight together): through the read-only
// path for lookups, or from L2 (COHERENT) for writers, whose launch changes other entries.
template <bool COHERENT>
__device__ __forceinline__ void gh_index_read(const gh_u64* index, gh_u64 bucket,
                                              ulonglong2 (&q)[GH_INDEX_ENTRIES]) {
    const ulonglong2* entries =
        reinterpret_cast<const ulonglong2*>(index + bucket * 2 * GH_INDEX_ENTRIES);
#pragma unroll
    for (int e = 0; e < GH_INDEX_ENTRIES; ++e) {
        q[e] = COHERENT ? __ldcg(entries + e) : __ldg(entries + e);
    }
}

// The one walk of the index: from key's home bucket, a bucket at a time, until its entry or
// a bucket no key passed. The word offset of the entry's key word (its second word in
// *second), or -1. COHERENT: for writers, whose launch changes other entries (L2 reads).
template <bool COHERENT>
__device__ __forceinline__ gh_i64 gh_index_walk(const gh_u64* index, gh_u64 index_buckets,
                                                gh_u64 hash, gh_u64 key, gh_u64* second) {
    gh_u64 bucket = gh_index_home(hash, index_buckets);
    for (gh_u64 walked = 0; walked < index_buckets; ++walked) {
        ulonglong2 q[GH_INDEX_ENTRIES];
        gh_index_read<COHERENT>(index, bucket, q);
#pragma unroll
        for (int e = 0; e < GH_INDEX_ENTRIES; ++e) {
            if (q[e].x == key) {
                *second = q[e].y;
                return static_cast<gh_i64>((bucket * GH_INDEX_ENTRIES + e) * 2);
            }
        }
        if ((q[0].y >> GH_INDEX_SLOT_BITS) == 0) return -1;
        bucket = gh_index_next(bucket, index_buckets);
    }
    return -1;
}

// The slot of key, -1 if absent. COHERENT: for a write launch, whose rows hold distinct keys
// and add entries beside it (a key present at the launch's start keeps its entry and slot
// until its evict launch; an absent one is added by its own row alone).
template <bool COHERENT>
__device__ __forceinline__ gh_i64 gh_index_find(const gh_u64* index, gh_u64 index_buckets,
                                                gh_u64 hash, gh_u64 key) {
    gh_u64 second = 0;
    const gh_i64 at = gh_index_walk<COHERENT>(index, index_buckets, hash, key, &second);
    return at < 0 ? -1 : static_cast<gh_i64>(second & GH_INDEX_SLOT_MASK);
}

// Adds key (absent from the index) at slot: the first free entry a CAS takes, from its home
// bucket on; every full bucket passed counts it. (The index has two entries a slot, so a free
// one is always there; the walk is bounded all the same.) A free entry's slot bits are zero:
// the CAS, with acquire order, sees the clear that gh_index_erase made before it released the
// key word (an entry may be freed and taken again in one launch: the settle launch).
__device__ __forceinline__ void gh_index_insert(gh_u64* index, gh_u64 index_buckets,
                                                gh_u64 hash, gh_u64 key, gh_u64 slot) {
    gh_u64 bucket = gh_index_home(hash, index_buckets);
    for (gh_u64 walked = 0; walked < index_buckets;) {
        gh_u64* words = index + bucket * 2 * GH_INDEX_ENTRIES;
        ulonglong2 q[GH_INDEX_ENTRIES];
        gh_index_read<true>(index, bucket, q);
        bool raced = false;  // a free entry seen was taken by another row: read the bucket again
#pragma unroll
        for (int e = 0; e < GH_INDEX_ENTRIES; ++e) {
            if (q[e].x != ~0ULL) continue;
            if (gh_index_cas_acquire(words + 2 * e, ~0ULL, key) == ~0ULL) {
                atomicOr(words + 2 * e + 1, slot);
                return;
            }
            raced = true;
        }
        if (raced) continue;
        atomicAdd(gh_index_count_word(index, bucket), 1ULL << GH_INDEX_SLOT_BITS);
        bucket = gh_index_next(bucket, index_buckets);
        ++walked;
    }
}

// The entry of key, for a writer: the address of its key word and, in *found_in, the bucket
// holding it; null if the key has none.
__device__ __forceinline__ gh_u64* gh_index_entry(gh_u64* index, gh_u64 index_buckets,
                                                  gh_u64 hash, gh_u64 key, gh_u64* found_in) {
    gh_u64 second = 0;
    const gh_i64 at = gh_index_walk<true>(index, index_buckets, hash, key, &second);
    if (at < 0) return nullptr;
    *found_in = static_cast<gh_u64>(at) / (2 * GH_INDEX_ENTRIES);
    return index + at;
}

// Removes key's entry, if it has one: the buckets its insert passed uncount it, its slot bits
// are cleared, and then its key word is freed with release order, so the next claimer of the
// entry finds the bits clear (relaxed, the clear could land after that claimer's OR).
__device__ __forceinline__ void gh_index_erase(gh_u64* index, gh_u64 index_buckets, gh_u64 hash,
                                               gh_u64 key) {
    gh_u64 found_in = 0;
    gh_u64* entry = gh_index_entry(index, index_buckets, hash, key, &found_in);
    if (entry == nullptr) return;
    for (gh_u64 b = gh_index_home(hash, index_buckets); b != found_in;
         b = gh_index_next(b, index_buckets)) {
        atomicAdd(gh_index_count_word(index, b), ~0ULL << GH_INDEX_SLOT_BITS);  // -1 count
    }
    atomicAnd(entry + 1, ~GH_INDEX_SLOT_MASK);
    asm volatile("atom.release.gpu.global.exch.b64 _, [%0], %1;"
                 :: "l"(entry), "l"(~0ULL) : "memory");
}

// Points key's entry (present in the index) from slot `from` to slot `to`.
__device__ __forceinline__ void gh_index_repoint(gh_u64* index, gh_u64 index_buckets,
                                                 gh_u64 hash, gh_u64 key, gh_u64 from,
                                                 gh_u64 to) {
    gh_u64 found_in = 0;
    gh_u64* entry = gh_index_entry(index, index_buckets, hash, key, &found_in);
    if (entry != nullptr) atomicXor(entry + 1, from ^ to);
}
