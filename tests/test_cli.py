"""The command line on the CPU: help, version, refused options and a quick CPU benchmark."""

import importlib.util
import json

import pytest
import torch

import gpuhash
from gpuhash.cli import main


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
    ("cache", ["--layouts"], "--layouts belongs to the map suite"),
    ("join", ["--layouts"], "--layouts belongs to the map suite"),
], ids=str)
def test_options_refused_on_the_cpu(suite, option, refusal, capsys, tmp_path, monkeypatch):
    """Refused before anything runs: plots of map and cache need a GPU's figures, fixed
    layouts belong to the map suite. (join --plot on the CPU runs: see below.)"""
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
    assert "CPU engine" in capsys.readouterr().out
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
    assert "gpuhash join" in capsys.readouterr().out
    report = json.loads(path.read_text())
    assert report["suite"] == "join" and [r["name"] for r in report["results"]] == ["J1", "J2"]
    assert all(r["gpuhash_ms"] > 0 for r in report["results"])
    assert picture.stat().st_size > 10_000 and picture.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_an_output_in_a_missing_directory_is_refused_before_the_run(option, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["bench", "join", "--quick", "--cpu", option, str(tmp_path / "no" / "x")])
    assert "its directory does not exist" in capsys.readouterr().err
