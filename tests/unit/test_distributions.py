"""The repository's two distributions, built and installed as an operator would: the product (``xtc``,
pyproject.toml) holds no testbed, the testbed (``xtc-lab``, lab/pyproject.toml) holds its C sources and
entry points, and the product installed alone with its base dependencies into a clean virtual
environment gives an ``xtc`` whose every command and action either works (``--help``) or says in one
line which extra or distribution it needs: never a traceback.

Builds with pip (build isolation, the pip cache; the only network is the package index) from a copy
of the tree, so that nothing is written into the checkout."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from xtc.cli import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LAB = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())["project"]
VERSION = PRODUCT["version"]
_SKIP = {".venv", ".git", "build", "dist", "docs", "out", "__pycache__", ".pytest_cache", ".hypothesis"}

pytestmark = pytest.mark.slow


def _pip(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both wheels, built by ``pip wheel`` from a copy of the checkout."""
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=lambda _d, names: [n for n in names if n in _SKIP or n.endswith(".egg-info")])
    _pip("wheel", "-q", "--no-deps", "-w", str(tmp / "wheels"), str(src), str(src / "lab"))
    found = {w.name.split("-")[0]: w for w in (tmp / "wheels").glob("*.whl")}
    assert set(found) == {"xtc", "xtc_lab"}, found
    return found


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def _read(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(suffix)]
        return z.read(name).decode()


def test_the_product_wheel_holds_the_product_alone(wheels: dict[str, Path]) -> None:
    names = _names(wheels["xtc"])
    assert {n.split("/")[0] for n in names} == {"xtc", f"xtc-{VERSION}.dist-info"}
    assert [n for n in names if "xtc_lab" in n or n.endswith(".c")] == []
    assert "[console_scripts]\nxtc = xtc.cli:main" in _read(wheels["xtc"], ".dist-info/entry_points.txt")
    assert "xtc.commands" not in _read(wheels["xtc"], ".dist-info/entry_points.txt")
    # the licence the metadata names, and the models and training data the product reads
    assert "Apache License" in _read(wheels["xtc"], "/LICENSE")
    assert any(n.startswith("xtc/models/") and n.endswith(".toml") for n in names)


def test_the_lab_wheel_holds_the_testbed_its_c_sources_and_entry_points(wheels: dict[str, Path]) -> None:
    names = set(_names(wheels["xtc_lab"]))
    assert {n.split("/")[0] for n in names} == {"xtc_lab", f"xtc_lab-{VERSION}.dist-info"}
    sources = {str(p.relative_to(ROOT / "lab")) for p in (ROOT / "lab" / "xtc_lab").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert {s for s in sources if s.endswith(".c")} >= {"xtc_lab/lab/forwarder.c", "xtc_lab/lab/udpsend.c",
                                                        "xtc_lab/xco/agent_floor.c"}
    assert sources - names == set()  # every file of the testbed ships, its C sources included
    eps = _read(wheels["xtc_lab"], ".dist-info/entry_points.txt")
    for group in ("xtc.commands", "xtc.xco_commands", "xtc.policer_commands", "xtc.hosts", "xtc.sweep_targets"):
        assert f"[{group}]" in eps
    assert f"Requires-Dist: xtc[net,policer,training,xco]=={VERSION}" in _read(wheels["xtc_lab"], "/METADATA")
    assert LAB["version"] == VERSION  # the two go together


_WALK = r"""
import argparse, contextlib, io, json, sys
from xtc import cli

def paths(parser, words=()):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, p in a.choices.items():
                yield (*words, name)
                yield from paths(p, (*words, name))

out = []
for words in [(), *paths(cli.build_parser())]:
    argv = [*words, "--help"]
    o, e = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            rc = cli.main(argv)
    except SystemExit as x:
        rc = x.code
    out.append({"argv": argv, "rc": rc, "out": o.getvalue(), "err": e.getvalue()})
print(json.dumps(out))
"""


def test_the_product_alone_with_base_dependencies_answers_every_command(
        wheels: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    _pip("--python", str(py), "install", "-q", str(wheels["xtc"]))
    listed = json.loads(_pip("--python", str(py), "list", "--format", "json").stdout)
    installed = {d["name"].lower().replace("_", "-") for d in listed}
    assert installed.isdisjoint({"xtc-lab", "psutil", "fastapi", "scipy", "pyroute2", "libvirt-python"}), installed

    xtc = venv / "bin" / "xtc"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(xtc), *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)

    p = run("--version")
    assert (p.returncode, p.stdout) == (0, f"xtc {VERSION}\n"), p.stderr
    p = run("--help")
    assert p.returncode == 0 and "daemon" in p.stdout and "Traceback" not in p.stderr, p.stderr
    p = run("nosuch")
    assert p.returncode == 2 and "invalid choice: 'nosuch'" in p.stderr and "Traceback" not in p.stderr
    # run, not only --help: a command whose extra is missing says which, in one line
    p = run("policer", "serve", "--port", "0")
    assert p.returncode == 1 and re.fullmatch(r"xtc policer serve: needs the policer extra \(no module named "
                                              r"'\w+'\): pip install 'xtc\[policer\]'\n", p.stderr), p.stderr
    p = run("demo")
    assert (p.returncode, p.stderr) == (1, "xtc demo: part of the testbed: pip install xtc-lab\n")

    walk = subprocess.run([str(py), "-c", _WALK], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert walk.returncode == 0, walk.stderr[-3000:]  # no command's --help raised
    results = json.loads(walk.stdout)
    answered, unavailable = [], {}
    for r in results:
        name = " ".join(["xtc", *r["argv"][:-1]])
        if r["rc"] == 0:
            assert r["out"].startswith("usage: xtc") and r["err"] == "", r
            assert "example: xtc " in r["out"], r  # one example per command (its epilog)
            answered.append(name)
        else:
            assert r["rc"] == 1 and r["out"] == "" and r["err"].count("\n") == 1, r  # one line
            assert r["err"].startswith(name + ": ") and "pip install " in r["err"], r
            unavailable[name] = r["err"].rsplit(": ", 1)[1].strip()
    # every command and action of the product but training's (scipy, control): its --help, with an example
    assert sorted(answered) == sorted(["xtc"] + [" ".join(["xtc", *k]) for k in EXAMPLES if k[0] != "train"])
    assert unavailable == {
        "xtc train": "pip install 'xtc[training]'",
        "xtc bench": "pip install xtc-lab", "xtc demo": "pip install xtc-lab", "xtc lab": "pip install xtc-lab",
        "xtc simulate": "pip install xtc-lab", "xtc policer bench": "pip install xtc-lab",
        "xtc xco lab": "pip install xtc-lab",
    }
