"""``--kind`` plumbing of ``xtc lab run`` and ``xtc demo`` (issue 49 item 1/3): argument handling only,
no lab is built (the QEMU runs themselves are in docs/results/*-qemu-loop/)."""

from __future__ import annotations

import argparse
import types

import pytest
from xtc_lab.lab import cli as lab_cli
from xtc_lab.lab.experiments import available, tracking
from xtc_lab.lab.harness import LAB_MODES, RunContext, check_lab_mode
from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.qemu import QemuError, hog_command


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xtc")
    lab_cli.register(p.add_subparsers(dest="cmd"))
    return p


def test_run_takes_kind_and_defaults_to_none():
    p = run_parser()
    assert p.parse_args(["lab", "run", "tracking", "--kind", "qemu"]).kind == "qemu"
    assert p.parse_args(["lab", "run", "capsweep"]).kind is None


def test_run_refuses_an_unknown_kind(capsys):
    with pytest.raises(SystemExit):
        run_parser().parse_args(["lab", "run", "tracking", "--kind", "xen"])
    assert "--kind" in capsys.readouterr().err


def test_qemu_experiments_are_capsweep_tracking_hog_and_tcpudp():
    exps = available()
    assert lab_cli.experiments_for("all", "qemu", exps) == ["capsweep", "tracking", "hog", "tcpudp"]
    assert lab_cli.experiments_for("tracking", "qemu", exps) == ["tracking"]
    # every experiment still runs on LXC VRs
    assert lab_cli.experiments_for("all", "lxc", exps) == list(exps)


def test_an_experiment_that_cannot_run_on_qemu_says_which_kinds_it_can():
    with pytest.raises(ValueError, match=r"sixvr does not run on --kind qemu VRs \(it runs on: lxc\)"):
        lab_cli.experiments_for("sixvr", "qemu", available())
    with pytest.raises(ValueError, match="--kind 'xen'"):
        lab_cli.experiments_for("tracking", "xen", available())


def test_cmd_run_rejects_a_kind_before_touching_the_host(capsys, monkeypatch):
    from xtc_lab.lab import harness

    monkeypatch.setattr(harness, "lab_host_problem", lambda kind: pytest.fail("the host was checked"))
    args = run_parser().parse_args(["lab", "run", "rtt", "--kind", "qemu"])
    assert lab_cli.cmd_run(args) == lab_cli.EXIT_ERROR
    assert "rtt does not run on --kind qemu" in capsys.readouterr().err


def test_cmd_run_checks_the_host_for_the_chosen_kind(capsys, monkeypatch):
    from xtc_lab.lab import harness

    seen = []
    monkeypatch.setattr(harness, "lab_host_problem", lambda kind: seen.append(kind) or "no QEMU here")
    args = run_parser().parse_args(["lab", "run", "capsweep", "--kind", "qemu"])
    assert lab_cli.cmd_run(args) == lab_cli.EXIT_UNSUPPORTED
    assert seen == ["qemu"]
    assert "(qemu VRs): no QEMU here" in capsys.readouterr().err


def test_run_context_carries_the_kind():
    assert RunContext(out_dir=None).kind == "lxc"  # type: ignore[arg-type]
    assert RunContext(out_dir=None, kind="qemu").kind == "qemu"  # type: ignore[arg-type]


def test_lab_modes():
    assert LAB_MODES == lab_cli.LAB_KINDS
    assert check_lab_mode("qemu") == "qemu"
    with pytest.raises(LabError, match="unknown VR kind 'kvm'"):
        check_lab_mode("kvm")


@pytest.mark.parametrize(("kind", "vr_mode", "want"), [(None, "lxc", "lxc"), (None, "netns", "netns"),
                                                        ("qemu", "lxc", "qemu"), ("netns", "netns", "netns")])
def test_tracking_vr_from_kind_and_vr_mode(kind, vr_mode, want):
    assert tracking.vr_mode_of(kind, vr_mode) == want


def test_tracking_kind_and_vr_mode_that_disagree_are_refused():
    with pytest.raises(ValueError, match="--kind qemu and --vr-mode netns"):
        tracking.vr_mode_of("qemu", "netns")


def test_guest_hog_commands():
    assert hog_command(True) == "hog-on 0\n"
    assert hog_command(True, 19) == "hog-on 19\n"
    assert hog_command(False) == "hog-off\n"
    for bad in (20, -21, 1.5, True, "3"):
        with pytest.raises(QemuError, match="hog nice"):
            hog_command(True, bad)  # type: ignore[arg-type]


def demo_args(**kw):
    base = {"sim": False, "kind": None, "out": "unused", "lab_duration_s": 40.0, "offered_pps": 80_000.0}
    return types.SimpleNamespace(**{**base, **kw})


def test_demo_kind_and_sim_conflict(capsys):
    from xtc_lab import demo

    assert demo.main(demo_args(sim=True, kind="qemu")) == 1
    assert "--kind" in capsys.readouterr().err


def test_demo_with_a_kind_the_host_cannot_run_fails_instead_of_simulating(capsys, monkeypatch):
    from xtc_lab import demo
    from xtc_lab.lab import harness

    monkeypatch.setattr(harness, "lab_host_problem", lambda kind: f"no {kind} here")
    monkeypatch.setattr(demo, "main_sim", lambda args: pytest.fail("fell back to the simulation"))
    assert demo.main(demo_args(kind="qemu")) == 4
    assert "cannot run qemu VRs here: no qemu here" in capsys.readouterr().err


def test_demo_parser_takes_kind():
    from xtc_lab import demo

    p = argparse.ArgumentParser()
    demo.register(p.add_subparsers(dest="cmd"))
    assert p.parse_args(["demo", "--kind", "qemu"]).kind == "qemu"
    assert p.parse_args(["demo"]).kind is None


def tracking_doc(accel="tcg", controllers=("xtc",)):
    step = {"setpoint_pps": 2100.0, "mean_pps": 2093.27, "settling_periods": 3}
    return {"vr_mode": "qemu", "accel": accel, "model": "paper", "free_pps": 21034.0, "generator_sent_pps": 25010.0,
            "controllers": {c: {"steps": [step], "load_avg_1m": [2.5, 2.9]} for c in controllers}}


def test_vm_tracking_report_has_the_issue_schema():
    rep = tracking.vm_tracking_report([("default", tracking_doc()), ("capsweep-model.toml", tracking_doc())])
    assert rep["kind"] == "qemu" and rep["accel"] == "tcg"
    assert [r["model"] for r in rep["runs"]] == ["default", "capsweep-model.toml"]
    r = rep["runs"][0]
    assert r["uncapped_kpps"] == 21.034 and r["generator_sent_kpps"] == 25.01 and r["load_avg_1m"] == [2.5, 2.9]
    assert r["rows"] == [{"setpoint_pps": 2100.0, "steady_mean_pps": 2093.3, "settle_periods": 3}]


def test_vm_tracking_report_refuses_mixed_runs():
    with pytest.raises(ValueError, match="different VRs"):
        tracking.vm_tracking_report([("default", tracking_doc("tcg")), ("m", tracking_doc("kvm"))])
    with pytest.raises(ValueError, match="no controller 'xtc'"):
        tracking.vm_tracking_report([("default", tracking_doc(controllers=("pi",)))])


def test_building_the_guest_image_leaves_other_versions_in_use(tmp_path):
    """Two checkouts with different init scripts share the cache: building one must not delete the
    other's image while a domain may be booting from it (seen: 'unable to stat .../initrd-...gz')."""
    import os
    import time

    from xtc_lab.lab import qemu

    if qemu.missing_requirements():
        pytest.skip("no guest kernel/busybox here: " + "; ".join(qemu.missing_requirements()))
    other = tmp_path / "initrd-6.1.0-0-amd64-0123456789abcdef.gz"
    other.write_bytes(b"another checkout's image")
    stale = tmp_path / "initrd-6.1.0-0-amd64-fedcba9876543210.gz"
    stale.write_bytes(b"an image nobody built for days")
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    img = qemu.build_image(cache=tmp_path)
    assert img.initrd.exists()
    assert other.exists()
    assert not stale.exists()


SHELL_WORDS = {"if", "then", "else", "fi", "for", "in", "do", "done", "while", "case", "esac", "exec", "read", "echo",
               "kill", "wait", "sleep", "continue", "return", "basename", "arg", "byaddr", "cat", "tr", "sed", "ls",
               "hog", "hog-on", "hog-off", "true", "false"}


def script_commands(script: str) -> set[str]:
    """The command words of a shell script (first word of each simple command; shell syntax left out)."""
    import re

    out = set()
    for line in script.splitlines():
        line = re.sub(r"'[^']*'", "''", line.split(" #", 1)[0].strip())
        if not line or line.startswith("#"):
            continue
        for seg in re.split(r"\$\(|;;|;|&&|\|\||\||&|\(|\)|\{|\}|\bdo\b|\bthen\b|\belse\b", line):
            words = seg.split()
            while words and re.fullmatch(r"[A-Za-z_]+=\S*", words[0]):
                words = words[1:]  # VAR=value prefixes
            if words and re.fullmatch(r"[a-z][a-z0-9_-]*", words[0]) and not words[0].endswith(")"):
                out.add(words[0])
    return out


def test_every_command_of_the_guest_init_is_a_busybox_applet():
    """The guest has only busybox: a command it lacks fails silently in the guest (seen: 'nice')."""
    import shutil
    import subprocess

    from xtc_lab.lab import qemu

    if not qemu.BUSYBOX.exists() or shutil.which("sh") is None:
        pytest.skip(f"no {qemu.BUSYBOX} here")
    applets = set(subprocess.run([str(qemu.BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split())
    used = script_commands(qemu.INIT_SCRIPT) - SHELL_WORDS
    assert {"mount", "stty", "insmod", "ip", "arp"} <= used  # the parser sees the script's commands
    assert used - applets == set()


def test_tcpudp_refuses_the_forwarder_rcvbuf_on_qemu_before_building_a_lab(monkeypatch):
    from xtc_lab.lab.experiments import tcpudp

    monkeypatch.setattr(tcpudp, "experiment_lab", lambda *a, **k: pytest.fail("a lab was built"))
    args = argparse.Namespace(tcpudp_hold=20.0, tcpudp_udp_share=0.2, tcpudp_frame=524, tcpudp_rcvbuf=65536, model=None)
    ctx = RunContext(out_dir=None, kind="qemu", say=lambda m: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--tcpudp-rcvbuf .* does not apply to --kind qemu"):
        tcpudp.run(ctx, args)


def test_up_refuses_a_bad_qemu_tuning_before_touching_the_host(capsys, monkeypatch):
    from xtc_lab.lab import lifecycle, qemu

    monkeypatch.setattr(lifecycle, "host_problem", lambda mode: pytest.fail("the host was checked"))
    monkeypatch.setenv(qemu.TUNING_ENV, "icount=auto,tb-cache=lots")
    args = run_parser().parse_args(["lab", "up", "--kind", "qemu", "--name", "xtcq-t"])
    assert lifecycle.cmd_up(args) == lifecycle.EXIT_USAGE
    err = capsys.readouterr().err
    assert "XTC_QEMU_TUNING" in err and "tb-cache='lots'" in err
