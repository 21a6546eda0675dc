"""The README's examples run as written, and its commands are the ones the project runs.

Every ```python block runs in a fresh namespace (each block is self-contained and picks its
device itself: the GPU where there is one, else the CPU engine), in a temporary working
directory; a block is skipped only when it imports an optional package that is absent. The
first ```bash block is the install-and-test pair: its test command must be the one CI runs
(.ci/run), and the `gpuhash` command it runs must be a script the project installs. The
`gpuhash join` commands run on small Parquet files; the `gpuhash bench` commands are checked
against their suite's options, not run (a benchmark takes minutes).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
OPTIONAL = ("pyarrow", "pandas", "polars", "dask")  # the join and dask extras, and the tests'
# dependencies


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def _commands(block: str) -> list[str]:
    """The commands of a bash block: one a line, comments dropped."""
    lines = (line.split("#", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line]


PYTHON_BLOCKS = _blocks("python")
BASH_BLOCKS = _blocks("bash")


def test_the_readme_has_examples():
    assert len(PYTHON_BLOCKS) >= 6
    assert BASH_BLOCKS


@pytest.mark.parametrize("number", range(len(PYTHON_BLOCKS)))
def test_python_block_runs(number, tmp_path, monkeypatch):
    source = PYTHON_BLOCKS[number]
    for name in OPTIONAL:
        if re.search(rf"^\s*import .*\b{name}\b", source, re.MULTILINE) and (
                importlib.util.find_spec(name) is None):
            pytest.skip(f"needs {name}")
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    code = compile(source, f"README.md python block {number + 1}", "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": f"readme_block_{number + 1}"})


def test_the_two_commands_are_the_projects():
    install, test = _commands(BASH_BLOCKS[0])
    assert install == 'pip install -e ".[dev]" && gpuhash bench map --quick'
    assert test == "python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    ran = [" ".join(line.split()).replace("python3 ", "python ") for line in _commands(ci)]
    assert test in ran, "the README's test command is not the one .ci/run runs"
    assert any('install' in line and '-e ".[dev]"' in line for line in ran)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\[project\.scripts\]\s*\ngpuhash = "gpuhash\.cli:main"', pyproject,
                     re.MULTILINE), "pyproject installs no `gpuhash` script"
    assert re.search(r"^dev = \[", pyproject, re.MULTILINE), "pyproject has no dev extra"


def _gpuhash_commands() -> list[list[str]]:
    return [shlex.split(line)[1:] for block in BASH_BLOCKS[1:] for line in _commands(block)
            if line.startswith("gpuhash ")]


def _main(argv: list[str]) -> tuple[int, str]:
    from gpuhash.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    return code or 0, out.getvalue()


def test_every_command_is_shown():
    suites = {argv[1] for argv in _gpuhash_commands() if argv[0] == "bench"}
    assert "join" in {argv[0] for argv in _gpuhash_commands()}
    assert suites


@pytest.mark.parametrize("argv", [a for a in _gpuhash_commands() if a[0] == "bench"],
                         ids=" ".join)
def test_bench_command_takes_its_options(argv):
    code, shown = _main([*argv[:2], "--help"])
    assert code == 0
    for option in (word for word in argv[2:] if word.startswith("-")):
        assert option in shown, f"`gpuhash {' '.join(argv[:2])}` has no option {option}"


@pytest.mark.parametrize("argv", [a for a in _gpuhash_commands() if a[0] == "join"],
                         ids=" ".join)
def test_join_command_runs(argv, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.chdir(tmp_path)
    left, right = argv[1:3]  # gpuhash join LEFT RIGHT --on COLUMN ... -o OUTPUT
    on = argv[argv.index("--on") + 1]
    pq.write_table(pa.table({on: ["ada", "bo", "bo", "cy"], "amount": [5.0, 7.5, 1.0, 3.0]}),
                   left)
    pq.write_table(pa.table({on: ["ada", "bo"], "city": ["Oslo", "Lima"]}), right)
    code, _ = _main(argv)
    assert code == 0
    output = argv[argv.index("-o") + 1]
    assert pq.read_table(output).num_rows == 4


@pytest.mark.parametrize("argv", [a for a in _gpuhash_commands() if a[0] == "groupby"],
                         ids=" ".join)
def test_groupby_command_runs(argv, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.chdir(tmp_path)
    by = argv[argv.index("--by") + 1]
    columns = {by: ["b", "a", "b"]}
    for option in (argv[i + 1] for i, word in enumerate(argv) if word == "--agg"):
        columns[option.split(":")[0]] = [1.0, 2.0, 4.0]
    pq.write_table(pa.table(columns), argv[1])
    code, _ = _main(argv)
    assert code == 0
    assert pq.read_table(argv[argv.index("-o") + 1]).num_rows == 2


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
