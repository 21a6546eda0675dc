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
    assert main(["join", *args, "--on", "nope", "--cpu"]) == 2
    assert "'nope' is not in the right file" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
@pytest.mark.parametrize(("left_keys", "right_keys"), [
    (pa.array([1, 2, 3], pa.int32()), pa.array([2, 3, 2**40], pa.int64())),
    (pa.array([1, 2, 0], pa.int64()), pa.array([2.0, 2.5, -0.0], pa.float64())),
    (pa.array([1.0, -0.0, 3.5]), pa.array([3, 0, 1], pa.int16())),
    (pa.array([1, 1_500, 2_000_000], pa.timestamp("us")),
     pa.array([2_000, 1, 0], pa.timestamp("ms"))),
], ids=["int32-int64", "int-float", "float-int", "us-ms"])
def test_keys_of_two_types_join_as_merge_joins_them(tmp_path, how, left_keys, right_keys,
                                                    capsys):
    """Keys compare in the sides' common type whichever file is left, and the output's key
    column holds the right side's keys too (right and full joins)."""
    left = pa.table({"k": left_keys, "a": list(range(len(left_keys)))})
    right = pa.table({"k": right_keys, "b": list(range(len(right_keys)))})
    pq.write_table(left, tmp_path / "l.parquet", row_group_size=2)
    pq.write_table(right, tmp_path / "r.parquet")
    out = tmp_path / "o.parquet"
    assert main(["join", str(tmp_path / "l.parquet"), str(tmp_path / "r.parquet"), "--on", "k",
                 "--how", how, "-o", str(out), "--cpu"]) == 0, capsys.readouterr().err
    expected = gh.merge(left, right, on="k", how=how, device="cpu")
    got = pq.read_table(out)

    def rows(table):
        return sorted(repr(tuple(r.get(c) for c in ("a", "b"))) for r in table.to_pylist())
    assert rows(got) == rows(expected)


def test_user_errors_are_messages_and_inputs_are_never_overwritten(files, capsys):
    where, _, _ = files
    left, right = str(where / "l.parquet"), str(where / "r.parquet")
    before = pq.read_table(left)
    for args, words in ((["--on", "k", "-o", left], "is an input file"),
                        (["--on", "k", "-o", str(where / "no" / "o.parquet")], "does not exist"),
                        (["--on", ","], "names no key column"),
                        (["--on", "s"], None)):
        if words is None:  # a text key against a number key: refused, naming the column
            pq.write_table(pa.table({"s": [1, 2]}), where / "n.parquet")
            code = main(["join", left, str(where / "n.parquet"), "--on", "s", "-o",
                         str(where / "o.parquet"), "--cpu"])
            words = "cannot be compared"
        else:
            code = main(["join", left, right, *args, "--cpu"] + (
                ["-o", str(where / "o.parquet")] if "-o" not in args else []))
        assert code == 2 and words in capsys.readouterr().err, args
    assert pq.read_table(left).equals(before)
    assert main(["join", left, right, "--on", " k ", "-o", str(where / "o.parquet"),
                 "--cpu"]) == 0  # spaces around a name are not part of it


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


def test_a_missing_file_and_the_explained_plan(files, capsys):
    where, _, _ = files
    out = str(where / "o.parquet")
    assert main(["join", str(where / "l.parquet"), str(where / "none.parquet"), "--on", "k",
                 "-o", out, "--cpu"]) == 2
    assert "none.parquet: no such file" in capsys.readouterr().err
    assert main(["join", str(where / "l.parquet"), str(where / "r.parquet"), "--on", "k",
                 "--how", "full", "-o", out, "--cpu", "--explain"]) == 0
    said = capsys.readouterr().out
    assert "how='full'" in said and "7 rows, 4 row groups" in said and "how='left'" in said


@pytest.mark.gpu
def test_a_right_file_too_large_for_the_gpu_is_refused_before_any_work(files, capsys,
                                                                       monkeypatch):
    import torch

    where, _, _ = files
    out = where / "o.parquet"
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100, 10**10))
    assert main(["join", str(where / "l.parquet"), str(where / "r.parquet"), "--on", "k",
                 "-o", str(out)]) == 2
    said = capsys.readouterr().err
    assert "r.parquet" in said and "100 are free" in said and "larger file left" in said
    assert not out.exists()


def test_join_help_lists_its_own_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["join", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: gpuhash join")
    for words in ("--on COLUMN", "--how", "--output PATH", "--explain", "--cpu", "streamed"):
        assert words in text, words
    for words in ("--quick", "--runs", "--json"):
        assert words not in text, words
