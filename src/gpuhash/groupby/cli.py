"""``gpuhash groupby``: a Parquet file grouped and aggregated into another.

The file is read whole (pyarrow), grouped by ``gh.groupby`` on the GPU when there is one, and
the answer written as Parquet; with ``chunk_rows`` it is read that many rows at a time, each
batch grouped into partial aggregates that are merged at the end (groupby/stream.py), so the
file may be larger than memory. Aggregations are given as ``COLUMN:AGGREGATION``, with a
parameter after ``=`` where one is needed: ``v1:sum``, ``v3:quantile=0.9``, ``v1:corr=v2``,
``v3:top_k=2``. On a terminal a status line says which phase is running.

Example:
    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> where = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"k": [1, 2, 1], "v": [1., 2., 4.]}), f"{where}/in.parquet")
    >>> run_groupby(f"{where}/in.parquet", by=["k"], aggs=["v:sum", "v:max"],
    ...             output=f"{where}/out.parquet", device="cpu", sort=True, progress=False)
    2
    >>> pq.read_table(f"{where}/out.parquet").to_pydict()
    {'k': [1, 2], 'v_sum': [5.0, 2.0], 'v_max': [4.0, 2.0]}
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpuhash.groupby.specs import WITH_PARAMETER


def parse_agg_options(given: list[str]) -> dict[str, Any]:
    """``COLUMN:AGGREGATION[=PARAMETER]`` options as ``gh.groupby``'s ``aggs``.

    Example:
        >>> parse_agg_options(["v1:sum", "v3:mean", "v3:quantile=0.9", "v1:corr=v2"])
        {'v1': ['sum', ('corr', 'v2')], 'v3': ['mean', ('quantile', 0.9)]}
    """
    aggs: dict[str, list] = {}
    for option in given:
        column, colon, agg = option.partition(":")
        if not colon or not column or not agg:
            raise ValueError(f"--agg {option!r}: write COLUMN:AGGREGATION, e.g. v1:sum")
        name, equals, parameter = agg.partition("=")
        if name in WITH_PARAMETER and not equals:
            raise ValueError(f"--agg {option!r}: {name} takes a parameter, e.g. "
                             f"{column}:{name}=" + {"quantile": "0.9", "corr": "other_column"}
                             .get(name, "2"))
        value: Any = name
        if equals:
            value = (name, _parameter(name, parameter, option))
        aggs.setdefault(column, []).append(value)
    return {column: listed[0] if len(listed) == 1 else listed
            for column, listed in aggs.items()}


def _parameter(name: str, text: str, option: str) -> Any:
    try:
        if name == "quantile":
            return float(text)
        if name in ("top_k", "bottom_k"):
            return int(text)
    except ValueError:
        raise ValueError(f"--agg {option!r}: {text!r} is not a number") from None
    return text


def run_groupby(path: str, *, by: list[str], aggs: list[str], output: str, device: str,
                sort: bool = False, dropna: bool = False, explain: bool = False,
                chunk_rows: int | None = None, progress: bool = False) -> int:
    """Group the Parquet file at ``path`` and write the answer to ``output``; its rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import gpuhash as gh
    from gpuhash.groupby.stream import group_chunks

    wanted = parse_agg_options(aggs)
    status = _status if progress else _silent
    if chunk_rows is not None:
        source = pq.ParquetFile(path)
        rows = source.metadata.num_rows
        batches = (pa.Table.from_batches([batch])
                   for batch in source.iter_batches(batch_size=chunk_rows))
        with status(f"grouping {rows:,} rows by {', '.join(by)}, {chunk_rows:,} at a time"):
            answer = group_chunks(batches, by, wanted, sort=sort, dropna=dropna,
                                  device=device, explain=explain)
    else:
        with status(f"reading {path}"):
            table = pq.read_table(path)
        with status(f"grouping {table.num_rows:,} rows by {', '.join(by)}"):
            answer = gh.groupby(table, by, wanted, sort=sort, dropna=dropna, device=device,
                                explain=explain)
    with status(f"writing {output}"):
        pq.write_table(answer, output)
    return answer.num_rows


@contextlib.contextmanager
def _status(text: str):
    from rich.console import Console

    with Console(stderr=True).status(text):
        yield


@contextlib.contextmanager
def _silent(text: str):
    yield
