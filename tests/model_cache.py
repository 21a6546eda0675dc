"""A Python model of CacheMap and a Hypothesis state machine that drives both side by side.

The model keeps each bucket as a list of slots and applies a batch's acting rows in the
engines' two passes by the rules of _cache_format.py: in row order, each row finds its key or
takes the first free slot of its emptier bucket; then, in row order, the rows whose two
buckets were full move an entry to its other bucket while the cache is below its relocation
limit, else evict the lowest score of both buckets (earliest slot on a tie). On the CPU
engine, whose rows run in that order, the machine compares the cache's bytes slot by slot; on
the GPU, whose rows race for slots, it compares statuses and contents as a dict, on a cache
too large to evict.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from cache_checks import check_index, mix64
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gpuhash as gh
from gpuhash.cache.format import relocation_limit
from gpuhash.table.format import DEFAULT_SEED

M64, M32 = 2**64 - 1, 2**32 - 1
RESERVED = (M64, M64 - 1)
INSERTED, ASSIGNED, EVICTING, REFUSED, SKIPPED, SUPERSEDED, TO_EVICT = range(7)


class CacheModel:
    """Slots per bucket, each None or [key, score, value]."""

    def __init__(self, *, num_buckets: int, width: int, policy: str, seed: int = DEFAULT_SEED):
        self.nb, self.width, self.policy, self.seed = num_buckets, width, policy, seed
        self.slots: list[list | None] = [None] * (num_buckets * width)
        self.step, self.epoch = 0, 0
        self.moves = 0  # entries moved to their other bucket to make room
        self.pinned: set[int] = set()  # slots of locked entries: they neither move nor go

    def buckets(self, key: int) -> tuple[int, int]:
        h = mix64(key ^ self.seed)
        return ((h & M32) * self.nb) >> 32, ((h >> 32) * self.nb) >> 32

    def digest(self, key: int) -> int:
        return mix64(mix64(key ^ self.seed)) >> 56 or 1

    def candidates(self, key: int) -> list[int]:
        b1, b2 = self.buckets(key)
        chosen = [b1] if b1 == b2 else [b1, b2]
        return [b * self.width + lane for b in chosen for lane in range(self.width)]

    def slot_of(self, key: int) -> int:
        for s in self.candidates(key):
            if self.slots[s] is not None and self.slots[s][0] == key:
                return s
        return -1

    def score(self, old: int, present: bool, given: int | None) -> int:
        """HierarchicalKV's score rules: ``given`` (None: the caller gave none) is the score
        under lru, epoch_lru and custom, the count to add under lfu and epoch_lfu."""
        count = 1 if given is None else given
        if self.policy in ("lru", "epoch_lru") and given is not None:
            return given
        if self.policy == "lru":
            return self.step
        if self.policy == "lfu":
            return count if not present else min(old + count, M64)
        if self.policy == "epoch_lru":
            return (self.epoch << 32) | (self.step & M32)
        if self.policy == "epoch_lfu":
            low = min((old & M32) + (count & M32), M32) if present else count & M32
            return (self.epoch << 32) | low
        return given

    def admission(self, score: int) -> int:
        """What a new key's score competes with in full buckets: lfu admits every new key."""
        return M64 if self.policy == "lfu" else score

    def _place(self, key, score, value, *, may_evict: bool) -> tuple[int, int, list | None]:
        b1, b2 = self.buckets(key)

        def free(b):
            return [b * self.width + i for i in range(self.width)
                    if self.slots[b * self.width + i] is None]
        f1, f2 = free(b1), (free(b2) if b2 != b1 else [])
        if f1 or f2:
            slot = (f2 if len(f2) > len(f1) else f1)[0]
            self.slots[slot] = [key, score, value]
            return slot, INSERTED, None
        if not may_evict:  # both buckets full: the write's second pass places it
            return -1, TO_EVICT, None
        if sum(e is not None for e in self.slots) < relocation_limit(len(self.slots)):
            # an entry of b1 or b2 moves to its other bucket: the candidate whose other bucket
            # has the most free slots, the earliest on a tie
            step = self.width // 16
            best, most = None, 0
            for b in ([b1] if b1 == b2 else [b1, b2]):
                for i in range(16):
                    slot = b * self.width + i * step + self.digest(key) % step
                    if slot in self.pinned:
                        continue
                    c1, c2 = self.buckets(self.slots[slot][0])
                    room = free(c2 if b == c1 else c1) if c1 != c2 else []
                    if len(room) > most:
                        best, most = (slot, room[0]), len(room)
            if best is not None:
                slot, target = best
                self.moves += 1
                self.slots[target] = self.slots[slot]
                self.slots[slot] = [key, score, value]
                return slot, INSERTED, None
        open_ = [s for s in self.candidates(key) if s not in self.pinned]
        if not open_:  # every slot of both buckets locked
            return -1, REFUSED, None
        victim = min(open_, key=lambda s: self.slots[s][1])  # earliest on ties
        if self.admission(score) < self.slots[victim][1]:
            return -1, REFUSED, None
        gone = self.slots[victim]
        self.slots[victim] = [key, score, value]
        return victim, EVICTING, gone

    def acting(self, keys: list[int], *, first: bool = False) -> list[bool]:
        order = range(len(keys)) if first else range(len(keys) - 1, -1, -1)
        seen, out = set(), [False] * len(keys)
        for r in order:
            if keys[r] not in seen:
                seen.add(keys[r])
                out[r] = True
        return out

    def write(self, mode: str, keys, values, given, accumulate=None, among=None, tick=True):
        """Returns (status, slot, found, evicted entries) per the engines' write. accum_or_assign
        is two of these on one step: the adding rows (among=True), then the others
        (among=False), which insert absent keys and leave present ones be. ``given``: the
        caller's score per row, or None. ``self.refused`` then holds the refused rows as
        insert_and_evict returns them (key, score brought, value)."""
        given = [None] * len(keys) if given is None else given
        if mode == "accumulate" and among is None:
            self.step += 1
            adds = self.write(mode, keys, values, given, accumulate, among=True, tick=False)
            rest = self.write(mode, keys, values, given, accumulate, among=False, tick=False)
            return tuple([a if f else b for a, b, f in zip(x, y, accumulate)]
                         for x, y in zip(adds[:3], rest[:3])) + (adds[3] + rest[3],)
        if tick:
            self.step += 1
        first = mode == "find_or_insert"
        acting = self.acting(keys, first=first)
        if among is not None:
            acting = [a and (f == among) for a, f in zip(acting, accumulate)]
        status, slots, found, evicted = [], [], [], []
        # find_or_insert's value of each acting row: what the row found, else its own (init),
        # whatever another row of the call does to that entry
        self.acted_values = [None] * len(keys)
        for r, key in enumerate(keys):
            if not acting[r]:
                status.append(SUPERSEDED), slots.append(-1), found.append(False)
                continue
            if values is not None:
                self.acted_values[r] = list(values[r])
            if key in RESERVED:
                status.append(REFUSED), slots.append(-1), found.append(False)
                continue
            s = self.slot_of(key)
            adds = mode == "accumulate" and accumulate[r]
            if s >= 0 and mode == "accumulate" and not adds:
                status.append(SKIPPED), slots.append(s), found.append(True)
                continue
            if s >= 0:
                entry = self.slots[s]
                entry[1] = self.score(entry[1], True, given[r])
                self.acted_values[r] = list(entry[2])
                if adds:
                    entry[2] = [a + b for a, b in zip(entry[2], values[r])]
                elif mode != "find_or_insert" and values is not None:
                    entry[2] = list(values[r])
                status.append(ASSIGNED), slots.append(s), found.append(True)
                continue
            if mode == "assign" or adds:
                status.append(SKIPPED), slots.append(-1), found.append(False)
                continue
            slot, outcome, gone = self._place(key, self.score(0, False, given[r]),
                                              list(values[r]), may_evict=False)
            status.append(outcome), slots.append(slot), found.append(False)
        # the second pass, as the engines': rows whose two buckets were full, in row order
        for r, key in enumerate(keys):
            if status[r] != TO_EVICT:
                continue
            slots[r], status[r], gone = self._place(key, self.score(0, False, given[r]),
                                                    list(values[r]), may_evict=True)
            if gone is not None:
                evicted.append(tuple(gone[:2]) + (tuple(gone[2]),))
        self.refused = [(key, self.score(0, False, given[r]),
                         () if values is None else tuple(values[r]))
                        for r, key in enumerate(keys) if status[r] == REFUSED]
        if first:  # later rows of a key see it as the first row left it
            for r, key in enumerate(keys):
                if not acting[r]:
                    s = -1 if key in RESERVED else self.slot_of(key)
                    slots[r], found[r] = s, s >= 0
                elif slots[r] >= 0 and (self.slots[slots[r]] is None
                                        or self.slots[slots[r]][0] != key):
                    slots[r] = self.slot_of(key)  # moved or evicted by another row
        return status, slots, found, evicted

    def lookup(self, keys, *, update: bool):
        update = update and self.policy != "custom"  # custom scores come from the caller only
        if update:
            self.step += 1
            acting = self.acting(keys)
        out = []
        for r, key in enumerate(keys):
            s = -1 if key in RESERVED else self.slot_of(key)
            if s >= 0 and update and acting[r]:
                self.slots[s][1] = self.score(self.slots[s][1], True, None)
            out.append(s)
        return out

    def as_dict(self) -> dict[int, tuple[int, tuple]]:
        return {e[0]: (e[1], tuple(e[2])) for e in self.slots if e is not None}


def _to_u64(values: list[int]) -> torch.Tensor:
    return torch.tensor([v - 2**64 if v >= 2**63 else v for v in values],
                        dtype=torch.int64).view(torch.uint64)


def make_cache_machine(*, policy: str, device: str, exact: bool, width: int = 16,
                       dim: int = 2):
    """A state machine class for one cache configuration."""
    key_strategy = st.one_of(st.integers(0, 60), st.sampled_from(RESERVED))
    batch = st.lists(key_strategy, min_size=0, max_size=30)
    custom = policy == "custom"

    class CacheMachine(RuleBasedStateMachine):
        @initialize(buckets=st.integers(1, 3) if exact else st.just(16))
        def create(self, buckets):
            self.cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.int64,
                                     value_shape=(dim,), capacity=buckets * width,
                                     device=device, policy=policy, bucket_slots=width)
            self.model = CacheModel(num_buckets=buckets, width=width, policy=policy)
            self.counter = 0

        def _rows(self, n):
            rows = [[self.counter + r * dim + j for j in range(dim)] for r in range(n)]
            self.counter += n * dim
            return rows

        def _scores(self, draw_scores, n):
            """Scores for a write: always under custom; under the other policies when the
            draw's first is even (the caller's scores, or counts to add)."""
            if not custom and draw_scores[0] % 2:
                return None, None
            given = [draw_scores[i % len(draw_scores)] for i in range(n)]
            return given, _to_u64(given).to(device)

        def _check_rows(self, got, want, what):
            got = got.cpu().tolist()
            if not exact and what == "slots":  # slots differ on the GPU; presence does not
                got, want = [s >= 0 for s in got], [s >= 0 for s in want]
            assert got == want, f"{what}: cache {got} model {want}"

        @rule(keys=batch, draw=st.lists(st.integers(0, 8), min_size=1, max_size=4),
              evict=st.booleans())
        def insert(self, keys, draw, evict):
            rows = self._rows(len(keys))
            given, scores = self._scores(draw, len(keys))
            values = torch.tensor(rows, dtype=torch.int64).reshape(len(keys), dim).to(device)
            k = _to_u64(keys).to(device)
            status, _, _, gone = self.model.write("upsert", keys, rows, given)
            if evict:
                got, (ev_keys, ev_values, ev_scores) = self.cache.insert_and_evict(
                    k, values, scores=scores)
                evicted = sorted(zip([v % 2**64 for v in ev_keys.view(torch.int64).tolist()],
                                     [v % 2**64 for v in ev_scores.view(torch.int64).tolist()],
                                     map(tuple, ev_values.cpu().tolist())))
                want = sorted(gone + self.model.refused)
                assert evicted == want
            else:
                got = self.cache.insert_or_assign(k, values, scores=scores)
            self._check_rows(got, status, "status")

        @rule(keys=batch, draw=st.lists(st.integers(0, 8), min_size=1, max_size=4),
              with_values=st.booleans(), accumulate=st.booleans())
        def assign(self, keys, draw, with_values, accumulate):
            rows = self._rows(len(keys))
            given, scores = self._scores(draw, len(keys))
            k = _to_u64(keys).to(device)
            values = torch.tensor(rows, dtype=torch.int64).reshape(len(keys), dim).to(device)
            if accumulate:
                mask = [(key + len(keys)) % 2 == 0 for key in keys]
                status, *_ = self.model.write("accumulate", keys, rows, given, mask)
                flags = torch.tensor(mask, dtype=torch.bool).to(device)
                got = self.cache.accum_or_assign(k, values, flags, scores=scores)
                self._check_rows(got, status, "status")
            else:
                _, _, found, _ = self.model.write("assign", keys, rows if with_values else None,
                                                  given)
                got = self.cache.assign(k, values if with_values else None, scores=scores)
                self._check_rows(got, found, "found")

        @rule(keys=batch, draw=st.lists(st.integers(0, 8), min_size=1, max_size=4),
              as_index=st.booleans())
        def find_or_insert(self, keys, draw, as_index):
            given, scores = self._scores(draw, len(keys))
            init = [7] * dim
            _, slots, found, _ = self.model.write("find_or_insert", keys,
                                                  [init] * len(keys), given)
            k = _to_u64(keys).to(device)
            if as_index:
                index, got = self.cache.find_or_insert_index(k, init=7, scores=scores)
                self._check_rows(index, slots, "slots")
            else:
                values, got = self.cache.find_or_insert(k, init=7, scores=scores)
                # an acting row: the value it found or inserted (another row of the call may
                # have evicted that entry since); a later row of its key: the value as the call
                # leaves it
                acted = self.model.acted_values
                want = [acted[r] if acted[r] is not None
                        else list(self.model.slots[s][2]) if s >= 0 else init
                        for r, s in enumerate(slots)]
                assert values.cpu().tolist() == want
            self._check_rows(got, found, "found")

        @rule(keys=batch, update=st.booleans(), as_index=st.booleans())
        def find(self, keys, update, as_index):
            slots = self.model.lookup(keys, update=update)
            k = _to_u64(keys).to(device)
            if as_index:
                index, found = self.cache.find_index(k, update_scores=update)
                self._check_rows(index, slots, "slots")
            else:
                values, found = self.cache.find(k, default=-1, update_scores=update)
                want = [list(self.model.slots[s][2]) if s >= 0 else [-1] * dim for s in slots]
                assert values.cpu().tolist() == want
            self._check_rows(found, [s >= 0 for s in slots], "found")

        @rule(keys=batch)
        def erase(self, keys):
            want = []
            for key in keys:
                s = -1 if key in RESERVED else self.model.slot_of(key)
                if s >= 0:
                    self.model.slots[s] = None
                    self.model.pinned.discard(s)
                want.append(s >= 0)
            self._check_rows(self.cache.erase(_to_u64(keys).to(device)), want, "erased")

        @rule(limit=st.integers(0, 12))
        def erase_if(self, limit):
            doomed = [i for i, e in enumerate(self.model.slots) if e is not None and e[1] <= limit]
            for i in doomed:
                self.model.slots[i] = None
            self.model.pinned -= set(doomed)
            assert self.cache.erase_if(max_score=limit) == len(doomed)

        @rule(keys=batch, draw=st.lists(st.integers(0, 8), min_size=1, max_size=4))
        def insert_unique(self, keys, draw):
            """A write whose caller vouches its keys are distinct (unique=True): the same as
            the checked write of those keys."""
            keys = list(dict.fromkeys(keys))
            rows = self._rows(len(keys))
            given, scores = self._scores(draw, len(keys))
            values = torch.tensor(rows, dtype=torch.int64).reshape(len(keys), dim).to(device)
            status, *_ = self.model.write("upsert", keys, rows, given)
            got = self.cache.insert_or_assign(_to_u64(keys).to(device), values, scores=scores,
                                              unique=True)
            self._check_rows(got, status, "status")

        @rule(mask=st.sampled_from([None, 0x3, 0x30, 2**64 - 1]), pattern=st.integers(0, 63),
              low=st.none() | st.integers(0, 12), high=st.none() | st.integers(0, 12))
        def count_filtered(self, mask, pattern, low, high):
            """size_if and export with key and score filters, against the model's entries."""
            def chosen(key, score):
                return ((mask is None or key & mask == pattern & mask)
                        and (low is None or score >= low) and (high is None or score <= high))
            pattern = pattern if mask is not None else 0
            want = sorted(k for k, (score, _) in self.model.as_dict().items() if chosen(k, score))
            filters = {"key_mask": mask, "key_pattern": pattern, "min_score": low,
                       "max_score": high}
            assert self.cache.size_if(**filters) == len(want)
            keys, _, _ = self.cache.export(**filters)
            assert sorted(keys.view(torch.uint64).cpu().tolist()) == want

        @rule(keys=st.lists(st.integers(0, 60), min_size=0, max_size=20, unique=True),
              scores=st.lists(st.integers(0, 12), min_size=20, max_size=20))
        def merge_entries(self, keys, scores):
            """merge_from of entries with their own scores: written as under custom, whatever
            the cache's policy (no step taken)."""
            rows = self._rows(len(keys))
            given = scores[:len(keys)]
            policy, self.model.policy = self.model.policy, "custom"
            try:
                self.model.write("upsert", keys, rows, given, tick=False)
            finally:
                self.model.policy = policy
            self.cache.merge_from((_to_u64(keys).to(device),
                                   torch.tensor(rows, dtype=torch.int64).reshape(
                                       len(keys), dim).to(device),
                                   _to_u64(given).to(device)))

        @rule(offset=st.integers(0, 40), count=st.none() | st.integers(0, 40),
              filtered=st.booleans(), data=st.data())
        def export_part(self, offset, count, filtered, data):
            """export's arguments: the live entries of slots [offset, offset + count) scoring
            at least min_score (a score some entry has, so the bound itself is tested), in
            slot order (where the model places entries exactly; else the whole table's,
            filtered by score)."""
            present = sorted({e[1] for e in self.model.slots if e is not None})
            min_score = data.draw(st.sampled_from(present)) if filtered and present else None
            slots = len(self.model.slots)
            offset = min(offset, slots) if exact else 0
            count = count if exact else None
            keys, _, scores = self.cache.export(offset=offset, count=count,
                                                min_score=min_score)
            end = slots if count is None else min(slots, offset + count)
            want = [(e[0], e[1]) for e in self.model.slots[offset:end] if e is not None
                    and (min_score is None or e[1] >= min_score)]
            got = list(zip(keys.view(torch.uint64).cpu().tolist(),
                           scores.cpu().tolist()))
            assert (got if exact else sorted(got)) == (want if exact else sorted(want))

        @rule(epoch=st.integers(0, 3))
        def set_epoch(self, epoch):
            self.cache.set_global_epoch(epoch)
            self.model.epoch = epoch

        @rule()
        def save_and_load(self):
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "c.gh"
                self.cache.save(path)
                self.cache = gh.CacheMap.load(path, device=device)  # locks stay behind
            self.model.pinned.clear()

        @rule()
        def clear(self):
            self.cache.clear()
            self.model.slots = [None] * len(self.model.slots)
            self.model.pinned.clear()

        @rule(keys=batch, unlock=st.booleans())
        def lock(self, keys, unlock):
            """lock_keys pins the present keys' entries (none moves or goes while pinned);
            unlock_keys releases them, True on each row of a key that was locked."""
            slots = [-1 if key in RESERVED else self.model.slot_of(key) for key in keys]
            k = _to_u64(keys).to(device)
            if unlock:
                want = [s >= 0 and s in self.model.pinned for s in slots]
                self._check_rows(self.cache.unlock_keys(k), want, "unlocked")
                self.model.pinned -= set(slots)
            else:
                index, locked = self.cache.lock_keys(k)
                self._check_rows(locked, [s >= 0 for s in slots], "locked")
                self._check_rows(index, slots, "slots")
                self.model.pinned |= {s for s in slots if s >= 0}
            assert self.cache.locked_count() == len(self.model.pinned)

        @invariant()
        def same_contents(self):
            if not hasattr(self, "cache"):
                return
            keys, values, scores = self.cache.export()
            got = {k: (s, tuple(v)) for k, s, v in zip(
                keys.view(torch.int64).cpu().tolist(), scores.view(torch.int64).cpu().tolist(),
                values.cpu().tolist())}
            want = {k - 2**64 if k >= 2**63 else k: (s - 2**64 if s >= 2**63 else s, v)
                    for k, (s, v) in self.model.as_dict().items()}
            assert got == want
            assert len(self.cache) == len(want)
            check_index(self.cache)
            if exact:
                slot_keys = [e[0] if e is not None else M64 for e in self.model.slots]
                assert self.cache._state.keys.view(torch.uint64).cpu().tolist() == slot_keys

    return CacheMachine


def check_placement(cache) -> None:
    """Every key once, each in one of its two buckets, the count right; on a CUDA cache, its
    index exact (check_index)."""
    state = cache._state
    keys = state.keys.cpu()
    live = keys != -1
    assert int(live.sum()) == len(cache)
    assert torch.unique(keys[live]).numel() == int(live.sum())
    model = CacheModel(num_buckets=state.spec.num_buckets, width=state.spec.bucket_slots,
                       policy=state.spec.policy, seed=state.spec.seed)
    slots = torch.nonzero(live).flatten().tolist()
    for slot, key in zip(slots, keys[live].tolist()):
        assert slot // model.width in model.buckets(key % 2**64)
    check_index(cache)
