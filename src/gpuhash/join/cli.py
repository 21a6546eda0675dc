"""``gpuhash join``: two Parquet files joined into a third, the left one streamed.

The right file is read whole and prepared once as a :class:`~gpuhash.JoinBuild`; the left
file is read one row group at a time, each probed and written out before the next is read,
so the left side may be larger than memory. Right and full joins remember which right rows
matched and write the unmatched ones last. Key columns compare as in gh.merge: integers by
value, other pairs in their common type (or refused); those that are not integers are coded
by their position in the right side's distinct values. The output's key columns hold either
side's keys (int32 against int64: int64).

Example:
    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> where = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"k": [1, 2, 3], "a": [1., 2., 3.]}), f"{where}/l.parquet")
    >>> pq.write_table(pa.table({"k": [3, 1], "b": ["x", "y"]}), f"{where}/r.parquet")
    >>> run_join(f"{where}/l.parquet", f"{where}/r.parquet", on=["k"], how="inner",
    ...          output=f"{where}/o.parquet", device="cpu", progress=False)
    2
    >>> sorted(pq.read_table(f"{where}/o.parquet").column("b").to_pylist())
    ['x', 'y']
"""

from __future__ import annotations

from pathlib import Path

import torch

from gpuhash.join.api import JoinBuild
from gpuhash.join.merge import gather_tables
from gpuhash.join.plan import table_bytes

# how each row group of the left side is probed; right / full add the unmatched right rows
_PER_CHUNK = {"inner": "inner", "left": "left", "right": "inner", "full": "left",
              "semi": "semi", "anti": "anti"}


def _value_type(type_):
    """A key column's type with any dictionary encoding taken off."""
    import pyarrow.types as pt

    return type_.value_type if pt.is_dictionary(type_) else type_


def _key_type(name: str, left_type, right_type):
    """The type one key column is compared in, as gh.merge compares it (None: integers, by
    value); pairs that do not compare are refused naming the column."""
    from gpuhash.join.frames import compared_type

    return compared_type(_value_type(left_type), _value_type(right_type),
                         f"key column {name!r} is {left_type} in the left file but "
                         f"{right_type} in the right one")


def _output_type(left_type, right_type, how: str):
    """The type of a key column in the output file: the left's, but for right and full
    joins, whose rows may carry the right side's keys, one that holds both."""
    from gpuhash.join.frames import coalesced_type

    if how not in ("right", "full") or left_type == right_type:
        return left_type
    return coalesced_type(_value_type(left_type), _value_type(right_type)) or left_type


def _right_codes(column, key_type):
    """Right key column as (codes, valid, coder for left columns); ``key_type``: the type
    both sides are compared in (None: integers, by value)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    from gpuhash.join.frames import _integer_key, comparable

    if pt.is_dictionary(column.type):
        column = column.dictionary_decode()
    if key_type is None:
        return (*_integer_key(column), lambda left: _integer_key(left))

    column = comparable(column, key_type)
    distinct = pc.unique(column).drop_null()

    def code(values):
        values = comparable(values, key_type)
        found = pc.index_in(values, value_set=distinct)
        absent = len(distinct)  # a code no right row has: matches nothing, stays a key
        codes = pc.fill_null(found, absent).cast(pa.int64())
        valid = values.is_valid()
        return (torch.from_numpy(codes.to_numpy().copy()),
                None if values.null_count == 0 else torch.from_numpy(valid.to_numpy(
                    zero_copy_only=False).copy()))

    return (*code(column), code)


def run_join(left_path: str, right_path: str, *, on: list[str], how: str, output: str,
             device: str, progress: bool = True, explain: bool = False,
             suffixes: tuple[str, str] | None = None) -> int:
    """Join two Parquet files on the ``on`` columns into ``output``; returns rows written."""
    import pyarrow.parquet as pq
    from rich.progress import Progress

    if how == "cross":
        raise ValueError("gpuhash join does not stream how='cross'; use gh.merge")
    if not on:
        raise ValueError("--on names no key column")
    for path in (left_path, right_path):
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
        if Path(output).resolve() == Path(path).resolve():
            raise ValueError(f"the output {output!r} is an input file; write elsewhere")
    if not Path(output).resolve().parent.is_dir():
        raise ValueError(f"the output's directory {str(Path(output).parent)!r} does not exist")
    # one file read by ParquetFile, not pq.read_table, whose dataset layer imports pandas
    right = pq.ParquetFile(right_path).read()
    left_file = pq.ParquetFile(left_path)
    left_schema = left_file.schema_arrow
    for name in on:
        for names, side in ((right.column_names, "right"), (left_schema.names, "left")):
            if name not in names:
                raise ValueError(f"key column {name!r} is not in the {side} file (columns: "
                                 f"{names})")
    target = torch.device(device)
    key_types = {name: _key_type(name, left_schema.field(name).type,
                                 right.schema.field(name).type) for name in on}
    out_types = {name: _output_type(left_schema.field(name).type,
                                    right.schema.field(name).type, how) for name in on}
    keys, valids, coders = [], [], []
    for name in on:
        codes, valid, coder = _right_codes(right.column(name).combine_chunks(), key_types[name])
        keys.append(codes)
        valids.append(valid)
        coders.append(coder)
    _check_build_fits(keys, right_path, target)
    keys = [codes.to(target) for codes in keys]
    valid = _all(valids, target)
    build = JoinBuild(tuple(keys) if len(keys) > 1 else keys[0], right_valid=valid)
    matched = torch.zeros(right.num_rows, dtype=torch.bool, device=target)
    per_chunk = _PER_CHUNK[how]
    writer, written = None, 0
    if explain:  # the file join's shape; the plan printed below is one row group's probe
        rest = (", then the right rows no row group met" if how in ("right", "full") else "")
        print(f"gpuhash join how={how!r}: {left_path} ({left_file.metadata.num_rows} rows, "
              f"{left_file.num_row_groups} row groups) streamed a row group at a time "
              f"against {right_path} ({right.num_rows} rows, its keys built once on "
              f"{target}); each row group is probed how={per_chunk!r}{rest}. The first "
              f"row group's probe:")

    def write(table):
        nonlocal writer, written
        if writer is None:  # key columns typed to hold either side's keys (right, full)
            schema = table.schema
            for name, type_ in out_types.items():
                if name in schema.names:
                    at = schema.get_field_index(name)
                    schema = schema.set(at, schema.field(at).with_type(type_))
            writer = pq.ParquetWriter(output, schema)
        writer.write_table(table.cast(writer.schema))
        written += table.num_rows

    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("joining row groups", total=left_file.num_row_groups)
        for group in range(left_file.num_row_groups):
            chunk = left_file.read_row_group(group)
            coded = [coder(chunk.column(name).combine_chunks()) for coder, name in
                     zip(coders, on)]
            probe_keys = tuple(c.to(target) for c, _ in coded)
            result = build.probe(probe_keys if len(probe_keys) > 1 else probe_keys[0],
                                 how=per_chunk, left_valid=_all([v for _, v in coded], target),
                                 explain=explain and group == 0)
            rows_l, rows_r = result if isinstance(result, tuple) else (result, None)
            if rows_r is not None and how in ("right", "full"):
                matched[rows_r[rows_r >= 0]] = True
            write(gather_tables(chunk, right, rows_l, rows_r, on, on, how=per_chunk,
                                suffixes=suffixes, kind="pyarrow", device=target))
            bar.advance(task)
    if how in ("right", "full"):
        rest = (~matched).nonzero().squeeze(1)
        empty = left_file.schema_arrow.empty_table()
        write(gather_tables(empty, right, torch.full_like(rest, -1), rest, on, on, how=how,
                            suffixes=suffixes, kind="pyarrow", device=target))
    if writer is None:  # an empty left file and nothing to add: still write the schema
        write(gather_tables(left_file.schema_arrow.empty_table(), right.slice(0, 0),
                            torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
                            if how not in ("semi", "anti") else None, on, on, how=how,
                            suffixes=suffixes, kind="pyarrow", device=target))
    writer.close()
    return written


def _check_build_fits(keys: list[torch.Tensor], right_path: str, device: torch.device) -> None:
    """The right file's key columns are built into one table on ``device`` (the left file
    streams past it): refuse, before any work, a build that cannot fit the GPU's free memory
    (about the codes and the table the planner counts), naming the sizes."""
    if device.type != "cuda" or not keys:
        return
    rows = keys[0].shape[0]
    key_bytes = 4 if len(keys) == 1 and keys[0].element_size() <= 4 else 8
    need = sum(k.element_size() * rows for k in keys) + table_bytes(rows, key_bytes)
    free, _ = torch.cuda.mem_get_info(device)
    if need > free:
        raise ValueError(f"the right file {right_path!r} has {rows} rows, whose keys and table "
                         f"need about {need} bytes of GPU memory, and {free} are free: the "
                         f"right file is built on the GPU and the left one streamed past it, "
                         f"so put the larger file left (or join with --cpu)")


def _all(masks, device):
    present = [m for m in masks if m is not None]
    if not present:
        return None
    mask = present[0]
    for other in present[1:]:
        mask = mask & other
    return mask.to(device)
