"""The front door of ``xtc``: its version, its shell completion, the one line a command says when an
extra or the testbed is missing, and the changelog's version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from xtc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"xtc {version('xtc')}\n"
    assert version("xtc") == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_loads_no_part_of_the_product() -> None:
    # Every part's parser imports its modules (the training part SciPy and python-control: seconds on
    # a loaded host); the version needs none of them.
    code = ("import sys; from xtc.cli import main; main(['--version']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'control', 'numba', 'zmq', 'xtc_lab')"
            " or m.endswith('.cli') and m != 'xtc.cli'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"xtc {version('xtc')}", "[]"]


def test_the_changelog_names_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", text, re.M)
    assert newest is not None and newest.group(1) == version("xtc")


def _complete(script: Path, *words: str) -> list[str]:
    """What bash's completion of ``xtc`` offers for the command line ``words`` (the last one partial)."""
    words_q = " ".join(f"'{w}'" for w in ("xtc", *words))
    code = (f"source {script}\nCOMP_WORDS=({words_q}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
            'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _shtab_xtc\n'
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    p = subprocess.run(["bash", "--norc", "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_bash_completion_completes_commands_actions_and_options(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "xtc.cli", "completion", "bash"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    script = tmp_path / "xtc"
    script.write_text(p.stdout)
    assert _complete(script, "pol") == ["policer"]
    assert _complete(script, "policer", "se") == ["serve", "setpoint", "setpoints"]
    assert _complete(script, "xco", "ag") == ["agent"]
    assert _complete(script, "ctl", "st") == ["status"]
    assert _complete(script, "completion", "") == ["bash", "zsh"]
    assert _complete(script, "policer", "serve", "--acc") == ["--access-log"]
    assert "simulate" in _complete(script, "")  # the testbed's commands, installed here


def test_zsh_completion_is_a_zsh_completion_function() -> None:
    p = subprocess.run([sys.executable, "-m", "xtc.cli", "completion", "zsh"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("#compdef xtc"), p.stdout[:200] + p.stderr
    assert "policer:'the policing service" in p.stdout and "_shtab_xtc_policer_commands()" in p.stdout


def _run_without(modules: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``xtc argv`` in a fresh interpreter where importing any of ``modules`` fails, as when the extra
    (or the distribution) that brings them is not installed."""
    code = ("import sys\nfor m in sys.argv[1].split(','):\n    sys.modules[m] = None\n"
            "from xtc.cli import main\nsys.exit(main(sys.argv[2:]))\n")
    return subprocess.run([sys.executable, "-c", code, ",".join(modules), *argv], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))


_E = re.escape


@pytest.mark.parametrize(("modules", "argv", "line"), [
    (["fastapi", "uvicorn"], ["policer", "serve", "--port", "0"],
     _E("xtc policer serve: needs the policer extra (no module named '") + "(fastapi|uvicorn)"
     + _E("'): pip install 'xtc[policer]'")),
    (["control"], ["train", "fit", "--help"],
     _E("xtc train: needs the training extra (no module named 'control'): pip install 'xtc[training]'")),
    (["xtc_lab"], ["demo"], _E("xtc demo: part of the testbed, not installed here (no module named "
                               "'xtc_lab.demo'): pip install xtc-lab")),
    (["xtc_lab"], ["policer", "bench", "--help"],
     _E("xtc policer bench: part of the testbed, not installed here (no module named 'xtc_lab.policer_bench'): "
        "pip install xtc-lab")),
    (["xtc_lab"], ["xco", "lab", "up"],
     _E("xtc xco lab: part of the testbed, not installed here (no module named 'xtc_lab.xco'): pip install xtc-lab")),
])
def test_a_command_whose_extra_is_missing_says_which_in_one_line(modules: list[str], argv: list[str],
                                                                 line: str) -> None:
    p = _run_without(modules, *argv)
    assert (p.returncode, p.stdout) == (1, ""), p.stderr
    assert re.fullmatch(line + "\n", p.stderr), p.stderr


def test_the_other_commands_still_run_when_an_extra_is_missing() -> None:
    p = _run_without(["control", "scipy", "matplotlib", "xtc_lab"], "--help")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    listed = dict(re.findall(r"^    (\S+)\s+(.*)$", p.stdout, re.M))
    assert listed["train"] == "(not installed: pip install 'xtc[training]')"
    assert listed["demo"] == "(not installed: pip install xtc-lab)"
    assert listed["policer"].startswith("the policing service")


def test_every_example_parses_as_the_command_it_illustrates() -> None:
    """The examples that ``--help`` shows (the product's, :data:`xtc.cli.EXAMPLES`, and the testbed's
    epilogs) are command lines the parser takes, for the command they stand under."""
    import argparse
    import shlex

    from xtc.cli import EXAMPLES, build_parser

    parser = build_parser()
    shown = {}

    def walk(p: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        if p.epilog and p.epilog.startswith("example: "):
            shown[words] = p.epilog.removeprefix("example: ")
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    walk(child, (*words, name))

    walk(parser, ())
    assert set(EXAMPLES) <= set(shown)
    for words in [("lab",), ("simulate",), ("demo",), ("bench",), ("xco", "lab"), ("policer", "bench")]:
        assert words in shown, words  # the testbed's commands carry their own
    for words, example in shown.items():
        argv = shlex.split(example.split(" > ")[0])
        assert argv[0] == "xtc", example
        rest = iter(argv[1:])
        assert all(w in rest for w in words), (words, example)  # the command's words, in order
        args = parser.parse_args(argv[1:])
        assert getattr(args, "func", None) is not None, example
