"""The table format on its own (CPU, no engine): capacity arithmetic, seeds, and load_state's
refusal of foreign, damaged and inconsistent files."""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from gpuhash._common.files import checksum
from gpuhash.table.format import (
    COUNTS_LEN,
    DEFAULT_SEED,
    MAX_BUCKETS,
    TableSpec,
    buckets_for,
    empty_state,
)
from gpuhash.table.io import load_state, save_state


def _spec(**fields) -> TableSpec:
    base = {"key_dtype": torch.int32, "value_dtype": None, "value_shape": (), "num_buckets": 1}
    return TableSpec(**{**base, **fields})


# --- capacity ------------------------------------------------------------------------------

def test_max_entries_is_exact_for_decimal_load_factors():
    # 0.7 * 180 is 125.99999999999999 in floats
    assert _spec(num_buckets=45, bucket_slots=4, max_load_factor=0.7).max_entries == 126
    assert _spec(max_load_factor=0.7).sized_for(126).max_entries >= 126
    assert buckets_for(126, 0.7, 4) == 45


def _check_capacities(load: float, capacities: range, **fields) -> None:
    spec = _spec(max_load_factor=load, **fields)
    ratio = Fraction(repr(load))
    num, den = ratio.numerator, ratio.denominator
    short, oversized = [], []
    for capacity in capacities:
        sized = spec.sized_for(capacity)
        if sized.max_entries < capacity:
            short.append(capacity)
        # and still the fewest buckets that do: one fewer would hold too few
        fewer = (sized.num_buckets - 1) * sized.bucket_slots
        if sized.num_buckets > 1 and fewer * num // den >= max(capacity, 1):
            oversized.append(capacity)
    assert not short, f"{len(short)} capacities short at load {load}, first {short[:5]}"
    assert not oversized, f"{len(oversized)} oversized at load {load}, first {oversized[:5]}"


@pytest.mark.parametrize("load", [0.7, 0.9, 0.99])
def test_sized_for_holds_every_capacity_below_100k(load):
    _check_capacities(load, range(100_000))


@pytest.mark.parametrize("load", [0.3, 0.5, 0.55, 0.75, 0.95, 0.33])
def test_sized_for_holds_capacities_at_other_loads(load):
    _check_capacities(load, range(0, 100_000, 13))
    # pair slots: other bucket widths
    _check_capacities(load, range(0, 20_000, 7), key_dtype=torch.int64,
                      value_dtype=torch.int64)


def test_sized_for_with_forced_width_holds_its_capacity():
    spec = _spec(max_load_factor=0.7)
    for capacity in range(0, 5_000):
        assert spec.sized_for(capacity, bucket_slots=8).max_entries >= capacity


# --- seeds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [-1, 2**64, 2**70, 1.5, "7", None, True])
def test_spec_refuses_seeds_outside_u64(seed):
    with pytest.raises(ValueError, match=rf"seed.*{re.escape(repr(seed))}"):
        _spec(seed=seed)


def test_signed_seed_keeps_the_64_bits():
    cases = {0: 0, 5: 5, DEFAULT_SEED: DEFAULT_SEED, 2**63 - 1: 2**63 - 1,
             2**63: -(2**63), 2**64 - 1: -1}
    for seed, signed in cases.items():
        spec = _spec(seed=seed)
        assert spec.signed_seed == signed
        # fits an int64 kernel argument and is the same bits
        assert torch.tensor(spec.signed_seed, dtype=torch.int64).item() & (2**64 - 1) == seed
    grown = dataclasses.replace(_spec(seed=2**64 - 1), max_load_factor=0.5).sized_for(1000)
    assert grown.seed == 2**64 - 1


def test_large_seed_survives_save_and_load(tmp_path):
    path = tmp_path / "t.pt"
    save_state(empty_state(_spec(seed=2**64 - 3), "cpu"), path, kind="HashSet")
    assert load_state(path, "cpu", kind="HashSet").spec.seed == 2**64 - 3


# --- counts --------------------------------------------------------------------------------

def test_empty_state_counts_have_counts_len_entries():
    state = empty_state(_spec(), "cpu")
    assert COUNTS_LEN == 4
    assert state.counts.dtype == torch.int64 and state.counts.tolist() == [0] * COUNTS_LEN


# --- load_state: files that are not gpuhash tables ------------------------------------------

def _refused(path, *what: str):
    """pytest.raises for the single ValueError that names the path (and ``what``)."""
    pattern = re.escape(str(path)) + ".*" + ".*".join(what)
    return pytest.raises(ValueError, match=re.compile(pattern, re.S))


def _saved(tmp_path, spec: TableSpec | None = None, kind: str = "HashMap"):
    spec = spec or _spec(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(3,),
                         num_buckets=8)
    state = empty_state(spec, "cpu")
    keys = state.key_view()
    keys[:5] = torch.arange(5)  # five live keys, as an engine would have put them
    state.counts[:2] = 5
    if state.values is not None:
        state.values[:5] = 1.5
    path = tmp_path / "table.pt"
    save_state(state, path, kind=kind)
    return path, state


def test_round_trip_loads_every_tensor(tmp_path):
    path, state = _saved(tmp_path)
    loaded = load_state(path, "cpu", kind="HashMap")
    assert loaded.spec == state.spec
    for name, tensor in state.tensors().items():
        assert torch.equal(loaded.tensors()[name], tensor), name


def test_missing_file_stays_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_state(tmp_path / "absent.pt", "cpu", kind="HashMap")


def test_text_file_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a table\n")
    with _refused(path, "not a gpuhash table file"):
        load_state(path, "cpu", kind="HashMap")


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with _refused(path, "empty"):
        load_state(path, "cpu", kind="HashMap")


def test_numpy_file_is_refused(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, np.arange(10))
    with _refused(path, "not a gpuhash table file"):
        load_state(path, "cpu", kind="HashMap")


def test_truncated_save_is_refused(tmp_path):
    path, _ = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with _refused(path, "not a gpuhash table file or is damaged"):
        load_state(path, "cpu", kind="HashMap")


def test_plain_torch_saves_are_refused(tmp_path):
    for i, obj in enumerate([{"a": torch.zeros(3)}, [1, 2, 3], torch.zeros(4)]):
        path = tmp_path / f"plain{i}.pt"
        torch.save(obj, path)
        with _refused(path, "not a gpuhash table file"):
            load_state(path, "cpu", kind="HashMap")


def test_foreign_pickle_gets_no_weights_only_advice(tmp_path):
    path = tmp_path / "fraction.pt"
    torch.save(Fraction(1, 2), path)  # a class weights_only loading refuses
    with _refused(path, "not a gpuhash table file") as info:
        load_state(path, "cpu", kind="HashMap")
    assert "weights_only" not in str(info.value)


# --- load_state: crafted files (checksums recomputed, so only the checks stop them) ----------

def _craft(tmp_path, change, spec: TableSpec | None = None):
    path, _ = _saved(tmp_path, spec)
    payload = torch.load(path, weights_only=True)
    change(payload)
    tensors = payload.get("tensors")
    if isinstance(payload.get("checksum"), str) and isinstance(tensors, dict) and all(
            isinstance(t, torch.Tensor) for t in tensors.values()):
        payload["checksum"] = checksum(tensors)
    crafted = tmp_path / "crafted.pt"
    torch.save(payload, crafted)
    return crafted


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(payload):
        target = payload
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


def _drop(*keys):
    def change(payload):
        target = payload
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return change


def _tensor(name, make):
    def change(payload):
        payload["tensors"][name] = make(payload["tensors"])
    return change


SPEC_CASES = {
    "more buckets": (_set("spec", "num_buckets", 64), "shape"),
    "fewer buckets": (_set("spec", "num_buckets", 2), "shape"),
    "zero buckets": (_set("spec", "num_buckets", 0), "num_buckets"),
    "too many buckets": (_set("spec", "num_buckets", MAX_BUCKETS + 1), "num_buckets"),
    "buckets as text": (_set("spec", "num_buckets", "8"), "num_buckets"),
    "bucket width": (_set("spec", "bucket_slots", 16), "bucket_slots"),
    "float key": (_set("spec", "key_dtype", "float32"), "key_dtype"),
    "unknown key dtype": (_set("spec", "key_dtype", "int65"), "key_dtype"),
    "unknown value dtype": (_set("spec", "value_dtype", "nonsense"), "value_dtype"),
    "value dtype as object": (_set("spec", "value_dtype", 5), "value_dtype"),
    "zero value dim": (_set("spec", "value_shape", [0]), "value_shape"),
    "value shape as text": (_set("spec", "value_shape", "3"), "value_shape"),
    "other value shape": (_set("spec", "value_shape", [4]), "values.*shape"),
    "value dtype changed": (_set("spec", "value_dtype", "float64"), "values.*dtype"),
    "load 0": (_set("spec", "max_load_factor", 0.0), "max_load_factor"),
    "load 1": (_set("spec", "max_load_factor", 1.0), "max_load_factor"),
    "load nan": (_set("spec", "max_load_factor", float("nan")), "max_load_factor"),
    "load as text": (_set("spec", "max_load_factor", "0.9"), "max_load_factor"),
    "negative seed": (_set("spec", "seed", -1), "seed.*-1"),
    "seed too big": (_set("spec", "seed", 2**64), "seed"),
    "float seed": (_set("spec", "seed", 1.0), "seed"),
    "spec lacks a field": (_drop("spec", "seed"), "seed"),
    "spec has extra field": (_set("spec", "extra", 1), "extra"),
    "spec not a dict": (_set("spec", [1, 2]), "spec"),
}

TENSOR_CASES = {
    "slots int32": (_tensor("slots", lambda t: t["slots"].to(torch.int32)), "slots.*dtype"),
    "slots short": (_tensor("slots", lambda t: t["slots"][:-1].clone()), "slots.*shape"),
    "slots 1-D": (_tensor("slots", lambda t: t["slots"].flatten().clone()), "slots.*shape"),
    "values not contiguous": (
        _tensor("values", lambda t: torch.zeros(3, t["values"].shape[0]).t()),
        "values.*contiguous"),
    "counts not contiguous": (
        _tensor("counts", lambda t: torch.zeros(8, dtype=torch.int64)[::2]),
        "counts.*contiguous"),
    "overflow short": (_tensor("overflow", lambda t: t["overflow"][:-1].clone()),
                       "overflow.*shape"),
    "overflow int64": (_tensor("overflow", lambda t: t["overflow"].long()), "overflow.*dtype"),
    "values missing": (_drop("tensors", "values"), "values"),
    "values not a tensor": (_tensor("values", lambda t: [1.0]), "values"),
    "counts missing": (_drop("tensors", "counts"), "counts"),
    "unknown tensor": (_tensor("extra", lambda t: torch.zeros(1)), "extra"),
    "counts of 3": (_tensor("counts", lambda t: torch.zeros(3, dtype=torch.int64)),
                    "counts.*shape"),
    "counts int32": (_tensor("counts", lambda t: t["counts"].int()), "counts.*dtype"),
    "negative live": (_tensor("counts", lambda t: torch.tensor([-1, 0, 0, 0])), "counts"),
    "negative used": (_tensor("counts", lambda t: torch.tensor([0, -3, 0, 0])), "counts"),
    "negative error flag": (_tensor("counts", lambda t: torch.tensor([5, 5, -1, 0])), "counts"),
    "negative stash": (_tensor("counts", lambda t: torch.tensor([5, 5, 0, -2])), "counts"),
    "used past the slots": (_tensor("counts", lambda t: torch.tensor([5, 33, 0, 0])), "counts"),
    "live past used": (_tensor("counts", lambda t: torch.tensor([8, 5, 0, 0])), "counts"),
    "shared memory": (_tensor("counts", lambda t: t["slots"].view(-1)[:4]), "shares"),
    "tensors not a dict": (_set("tensors", [1]), "tensors"),
}

PAYLOAD_CASES = {
    "format marker": (_set("format", "other.table"), "format"),
    "no checksum": (_drop("checksum"), "checksum"),
    "checksum not text": (lambda p: p.update(checksum=torch.zeros(2)), "checksum"),
    "extra entry": (_set("extra", 1), "extra"),
}


@pytest.mark.parametrize("case", [*SPEC_CASES, *TENSOR_CASES, *PAYLOAD_CASES])
def test_crafted_files_are_refused_naming_path_and_problem(tmp_path, case):
    change, what = {**SPEC_CASES, **TENSOR_CASES, **PAYLOAD_CASES}[case]
    path = _craft(tmp_path, change)
    with _refused(path, what):
        load_state(path, "cpu", kind="HashMap")


def test_values_tensor_refused_where_the_layout_has_none(tmp_path):
    spec = _spec(value_dtype=torch.int32, num_buckets=8)  # packed: values live in the slots
    path = _craft(tmp_path, _tensor("values", lambda t: torch.zeros(34, dtype=torch.int32)),
                  spec)
    with _refused(path, "values"):
        load_state(path, "cpu", kind="HashMap")


def test_version_kind_and_checksum_keep_their_own_messages(tmp_path):
    path, _ = _saved(tmp_path)
    with _refused(path, "holds a HashMap, not a HashSet"):
        load_state(path, "cpu", kind="HashSet")
    future = _craft(tmp_path, _set("version", 99))
    with _refused(future, "version 99"):
        load_state(future, "cpu", kind="HashMap")
    payload = torch.load(path, weights_only=True)
    payload["tensors"]["slots"][3, 0] ^= 1
    torch.save(payload, path)
    with _refused(path, "checksum"):
        load_state(path, "cpu", kind="HashMap")


def test_two_entry_counts_load_extended_with_zeros(tmp_path):
    path = _craft(tmp_path, _tensor("counts", lambda t: torch.tensor([5, 5])))
    counts = load_state(path, "cpu", kind="HashMap").counts
    assert counts.tolist() == [5, 5] + [0] * (COUNTS_LEN - 2)


def test_out_of_band_keys_count_as_live_but_not_used(tmp_path):
    """A table holding only the EMPTY-sentinel key: live 1, used 0, which must load."""
    spec = _spec(key_dtype=torch.int64, num_buckets=2)
    state = empty_state(spec, "cpu")
    state.key_view()[spec.num_slots] = -1  # out-of-band slot 0 holds key EMPTY
    state.counts[0] = 1
    path = tmp_path / "sentinel.pt"
    save_state(state, path, kind="HashSet")
    assert load_state(path, "cpu", kind="HashSet").counts.tolist()[:2] == [1, 0]
