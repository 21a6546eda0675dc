"""`gpuhash join` on Parquet files: every streamed how against gh.merge of the whole tables,
row groups streamed one by one, string keys, and a missing key column."""

from __future__ import annotations

import pytest

from gpuhash.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import gpuhash as gh  # noqa: E402


def _rows(table):
    return sorted(map(repr, table.to_pylist()))


@pytest.fixture
def files(tmp_path):
    left = pa.table({"k": [1, 2, 2, None, 5, 7, 1], "s": ["a", "b", "c", "d", "a", "z", None],
                     "x": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5]})
    right = pa.table({"k": [2, 1, 9, None], "s": ["b", "a", "q", "d"], "y": [10, 20, 30, 40]})
    pq.write_table(left, tmp_path / "l.parquet", row_group_size=2)  # four row groups
    pq.write_table(right, tmp_path / "r.parquet")
    return tmp_path, left, right


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
@pytest.mark.parametrize("on", [["k"], ["s"], ["k", "s"]])
def test_join_files_matches_merge(files, how, on, capsys):
    where, left, right = files
    out = where / "o.parquet"
    assert main(["join", str(where / "l.parquet"), str(where / "r.parquet"),
                 "--on", ",".join(on), "--how", how, "-o", str(out), "--cpu"]) == 0
    expected = gh.merge(left, right, on=on, how=how, device="cpu")
    got = pq.read_table(out)
    assert got.column_names == expected.column_names
    assert _rows(got) == _rows(expected)
    assert f"wrote {got.num_rows} rows" in capsys.readouterr().err


def test_join_explains_and_names_a_missing_column(files, capsys):
    where, _, _ = files
    args = [str(where / "l.parquet"), str(where / "r.parquet"), "-o", str(where / "o.parquet")]
    assert main(["join", *args, "--on", "k", "--explain", "--cpu"]) == 0
    assert "hash-table" in capsys.readouterr().out
    with pytest.raises(KeyError, match="'nope' is not in the right file"):
        main(["join", *args, "--on", "nope", "--cpu"])


def test_bench_join_quick_on_the_cpu_writes_json(tmp_path, capsys):
    import json

    path = tmp_path / "join.json"
    assert main(["bench", "join", "--quick", "--cpu", "--runs", "1", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert report["suite"] == "join" and report["quick"] is True and report["commit"]
    assert [r["name"] for r in report["results"]] == ["J1", "J2"]
    first = report["results"][0]
    assert first["build"] == 1000 and 0.4 < first["matches"] / first["probe"] < 0.6
    assert "torch sort + searchsorted" in first["peers"] and first["copy_gbps"] > 0
    assert "gpuhash join on" in capsys.readouterr().out
