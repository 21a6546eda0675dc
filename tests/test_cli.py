"""The command line on the CPU: help, version, refused options, the tables it prints, and
quick CPU benchmarks."""

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gpuhash
from gpuhash.bench import report
from gpuhash.cli import main

SRC = str(Path(gpuhash.__file__).parents[1])  # the tree under test, for fresh interpreters


def _fresh(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _imported(importtime: str) -> set[str]:
    """The modules a ``-X importtime`` report names."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuhash {gpuhash.__version__}"


def test_bare_invocation_prints_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpuhash")
    assert "bench" in out and "--version" in out


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["bench", "map", "--help"],
                                  ["join", "--help"]], ids=" ".join)
def test_version_and_help_do_not_import_torch(args):
    """They answer without loading torch, numba or pyarrow (which take seconds)."""
    done = _fresh("-X", "importtime", "-m", "gpuhash.cli", *args)
    assert done.returncode == 0, done.stderr
    assert "gpuhash" in done.stdout
    assert not _imported(done.stderr) & {"torch", "numba", "pyarrow"}


def test_import_gpuhash_is_lazy_and_its_names_resolve():
    code = """if True:
        import sys
        import gpuhash as gh
        assert "torch" not in sys.modules
        from gpuhash.join import plan  # binds the subpackage gpuhash.join: gh.join stays
        assert callable(gh.join) and gh.join.__module__ == "gpuhash.join.api"
        from gpuhash.join.strategies import STRATEGIES
        assert callable(STRATEGIES["out-of-core-streams"].run)
        from gpuhash import *
        assert all(getattr(gh, name) is not None for name in gh.__all__)
        assert set(gh.__all__) <= set(dir(gh))
        print(sorted(gh.__all__))
    """
    done = _fresh("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted(gpuhash.__all__))


@pytest.mark.parametrize(("suite", "own", "others"), [
    ("map", ["--layouts", "HashMap", "find_index", "Python dict"], ["CacheMap", "DuckDB"]),
    ("cache", ["CacheMap", "HierarchicalKV", "bucket shape"], ["--layouts", "DuckDB"]),
    ("join", ["DuckDB", "J1-J5", "semi"], ["--layouts", "CacheMap", "HierarchicalKV"]),
])
def test_each_suite_has_its_own_help(suite, own, others, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", suite, "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith(f"usage: gpuhash bench {suite}")
    for words in [*own, "--quick", "--runs", "--json", "--plot", "--cpu"]:
        assert words in text, words
    for words in others:
        assert words not in text, words


def test_bench_help_lists_the_suites(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {suite} " in out for suite in ("map", "cache", "join"))
    assert "--quick" not in out  # the suites' options are in their own help


def test_bench_map_help_says_what_it_measures(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "map", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("HashMap", "insert", "find_index", "load factors", "memory ceiling",
                  "measured in the same run", "Python dict", "CPU engine"):
        assert words in text, words


@pytest.mark.parametrize(("suite", "option", "refusal"), [
    ("map", ["--plot", "x.png"], "--plot needs a GPU"),
    ("map", ["--layouts"], "--layouts needs a GPU"),
    ("cache", ["--plot", "x.png"], "--plot needs a GPU"),
    ("cache", ["--layouts"], "gpuhash bench cache: error: unrecognized arguments: --layouts"),
    ("join", ["--layouts"], "gpuhash bench join: error: unrecognized arguments: --layouts"),
], ids=str)
def test_options_refused_on_the_cpu(suite, option, refusal, capsys, tmp_path, monkeypatch):
    """Refused before anything runs: plots of map and cache need a GPU's figures, fixed
    layouts are the map suite's option alone. (join --plot on the CPU runs: see below.)"""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", suite, "--quick", "--cpu", *option])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert refusal in err
    assert "needs a GPU" not in refusal or "--cpu was given" in err
    assert not (tmp_path / "x.png").exists()


def test_plot_refused_without_matplotlib_before_the_run(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "join", "--quick", "--cpu", "--plot", "x.png"])
    assert exit_info.value.code == 2
    assert "pip install 'gpuhash[plot]'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_gpu_only_option_refused_without_cuda(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "map", "--plot", "x.png"])
    assert exit_info.value.code == 2
    assert "--plot needs a GPU (no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("runs", ["0", "-1", "many"])
def test_runs_must_be_a_positive_count(runs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "map", "--cpu", "--runs", runs])
    assert exit_info.value.code == 2
    assert "--runs" in capsys.readouterr().err


def test_quick_cpu_bench_writes_json(tmp_path, capsys):
    path = tmp_path / "map.json"
    assert main(["bench", "map", "--quick", "--cpu", "--runs", "2", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "CPU engine" in out
    _assert_markdown(out)
    _assert_steps_counted(err, "map")
    report = json.loads(path.read_text())
    assert report["suite"] == "map" and report["quick"] is True and report["runs"] == 2
    configs = report["cpu"]["configs"]
    assert {(c["kind"], c["load"]) for c in configs} == {
        (kind, load) for kind in ("u32->u32", "u64->f32x8") for load in (0.5, 0.9)}
    assert all(c["timings"]["insert"]["runs"] == 2 for c in configs)
    assert all(c["insert_m_per_s"] > 0 and c["find_hit_m_per_s"] > 0 for c in configs)
    assert report["cpu"]["versus_dict"]["keys"] == 2**16
    peers = report["cpu"]["peers"]
    assert peers["keys"] == 2**18
    assert {"gpuhash CPU engine", "Python dict", "torch sort + searchsorted"} <= set(peers["peers"])
    ours = peers["peers"]["gpuhash CPU engine"]
    assert ours["engine_find_speedup"] == 1.0 and ours["find_ms"] > 0
    assert peers["rows_u64_f32x8"]["ratio"] > 0


def test_quick_cpu_join_bench_writes_json_and_a_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path, picture = tmp_path / "join.json", tmp_path / "join.png"
    assert main(["bench", "join", "--quick", "--cpu", "--runs", "2", "--json", str(path),
                 "--plot", str(picture)]) == 0
    out, err = capsys.readouterr()
    assert "gpuhash join" in out
    _assert_markdown(out)
    _assert_steps_counted(err, "join")
    report = json.loads(path.read_text())
    assert report["suite"] == "join" and [r["name"] for r in report["results"]] == ["J1", "J2"]
    assert all(r["gpuhash_ms"] > 0 for r in report["results"])
    assert picture.stat().st_size > 10_000 and picture.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_an_output_in_a_missing_directory_is_refused_before_the_run(option, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["bench", "join", "--quick", "--cpu", option, str(tmp_path / "no" / "x")])
    assert "its directory does not exist" in capsys.readouterr().err


def _assert_markdown(out: str) -> None:
    """Printed to a file or a pipe: markdown pipe tables, no cell cut short."""
    assert "\u2026" not in out and "..." not in out
    tables = [line for line in out.splitlines() if line.startswith("| :---")]
    assert tables, out
    for line in out.splitlines():
        assert not line.startswith("|") or line.endswith("|"), line


def _assert_steps_counted(err: str, suite: str) -> None:
    """Not on a terminal: a line on stderr as each step starts, n of m, the last n == m."""
    steps = [line for line in err.splitlines() if line.startswith(f"gpuhash bench {suite} [")]
    assert steps, err
    counts = [line.split("[", 1)[1].split("]", 1)[0].split("/") for line in steps]
    assert [int(n) for n, _ in counts] == list(range(1, len(steps) + 1))
    assert {int(m) for _, m in counts} == {len(steps)}


LONG = [["u64->f32x8", "33,554,432 x 100,000,000", "12.34 (0.83)", "1,234.56 (123.45x)"],
        ["torch sort + searchsorted", "1M", "2.41 (0.79)", "-"]]


def test_tables_in_a_file_are_markdown_with_every_cell_whole(capsys):
    report.show_table("a title longer than eighty columns, which a terminal would have to "
                      "wrap somewhere", ["type", "build x probe", "find hit", "duckdb"], LONG)
    out = capsys.readouterr().out
    _assert_markdown(out)
    lines = out.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| type")))
    assert lines[header + 1].startswith("| :---") and lines[header + 1].endswith(": |")
    for row, line in zip(LONG, lines[header + 2:]):
        assert [cell.strip() for cell in line.strip("|").split(" | ")] == row


def test_tables_on_a_narrow_terminal_wrap_instead_of_cutting(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(report, "console", report.Console(file=screen, width=40,
                                                          force_terminal=True,
                                                          color_system=None))
    monkeypatch.setattr(report, "on_terminal", lambda: True)
    report.show_table("HashMap finds", ["type", "build x probe", "find hit", "duckdb"], LONG)
    text = screen.getvalue()
    assert "\u2026" not in text
    assert max(len(line) for line in text.splitlines()) <= 40
    # every digit of every cell is on the screen: cells folded, none cut short
    assert sorted(c for c in text if c.isdigit()) == sorted(
        c for row in LONG for cell in row for c in cell if c.isdigit())
