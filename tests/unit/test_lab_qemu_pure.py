"""The QEMU VR's pure parts: the initramfs archive, the module closure, the domain XML, the cmdline."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET

import pytest

from xtc_lab.lab import qemu


def test_newc_archive_has_headers_padding_and_trailer() -> None:
    data = qemu.newc_archive([("bin", stat.S_IFDIR | 0o755, b""), ("/init", stat.S_IFREG | 0o755, b"#!x\n")])
    assert data.startswith(b"070701")
    assert len(data) % 4 == 0
    assert b"init\0" in data and b"#!x\n" in data
    assert b"TRAILER!!!\0" in data
    # second header: file size field (7th 8-hex field) is 4
    second = data.index(b"070701", 6)
    assert int(data[second + 6 + 6 * 8: second + 6 + 7 * 8], 16) == 4
    assert int(data[second + 6 + 8: second + 6 + 16], 16) == stat.S_IFREG | 0o755


def test_module_closure_orders_dependencies_first() -> None:
    dep = ("kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n"
           "kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n"
           "kernel/net/core/failover.ko:\n")
    assert qemu.module_closure(["virtio_net"], dep) == [
        "kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko"]


def test_module_closure_names_a_missing_module() -> None:
    with pytest.raises(qemu.QemuError, match="virtio_net"):
        qemu.module_closure(["virtio_net"], "kernel/x.ko:\n")


def test_domain_xml_taps_on_bridges_with_vif_names() -> None:
    xml = qemu.domain_xml("lab-vr1", "/boot/vmlinuz", "/tmp/initrd.gz", "console=ttyS0", ["lab-a1", "lab-b1"],
                          ["vif12.0", "vif12.1"], ["52:54:00:00:00:01", "52:54:00:00:00:02"], accel="tcg")
    dom = ET.fromstring(xml)
    assert dom.get("type") == "qemu"
    assert dom.findtext("os/kernel") == "/boot/vmlinuz"
    ifaces = dom.findall("devices/interface")
    assert [i.find("target").get("dev") for i in ifaces] == ["vif12.0", "vif12.1"]
    assert [i.find("source").get("bridge") for i in ifaces] == ["lab-a1", "lab-b1"]
    assert all(i.find("model").get("type") == "virtio" for i in ifaces)
    assert dom.find("cputune") is None  # no cap at boot: caps are set live
    assert ET.fromstring(qemu.domain_xml("d", "k", "i", "", ["b"], ["v"], ["m"], accel="kvm")).get("type") == "kvm"


@pytest.mark.parametrize("kwargs, match", [({"accel": "hax"}, "accel"), ({"memory_mib": 16}, "memory_mib")])
def test_domain_xml_refuses_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(qemu.QemuError, match=match):
        qemu.domain_xml("d", "k", "i", "", ["b"], ["v"], ["m"], **kwargs)


def test_guest_cmdline_and_addresses_stay_in_the_vr_subnet() -> None:
    line = qemu.guest_cmdline("198.18.3.1", "198.18.3.2", "aa:aa:aa:aa:aa:aa", "bb:bb:bb:bb:bb:bb",
                              [qemu.mac_for("vif7.0"), qemu.mac_for("vif7.1")])
    assert "xtc.tg=198.18.3.1" in line and "xtc.tr=198.18.3.2" in line
    assert "xtc.addr0=198.18.3.253" in line and "xtc.addr1=198.18.3.254" in line
    assert qemu.mac_for("vif7.0") != qemu.mac_for("vif7.1")
    assert qemu.mac_for("vif7.0").startswith("52:54:00:")


def test_pick_accel_refuses_a_dev_kvm_that_is_missing(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("XTC_QEMU_ACCEL", raising=False)
    accel, why = qemu.pick_accel(tmp_path / "kvm")
    assert accel == "tcg" and "missing" in why


def test_domain_xml_turns_off_the_host_side_segmentation_offloads() -> None:
    # Without this the guest's GRO merges forwarded TCP segments and sends them out through virtio's
    # TSO as one frame: the tap (the meter) counts super-frames, not packets (Figure 17 on QEMU VRs).
    dom = ET.fromstring(qemu.domain_xml("d", "k", "i", "", ["b1", "b2"], ["v0", "v1"], ["m0", "m1"]))
    for iface in dom.findall("devices/interface"):
        host = iface.find("driver/host")
        assert host is not None
        assert {k: host.get(k) for k in ("gso", "tso4", "tso6", "ufo")} == dict.fromkeys(("gso", "tso4", "tso6", "ufo"), "off")


def _xml(**kwargs) -> ET.Element:
    return ET.fromstring(qemu.domain_xml("lab-vr1", "/boot/vmlinuz", "/tmp/initrd.gz", "console=ttyS0",
                                         ["lab-a1", "lab-b1"], ["vif12.0", "vif12.1"],
                                         ["52:54:00:00:00:01", "52:54:00:00:00:02"], **kwargs))


def test_domain_xml_default_has_no_icount_no_tb_cache_and_one_vcpu() -> None:
    dom = _xml(accel="tcg")
    assert dom.find("vcpu").text == "1"
    assert dom.find("features") is None
    assert dom.find(f"{{{qemu.QEMU_XML_NS}}}commandline") is None


def test_domain_xml_passes_icount_through_the_qemu_namespace() -> None:
    text = qemu.domain_xml("lab-vr1", "/k", "/i", "c", ["a"], ["vif1.0"], ["52:54:00:00:00:01"], accel="tcg",
                           tuning=qemu.QemuTuning(icount_shift="auto", icount_sleep=False))
    assert 'xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0"' in text
    dom = ET.fromstring(text)
    args = [a.get("value") for a in dom.find(f"{{{qemu.QEMU_XML_NS}}}commandline")]
    assert args == ["-icount", "shift=auto,sleep=off"]
    assert _xml(accel="tcg", tuning=qemu.QemuTuning(icount_shift=3)).find(
        f"{{{qemu.QEMU_XML_NS}}}commandline")[1].get("value") == "shift=3,sleep=on"


def test_domain_xml_sets_the_tb_cache_and_the_vcpus() -> None:
    dom = _xml(accel="tcg", tuning=qemu.QemuTuning(tb_cache_mib=64, vcpus=2))
    tb = dom.find("features/tcg/tb-cache")
    assert (tb.text, tb.get("unit")) == ("64", "MiB")
    assert dom.find("vcpu").text == "2"


def test_domain_xml_refuses_tcg_tuning_under_kvm() -> None:
    with pytest.raises(qemu.QemuError, match="TCG only"):
        _xml(accel="kvm", tuning=qemu.QemuTuning(icount_shift="auto"))
    assert _xml(accel="kvm", tuning=qemu.QemuTuning(vcpus=2)).find("vcpu").text == "2"


@pytest.mark.parametrize("spec, want", [
    ("", qemu.QemuTuning()),
    ("icount=auto", qemu.QemuTuning(icount_shift="auto")),
    ("icount=0,sleep=off", qemu.QemuTuning(icount_shift=0, icount_sleep=False)),
    (" tb-cache=32 , vcpus=2 ", qemu.QemuTuning(tb_cache_mib=32, vcpus=2)),
])
def test_parse_tuning_reads_what_describe_writes(spec: str, want: qemu.QemuTuning) -> None:
    assert qemu.parse_tuning(spec) == want
    assert qemu.parse_tuning(want.describe()) == want


@pytest.mark.parametrize("spec, match", [
    ("icount", "not key=value"),
    ("icount=11", "0..10"),
    ("icount=x", "not an integer"),
    ("sleep=off", "icount only"),
    ("icount=auto,sleep=maybe", "sleep='maybe'"),
    ("tb-cache=0", "tb-cache 0"),
    ("vcpus=9", "vcpus 9"),
    ("threads=2", "unknown key 'threads'"),
    ("vcpus=1,vcpus=2", "given twice"),
])
def test_parse_tuning_names_the_bad_key(spec: str, match: str) -> None:
    with pytest.raises(qemu.QemuError, match=match):
        qemu.parse_tuning(spec)


def test_tuning_from_env_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv(qemu.TUNING_ENV, "icount=99")
    with pytest.raises(qemu.QemuError, match=qemu.TUNING_ENV):
        qemu.tuning_from_env()
    monkeypatch.delenv(qemu.TUNING_ENV)
    assert qemu.tuning_from_env() == qemu.QemuTuning()
