"""The lab's Figure 27 generator and the scheduler benchmark, on a small size."""

from xtc.xco.topology import parse_topology
from xtc_lab.xco.bench import bench_one
from xtc_lab.xco.topologies import fig27, fig27_pairs


def test_fig27_shape_and_paths():
    topo = parse_topology(fig27(4))
    assert topo.n_hosts == 800
    pairs = fig27_pairs(4)
    x, d = pairs[0]
    assert topo.hosts[x] == "h0_0_0" and topo.hosts[d] == "h2_0_0"
    assert topo.path_names("h0_0_0", "h2_0_0") == [
        "h0_0_0>tor0_0", "tor0_0>eor0", "eor0>core", "core>eor2", "eor2>tor2_0", "tor2_0>h2_0_0"]
    assert topo.slow_paths == ()


def test_bench_reports_every_field_and_fills_the_core():
    r = bench_one(800, n_events=50)
    assert set(r) >= {"hosts", "mode", "event_p50_us", "event_p99_us", "events_per_s_one_core", "full_schedule_ms"}
    # 4 rows, each row's 10 Gb/s uplink takes ten 1 Gb/s senders
    assert r["hosts"] == 800 and r["transmitting_per_slot"] == 40


def test_bench_names_the_implementation_and_its_compile_time():
    from xtc.xco.scheduler import fast
    from xtc_lab.xco.bench import kernel_info

    k = kernel_info()
    assert k["impl"] == fast.IMPL
    if fast.IMPL == "numba":
        assert k["warm_up_s"] is not None and k["warm_up_s"] > 0
    else:
        assert k["warm_up_s"] is None


def test_load_test_batches_what_arrived_during_the_previous_read():
    from xtc_lab.xco.bench import load_test

    one = load_test(800, sim_s=0.02, batched=False)
    many = load_test(800, events_per_s=600_000, sim_s=0.02)
    assert one["mean_batch"] == 1.0 and one["batches"] == one["events"] > 500
    assert many["batches"] < many["events"] and many["mean_batch"] > 1  # 10x the rate: reads pile up
    assert many["boundaries"] == one["boundaries"] == 9


def test_sim_test_reports_the_simulators_wall_time_and_loss():
    from xtc_lab.xco.bench import sim_test

    r = sim_test(400, sim_s=0.02, cores=False)
    assert r["hosts"] == 400 and r["mode"] == "timeslice" and r["sim_s"] == 0.02
    assert r["wall_s"] >= 0 and r["loss_pct"] == 0.0 and r["loss_after_start_pct"] is None
    c = sim_test(400, sim_s=0.06)  # the cores: the agents' start loses, nothing after it
    assert c["cores"] and 0 < c["cores_wall_s"] <= c["wall_s"]
    assert c["loss_pct"] > 10 and c["loss_after_start_pct"] == 0.0
    assert sim_test(400, sim_s=0.02, mode="none")["loss_pct"] > 50  # (the mode is the one simulated)
