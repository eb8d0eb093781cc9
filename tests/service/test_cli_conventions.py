"""One command-line convention for every service (docs/reference/cli-conventions.md), tested once
over every ``check-config`` (the daemon's, the policer's, XCo's for each of its three schemas) on
the example files in packaging/, as installed:

- exit status 0: valid (one line with OK on stdout); 1: invalid (one message on stderr naming the
  file or key, nothing on stdout); 2: usage error or a file that cannot be read;
- ``--json``: the command's result (the validated configuration) as one JSON document on stdout.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from service.test_example_configs import CHECK, EXAMPLES, PACKAGING, installed_name
from xtc.cli import main


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    d = tmp_path / "etc" / "xtc"
    d.mkdir(parents=True)
    for n in EXAMPLES:  # the XCo files name the topology by its installed name
        (d / installed_name(n)).write_bytes((PACKAGING / n).read_bytes())
    return d


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage errors
        rc = e.code if isinstance(e.code, int) else 2
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", EXAMPLES)
def test_check_config_speaks_one_convention(name: str, etc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmd = CHECK[tomllib.loads((PACKAGING / name).read_text())["schema"]]
    path = etc / installed_name(name)
    rc, out, err = _run([*cmd, str(path)], capsys)
    assert (rc, err) == (0, "") and "OK" in out, out + err
    rc, out, err = _run([*cmd, "--json", str(path)], capsys)
    assert rc == 0 and isinstance(json.loads(out), dict), out + err
    # Invalid: an unknown key, named in one message; nothing on stdout.
    bad = etc / f"bad-{installed_name(name)}"
    bad.write_text(path.read_text().replace("schema =", "bogus_key = 1\nschema =", 1))
    rc, out, err = _run([*cmd, str(bad)], capsys)
    assert rc == 1 and out == "" and "bogus_key" in err, (rc, out, err)
    # Unreadable, and no file at all: usage, 2.
    rc, out, err = _run([*cmd, str(etc / "missing.toml")], capsys)
    assert rc == 2 and out == "" and "missing.toml" in err, (rc, out, err)
    rc, out, err = _run(cmd, capsys)
    assert rc == 2 and out == "", (rc, out, err)


#: schema -> the command that runs the service on a configuration file
RUN = {
    "xtc-daemon/1": ["daemon", "-c"],
    "xtc-policer/1": ["policer", "serve", "-c"],
    "xco-controller/1": ["xco", "controller", "-c"],
    "xco-agent/1": ["xco", "agent", "-c"],
}


@pytest.mark.parametrize("name", [n for n in EXAMPLES if tomllib.loads((PACKAGING / n).read_text())["schema"] in RUN])
def test_a_service_refuses_an_invalid_configuration_before_it_starts(
        name: str, etc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit status 2 and one line on stderr naming the command, the file and the key; nothing on stdout."""
    cmd = RUN[tomllib.loads((PACKAGING / name).read_text())["schema"]]
    bad = etc / f"bad-{installed_name(name)}"
    bad.write_text((etc / installed_name(name)).read_text().replace("schema =", "bogus_key = 1\nschema =", 1))
    rc, out, err = _run([*cmd, str(bad)], capsys)
    assert rc == 2 and out == "", (rc, out, err)
    assert err.startswith(f"xtc {cmd[0]}") and str(bad) in err and "'bogus_key': unknown key" in err, err
    assert len(err.splitlines()) == 1, err
