"""The xco-topology/1 loader: validation (the key is named), spanning tree, paths, slow NICs."""

from pathlib import Path

import numpy as np
import pytest

from xtc.xco.topology import TopologyError, load_topology, parse_topology

DATA = Path(__file__).parent / "data"
G = 1_000_000_000


def base(**extra):
    d = {
        "schema": "xco-topology/1",
        "switch": [{"name": "a"}, {"name": "b"}],
        "host": [
            {"name": "h1", "nic_bps": G, "switch": "a", "vms": ["10.0.0.1"]},
            {"name": "h2", "nic_bps": G, "switch": "b"},
        ],
        "link": [{"ends": ["a", "b"], "bps": 10 * G}],
    }
    d.update(extra)
    return d


def test_fig1b_paths_are_link_ids_in_order():
    t = load_topology(DATA / "fig1b.toml")
    assert t.n_hosts == 26
    assert t.path_names("s1", "r1") == ["s1>swA", "swA>swB", "swB>r1"]
    assert t.path_names("r3", "s2") == ["r3>swB", "swB>swA", "swA>s2"]
    assert t.path_names("s1", "s2") == ["s1>swA", "swA>s2"]
    p = t.path(t.host_id("s1"), t.host_id("r1"))
    assert p.dtype == np.int32 and not p.flags.writeable
    assert t.link_bps[p].tolist() == [G, 10 * G, G]
    assert t.vms == {}
    assert t.slow_paths == ()


def test_loops_get_a_spanning_tree_from_the_root():
    # a triangle of switches plus a tail; root c: tree = c-a, c-b, b-d (a-b is dropped)
    d = base(
        switch=[{"name": n} for n in "abcd"],
        host=[{"name": "h1", "nic_bps": G, "switch": "a"}, {"name": "h2", "nic_bps": G, "switch": "d"}],
        link=[{"ends": ["a", "b"], "bps": G}, {"ends": ["b", "c"], "bps": G},
              {"ends": ["c", "a"], "bps": G}, {"ends": ["b", "d"], "bps": G}],
        spanning_tree={"root": "c"},
    )
    t = parse_topology(d)
    assert t.root == "c"
    assert sorted(t.tree_links) == [("a", "c"), ("b", "c"), ("d", "b")]
    assert t.path_names("h1", "h2") == ["h1>a", "a>c", "c>b", "b>d", "d>h2"]


def test_given_tree_is_used():
    d = base(
        switch=[{"name": n} for n in "abc"],
        host=[{"name": "h1", "nic_bps": G, "switch": "a"}, {"name": "h2", "nic_bps": G, "switch": "b"}],
        link=[{"ends": ["a", "b"], "bps": G}, {"ends": ["b", "c"], "bps": G}, {"ends": ["c", "a"], "bps": G}],
        spanning_tree={"links": [["a", "c"], ["c", "b"]]},
    )
    t = parse_topology(d)
    assert t.path_names("h1", "h2") == ["h1>a", "a>c", "c>b", "b>h2"]


def test_fast_nic_behind_slow_link_is_named():
    d = base(host=[
        {"name": "h1", "nic_bps": 10 * G, "switch": "a"},
        {"name": "h2", "nic_bps": G, "switch": "b", "port_bps": G},
        {"name": "h3", "nic_bps": G, "switch": "a"},
    ], link=[{"ends": ["a", "b"], "bps": 5 * G}])
    t = parse_topology(d)
    named = {(s.host, s.link): s.dests for s in t.slow_paths}
    # h1 (10G) crosses a>b (5G) towards h2, and h2's 1G cable, and h3's 1G cable
    assert named == {("h1", "a>b"): ("h2",), ("h1", "b>h2"): ("h2",), ("h1", "a>h3"): ("h3",)}
    assert "h1" in str(t.slow_paths[0])


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d.update(colour="red"), "colour: unknown key"),
    (lambda d: d["host"][1].update(nic=1), "host[1].nic: unknown key"),
    (lambda d: d["host"][0].pop("nic_bps"), "host[0].nic_bps: required key is missing"),
    (lambda d: d["host"][1].update(nic_bps="1G"), "host[1].nic_bps"),
    (lambda d: d["host"][1].update(nic_bps=0), "host[1].nic_bps"),
    (lambda d: d["host"][0].update(vms=["10.0.0.300"]), "host[0].vms"),
    (lambda d: d["link"][0].update(bps=-1), "link[0].bps"),
    (lambda d: d["link"][0].update(ends=["a"]), "link[0].ends"),
    (lambda d: d["link"][0].update(buffer_bytes=-5), "link[0].buffer_bytes"),
    (lambda d: d.update(schema="xco-topology/2"), "schema"),
    (lambda d: d.pop("schema"), "schema: required key is missing"),
    (lambda d: d["host"][1].update(switch="zz"), "host[1].switch: unknown switch 'zz'"),
    (lambda d: d["host"][1].update(name="h1"), "host[1].name: duplicate host 'h1'"),
    (lambda d: d["host"][1].update(name="a"), "host[1].name"),
    (lambda d: d["switch"].append({"name": "a"}), "switch[2].name: duplicate"),
    (lambda d: d["link"][0].update(ends=["a", "q"]), "link[0].ends[1]: unknown switch 'q'"),
    (lambda d: d["link"].append({"ends": ["b", "a"], "bps": 1}), "link[1].ends"),
    (lambda d: d["switch"].append({"name": "lonely"}), "link: switches not connected"),
    (lambda d: d.update(spanning_tree={"root": "nope"}), "spanning_tree.root"),
    (lambda d: d.update(spanning_tree={"links": [["a", "c"]]}), "spanning_tree.links[0]"),
    (lambda d: d.update(spanning_tree={"links": []}), "spanning_tree.links"),
    (lambda d: d.update(spanning_tree={"rooot": "a"}), "spanning_tree.rooot: unknown key"),
    (lambda d: d["host"][1].update(vms=["10.0.0.1"]), "host[1].vms[0]: address 10.0.0.1"),
    (lambda d: d.update(host=d["host"][:1]), "host"),
])
def test_bad_topology_is_refused_with_the_key_named(mutate, key):
    d = base()
    mutate(d)
    with pytest.raises(TopologyError) as e:
        parse_topology(d)
    assert key in str(e.value)


def test_bad_file_names_file_and_key(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text('schema = "xco-topology/1"\n[[switch]]\nname = "a"\n[[host]]\nname = "h"\nnic_bps = 1\nswitch = "a"\nspeed = 3\n')
    with pytest.raises(TopologyError, match=r"t\.toml: .*host\[0\]\.speed: unknown key"):
        load_topology(p)
    p.write_text("schema = \n")
    with pytest.raises(TopologyError, match="not valid TOML"):
        load_topology(p)
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(tmp_path / "missing.toml")
