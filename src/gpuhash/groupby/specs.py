"""What a group-by is asked for: the ``aggs`` argument checked and spelled out, one entry per
output column, before any data is touched.

``aggs`` maps a value column to one aggregation or a list of them. An aggregation is a name
(``"sum"``) or a tuple with its parameter: ``("quantile", 0.9)``, ``("top_k", 2)`` (the two
largest values of each group), ``("bottom_k", 2)``, ``("corr", "v2")`` (Pearson's r with
column ``v2``). A column with one aggregation keeps its name in the output; with several, each
output is named ``<column>_<aggregation>`` (``v3_mean``, ``v3_quantile_0.9``, ``v1_corr_v2``),
and so is the one aggregation of a key column.

Example:
    >>> [s.output for s in parse_aggs({"v1": "sum", "v3": ["mean", ("quantile", 0.5)]})]
    ['v1', 'v3_mean', 'v3_quantile_0.5']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

AggName = Literal["count", "size", "sum", "mean", "min", "max", "var", "std", "median",
                  "quantile", "first", "last", "nunique", "any", "all", "corr", "top_k",
                  "bottom_k"]
PLAIN = ("count", "size", "sum", "mean", "min", "max", "var", "std", "median", "first",
         "last", "nunique", "any", "all")
WITH_PARAMETER = ("quantile", "top_k", "bottom_k", "corr")
ROWS_A_GROUP = ("top_k", "bottom_k")  # several output rows a group
STRING_OK = ("count", "size", "min", "max", "first", "last", "nunique", "top_k", "bottom_k")


@dataclass(frozen=True)
class AggSpec:
    """One output column: ``name`` of column ``column``, with its parameter (or None)."""

    output: str
    column: str
    name: str
    parameter: Any = None


def _label(name: str, parameter: Any) -> str:
    return name if parameter is None else f"{name}_{parameter}"


def _one(column: str, agg: Any) -> tuple[str, Any]:
    if isinstance(agg, str):
        if agg in PLAIN:
            return agg, None
        if agg in WITH_PARAMETER:
            raise ValueError(f"aggs[{column!r}]: {agg!r} takes a parameter; write it as a "
                             f"tuple, e.g. ({agg!r}, {_example(agg)!r})")
        raise ValueError(f"aggs[{column!r}]: unknown aggregation {agg!r}; one of "
                         f"{', '.join(PLAIN + WITH_PARAMETER)}")
    if isinstance(agg, tuple) and len(agg) == 2 and agg[0] in WITH_PARAMETER:
        name, parameter = agg
        if name == "quantile" and not (isinstance(parameter, (int, float))
                                       and not isinstance(parameter, bool)
                                       and 0 <= parameter <= 1):
            raise ValueError(f"aggs[{column!r}]: quantile takes q in [0, 1], got "
                             f"{parameter!r}")
        if name in ROWS_A_GROUP and not (isinstance(parameter, int)
                                         and not isinstance(parameter, bool) and parameter >= 1):
            raise ValueError(f"aggs[{column!r}]: {name} takes k, a positive int, got "
                             f"{parameter!r}")
        if name == "corr" and not isinstance(parameter, str):
            raise ValueError(f"aggs[{column!r}]: corr takes the other column's name, got "
                             f"{parameter!r}")
        return name, parameter
    raise ValueError(f"aggs[{column!r}]: {agg!r} is not an aggregation: a name such as "
                     f"'sum', or a tuple such as ('quantile', 0.9)")


def _example(name: str) -> Any:
    return {"quantile": 0.9, "top_k": 2, "bottom_k": 2, "corr": "other_column"}[name]


def parse_aggs(aggs: Any, keys: tuple[str, ...] = ()) -> list[AggSpec]:
    """The output columns ``aggs`` asks for, in order (see the module docstring); a key
    column aggregated once is named as if it had several aggregations (the key keeps its
    name)."""
    if not isinstance(aggs, Mapping) or not aggs:
        raise TypeError(f"aggs must be a non-empty dict of column -> aggregation(s), e.g. "
                        f"{{'v1': 'sum'}}, not {aggs!r}")
    specs = []
    for column, asked in aggs.items():
        listed = asked if isinstance(asked, list) else [asked]
        if not listed:
            raise ValueError(f"aggs[{column!r}] is an empty list")
        parsed = [_one(column, agg) for agg in listed]
        for name, parameter in parsed:
            alone = len(parsed) == 1 and column not in keys
            output = column if alone else f"{column}_{_label(name, parameter)}"
            specs.append(AggSpec(output, column, name, parameter))
    outputs = [s.output for s in specs] + list(keys)
    repeated = sorted({o for o in outputs if outputs.count(o) > 1})
    if repeated:
        raise ValueError(f"aggs asks for the output column(s) {repeated} twice")
    several = [s for s in specs if s.name in ROWS_A_GROUP]
    if several and len(specs) > 1:
        raise ValueError("top_k and bottom_k give several rows a group: ask for one of them "
                         "alone in a call, and other aggregations in another")
    return specs
