"""``xtc xco replay`` and ``xtc xco check-config``: recorded events in, expected directives out."""

import argparse
import json
from pathlib import Path

import pytest

from xtc.xco import cli
from xtc.xco.replay import ReplayError, replay
from xtc.xco.topology import load_topology

DATA = Path(__file__).parent / "data"


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="xtc")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    rc = args.func(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_replay_matches_the_recorded_directives(capsys):
    # Worked by hand: s3's never-granted destinations go by host id (s4 before r1); s1's give-up
    # hands r1 to s2 at once; at 10 ms s3 (granted before s2) takes r1 and s2 holds; s2's leave
    # changes no directive; then s3 alternates between its two destinations.
    rc, out, err = run(["xco", "replay", str(DATA / "fig1a.toml"), str(DATA / "fig1a-events.jsonl"),
                        "--until-us", "30000"], capsys)
    assert rc == 0, err
    assert out == (DATA / "fig1a-directives.jsonl").read_text()


def test_rate_mode_gives_each_sender_its_share_of_the_bottleneck(capsys):
    lines = [json.dumps({"t_us": 0, "host": f"s{i}", "event": "backlog", "dests": [f"r{i}"]}) for i in range(1, 14)]
    topo = load_topology(DATA / "fig1b.toml")
    out = list(replay(topo, lines, mode="rate"))
    final = {}
    for d in out:
        final[(d["host"], d["dest"])] = d["rate_bps"]
    # paper, section 4.2: "the central controller throttles each sender to 10/13 Gbps"
    assert final == {(f"s{i}", f"r{i}"): 10_000_000_000 // 13 for i in range(1, 14)}
    topo = load_topology(DATA / "fig1a.toml")
    lines = [json.dumps({"t_us": 0, "host": f"s{i}", "event": "backlog", "dests": ["r1"]}) for i in range(1, 6)]
    final = {d["host"]: d["rate_bps"] for d in replay(topo, lines, mode="rate")}
    assert final == {f"s{i}": 200_000_000 for i in range(1, 6)}  # "1/5 Gbps"


@pytest.mark.parametrize("line, msg", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"t_us": 0, "host": "s1", "event": "jump"}', "event must be one of"),
    ('{"t_us": 0, "host": "s1", "event": "leave", "why": 1}', "unknown key(s) for a leave event: why"),
    ('{"t_us": 0, "host": "s1", "event": "giveup"}', "missing key(s): dest"),
    ('{"t_us": -1, "host": "s1", "event": "leave"}', "t_us must be an int"),
    ('{"t_us": 1.5, "host": "s1", "event": "leave"}', "t_us must be an int"),
    ('{"t_us": 0, "host": "zz", "event": "leave"}', "host: unknown host 'zz'"),
    ('{"t_us": 0, "host": "s1", "event": "backlog", "dests": []}', "non-empty list"),
    ('{"t_us": 0, "host": "s1", "event": "backlog", "dests": ["r1", 3]}', "dests[1] must be a host name"),
    ('{"t_us": 0, "host": "s1", "event": "backlog", "dests": ["s1"]}', "cannot send to itself"),
    ('{"t_us": 5, "host": "s1", "event": "leave"}', "goes back in time"),
])
def test_bad_line_is_named(line, msg):
    topo = load_topology(DATA / "fig1a.toml")
    lines = ['{"t_us": 10, "host": "s2", "event": "backlog", "dests": ["r1"]}', "", line]
    with pytest.raises(ReplayError) as e:
        list(replay(topo, lines, source="ev.jsonl"))
    assert str(e.value).startswith("ev.jsonl:3: ")
    assert msg in str(e.value)


def test_cli_reports_bad_line_and_bad_topology(tmp_path, capsys):
    ev = tmp_path / "ev.jsonl"
    ev.write_text('{"t_us": 0, "host": "s1", "event": "backlog", "dests": ["r1"]}\n{"t_us": 0}\n')
    rc, out, err = run(["xco", "replay", str(DATA / "fig1a.toml"), str(ev)], capsys)
    assert rc == 2 and "ev.jsonl:2: event must be one of" in err
    assert out == '{"t_us": 0, "host": "s1", "dest": "r1"}\n'
    bad = tmp_path / "t.toml"
    bad.write_text('schema = "xco-topology/1"\nswitchs = []\n')
    rc, out, err = run(["xco", "check-config", str(bad)], capsys)
    assert rc == 1 and "switchs: unknown key" in err
    rc, out, err = run(["xco", "check-config", str(DATA / "fig1b.toml")], capsys)
    assert rc == 0 and "26 hosts, 2 switches" in out
