"""The numbers the kernels and the Python engines must agree on, in one place.

Python code imports them from here; kernels get them as a generated header: every kernel file
includes ``common.cuh``, which includes ``gh_constants.cuh``, a file that exists only as the
text of :func:`kernel_header` (the compiler's include step inlines it, so the compile cache's
key covers it). Changing a number here changes both engines at once.

Example:
    >>> from gpuhash._common.constants import RANDOM_STEPS, kernel_header
    >>> f"unsigned long long GH_RANDOM_STEPS = {RANDOM_STEPS}ULL;" in kernel_header()
    True
"""

from __future__ import annotations

# --- the hash ---------------------------------------------------------------------------------
# MurmurHash3's 64-bit finalizer: x ^= x >> 33; x *= MIX_1; x ^= x >> 33; x *= MIX_2; x ^= x >> 33
MIX_SHIFT = 33
MIX_1 = 0xFF51AFD7ED558CCD
MIX_2 = 0xC4CEB9FE1A85EC53
# 2**64 / the golden ratio, odd: a salt that separates hashes of one key taken for different
# purposes (the partition hash, a displacement's random walk), and the multiplier that spreads
# key codes over the top bits that pick a part (the partitioned and streamed joins)
GOLDEN = 0x9E3779B97F4A7C15
DEFAULT_SEED = 0x2545F4914F6CDD1D  # a table's hash seed unless one is given
# Which bits pick what. A table's hash mix64(key ^ seed) spends all 64 bits: the first bucket
# takes the low 32, the second bucket the high 32, the bucket filter the low 3. The radix
# partition takes the top bits of mix64(key ^ seed ^ GOLDEN). A sharded table's owner rank
# takes the high 32 bits of mix64(key ^ SHARD_SALT), mapped onto the ranks by a multiply-high
# (distributed/routing.py: owner_of). With no bit of the table's hash left over, the shard
# hash is a second hash under its own salt: the keys one rank owns are a random subset, so
# they spread over that rank's buckets and partitions as evenly as all keys would.
SHARD_SALT = 0xB5026F5AA96619E9
SHARD_BITS = 32  # the shard hash's bits that pick the owner: its high half


def as_int64(value: int) -> int:
    """A 64-bit pattern as the signed int torch and numba's int64 arithmetic take."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


# --- the table's probe sequence -----------------------------------------------------------------
# After its two buckets a key's sequence takes RANDOM_STEPS buckets drawn from its hash, then
# walks linearly (open_addressing.cuh: gh_next_bucket; cpu/probe.py: next_bucket)
RANDOM_STEPS = 64
LAYOUT_CODES = {"packed": 0, "pair": 1, "rows": 2}  # slot layouts (table/format.py)
# displaced entries a CUDA table keeps for the host when a placement finds no slot
STASH_CAPACITY = 1024

# --- the cache ----------------------------------------------------------------------------------
POLICY_CODES = {"lru": 0, "lfu": 1, "epoch_lru": 2, "epoch_lfu": 3, "custom": 4}
WRITE_MODES = {"upsert": 0, "find_or_insert": 1, "assign": 2, "accumulate": 3}
# a row's status after a write; "to_evict" lives only inside one write (its second pass)
CACHE_STATUSES = {"inserted": 0, "assigned": 1, "inserted_evicting": 2, "refused": 3,
                  "skipped": 4, "superseded": 5, "to_evict": 6}
CACHE_LOCKED_KEY = (1 << 64) - 2  # a slot being rewritten (searches skip it)
INDEX_SLOT_BITS = 40              # an index entry's slot number (the cache's MAX_SLOTS: 2**33)
INDEX_ENTRIES = 4                 # entries an index bucket: 64 bytes, half a line

# --- joins --------------------------------------------------------------------------------------
RANK_CHUNK_WORDS = 2048  # words of a ranked array a block sums and ranks at once
JOIN_ITEMS = 8           # probe rows a thread takes per tile
JOIN_FLAGS = {"keep_unmatched": 1, "mark_build": 2, "hits_only": 4, "warp_reads": 8,
              "semi": 16, "anti": 32}
RADIX_THREADS = 256        # threads of every radix launch (and every other launch)
RADIX_PROBE_CHUNK = 8192   # probe rows a radix join block takes at most
RADIX_FLAGS = {"mark_build": 1, "hits_only": 2}
# by the key code's bytes (4 or 8): rows a partition block stages in shared memory, and the
# slots of a partition's shared-memory table (join/radix_format.py)
RADIX_TILE = {4: 8192, 8: 4096}
RADIX_SLOTS = {4: 4096, 8: 3072}


def _enum(name: str, codes: dict[str, int], prefix: str = "GH_") -> str:
    members = ", ".join(f"{prefix}{key.upper()} = {code}" for key, code in codes.items())
    return f"enum {name} {{ {members} }};"


def kernel_header() -> str:
    """The C++ text of ``gh_constants.cuh``: every number above the kernels use."""
    u64 = {"GH_MIX_SHIFT": MIX_SHIFT, "GH_MIX_1": MIX_1, "GH_MIX_2": MIX_2,
           "GH_GOLDEN": GOLDEN, "GH_RANDOM_STEPS": RANDOM_STEPS,
           "GH_SHARD_SALT": SHARD_SALT, "GH_SHARD_BITS": SHARD_BITS,
           "GH_CACHE_LOCKED": CACHE_LOCKED_KEY, "GH_INDEX_SLOT_BITS": INDEX_SLOT_BITS,
           "GH_RANK_CHUNK": RANK_CHUNK_WORDS, "GH_RADIX_PROBE_CHUNK": RADIX_PROBE_CHUNK,
           **{f"GH_JOIN_{flag.upper()}": bit for flag, bit in JOIN_FLAGS.items()},
           **{f"GH_RADIX_{flag.upper()}": bit for flag, bit in RADIX_FLAGS.items()}}
    ints = {"GH_INDEX_ENTRIES": INDEX_ENTRIES, "GH_JOIN_ITEMS": JOIN_ITEMS,
            "GH_RADIX_THREADS": RADIX_THREADS,
            **{f"GH_RADIX_TILE_{width}": rows for width, rows in RADIX_TILE.items()},
            **{f"GH_RADIX_SLOTS_{width}": slots for width, slots in RADIX_SLOTS.items()},
            **{f"GH_{layout.upper()}": code for layout, code in LAYOUT_CODES.items()}}
    lines = ["// Generated from gpuhash/_common/constants.py: edit the numbers there.",
             "#pragma once"]
    # [[maybe_unused]]: a kernel file uses a few of them, and warnings are errors in CI
    lines += [f"[[maybe_unused]] constexpr unsigned long long {name} = {value}ULL;"
              for name, value in u64.items()]
    lines += [f"[[maybe_unused]] constexpr int {name} = {value};" for name, value in ints.items()]
    lines += [_enum("GhPolicy", POLICY_CODES), _enum("GhWriteMode", WRITE_MODES),
              _enum("GhCacheStatus", CACHE_STATUSES)]
    return "\n".join(lines) + "\n"
