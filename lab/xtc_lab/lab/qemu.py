"""A QEMU VR: a libvirt QEMU domain that forwards in its own kernel (issue 49).

The guest is Debian's kernel (package ``linux-image-amd64``) booted directly (``<kernel>``)
with a small initramfs built here from ``busybox-static`` and the kernel's own virtio-net
modules; nothing is fetched at run time.  The initramfs's init loads virtio-net, finds the two
interfaces by the MAC addresses the domain XML gives them, routes the generator's address out
of the first and the receiver's out of the second (static neighbours, no ARP), turns on IP
forwarding and then idles: every packet is forwarded by the guest kernel on the guest's vCPU.

The guest's serial console takes commands from the host (:func:`console_send`): ``hog-on [nice]``
starts a CPU hog inside the guest (a busybox shell loop), ``hog-off`` stops it
(:class:`GuestHog`, the hog experiment of Figure 6(b) on a QEMU VR).

The host side of each interface is a tap named ``vif<N>.0`` / ``vif<N>.1`` on the lab's bridges,
so the meter reads the same counters as for an LXC VR.  KVM is used where ``/dev/kvm`` can run
a guest, TCG (QEMU's emulator) otherwise: :func:`pick_accel` decides and says why.

Pure parts (:func:`domain_xml`, :func:`guest_cmdline`, :func:`newc_archive`) do no I/O.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import stat
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

QEMU_URI = "qemu:///system"
QEMU_EMULATOR = Path("/usr/bin/qemu-system-x86_64")
BUSYBOX = Path("/bin/busybox")
BOOT_DIR = Path("/boot")
MODULES_DIR = Path("/lib/modules")
CACHE_DIR = Path("/var/cache/xtc-lab/qemu")
GUEST_MODULES = ("virtio_pci", "virtio_net")  # modules in Debian's kernel; their dependencies come via modules.dep
DEBIAN_PACKAGES = ("qemu-system-x86", "linux-image-amd64", "busybox-static", "libvirt-daemon-driver-qemu")
DEFAULT_MEMORY_MIB = 160
QEMU_XML_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
ET.register_namespace("qemu", QEMU_XML_NS)  # <qemu:commandline>, as libvirt writes it
#: Environment variable with the lab's QEMU tuning (:func:`parse_tuning`), read when a VR is built.
TUNING_ENV = "XTC_QEMU_TUNING"
ICOUNT_SHIFT_MAX = 10  # QEMU's limit for -icount shift=N
#: A cached guest image not built or used for this long is removed by the next build (s).
STALE_IMAGE_S = 86_400.0

INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
for m in $(cat /modules.order); do insmod "$m"; done
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^xtc\.$1=//p"; }
byaddr() {
  for d in /sys/class/net/*; do
    [ "$(cat $d/address)" = "$1" ] && basename "$d" && return
  done
}
TG=$(arg tg); TR=$(arg tr); TGMAC=$(arg tgmac); TRMAC=$(arg trmac)
A=$(byaddr "$(arg mac0)"); B=$(byaddr "$(arg mac1)")
if [ -z "$A" ] || [ -z "$B" ]; then echo "xtc-guest: interfaces not found"; ls /sys/class/net; fi
ip link set lo up
ip link set "$A" up
ip link set "$B" up
ip addr add "$(arg addr0)/32" dev "$A"
ip addr add "$(arg addr1)/32" dev "$B"
ip route add "$TG/32" dev "$A"
ip route add "$TR/32" dev "$B"
arp -i "$A" -s "$TG" "$TGMAC"
arp -i "$B" -s "$TR" "$TRMAC"
for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > "$f"; done
for f in /proc/sys/net/ipv4/conf/*/send_redirects; do echo 0 > "$f"; done
echo 1 > /proc/sys/net/ipv4/ip_forward
echo "xtc-guest: forwarding $TG via $A, $TR via $B"
# Commands from the host on the serial console (one a line): "hog-on [nice]" starts a CPU hog
# (a busybox shell loop) inside the guest, "hog-off" stops it.
mount -t devtmpfs dev /dev
stty -F /dev/ttyS0 raw -echo
exec 3<>/dev/ttyS0
HOG=
while :; do
  if ! read -r cmd arg <&3; then sleep 1; continue; fi
  case "$cmd" in
    hog-on) [ -n "$HOG" ] || { sh -c 'while :; do :; done' & HOG=$!; renice -n "${arg:-0}" -p "$HOG"; }
            echo "xtc-guest: hog on $HOG" >&3 ;;
    hog-off) [ -z "$HOG" ] || { kill "$HOG"; wait "$HOG"; HOG=; }
             echo "xtc-guest: hog off" >&3 ;;
  esac
done
"""


class QemuError(RuntimeError):
    """The QEMU VR cannot be built here (missing package, no kernel, bad input)."""


# ======================================================================== pure part
def newc_archive(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """A cpio "newc" archive (the initramfs format) of ``(path, mode, data)`` entries.

    ``mode`` includes the file type bits (``stat.S_IFDIR | 0o755``, ``stat.S_IFREG | 0o755``,
    ``stat.S_IFLNK | 0o777`` with the link target as data).
    """
    out = bytearray()

    def add(name: str, mode: int, data: bytes, ino: int) -> None:
        nb = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + nb)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    ino = 0
    for ino, (path, mode, data) in enumerate(entries, start=1):
        add(path.lstrip("/"), mode, data, ino)
    add("TRAILER!!!", 0, b"", ino + 1)
    return bytes(out)


def module_closure(names: Sequence[str], modules_dep: str) -> list[str]:
    """Module files (relative to the modules directory) to load for ``names``, dependencies first.

    ``modules_dep`` is the text of ``modules.dep`` (``kernel/x.ko: kernel/y.ko kernel/z.ko``).
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        if ":" not in line:
            continue
        mod, rest = line.split(":", 1)
        deps[mod] = rest.split()
        by_name[re.sub(r"\.ko(\..*)?$", "", Path(mod).name).replace("-", "_")] = mod
    order: list[str] = []

    def visit(mod: str) -> None:
        if mod in order:
            return
        for d in reversed(deps.get(mod, [])):  # modules.dep lists the deepest dependency last
            visit(d)
        order.append(mod)

    for n in names:
        if n not in by_name:
            raise QemuError(f"kernel module {n} not in modules.dep")
        visit(by_name[n])
    return order


def mac_for(vif: str) -> str:
    """A stable locally administered MAC address for the guest side of host interface ``vif``."""
    h = hashlib.sha256(vif.encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in h[:3])


def guest_addresses(tg_addr: str) -> tuple[str, str]:
    """The guest's own two addresses in its VR's /24 (``.253`` towards TG, ``.254`` towards TR)."""
    base = tg_addr.rsplit(".", 1)[0]
    return f"{base}.253", f"{base}.254"


def guest_cmdline(tg_addr: str, tr_addr: str, tg_mac: str, tr_mac: str, macs: Sequence[str]) -> str:
    """The guest kernel's command line: the console and what the init script needs."""
    addr0, addr1 = guest_addresses(tg_addr)
    return (f"console=ttyS0 quiet panic=-1 xtc.tg={tg_addr} xtc.tr={tr_addr} xtc.tgmac={tg_mac} "
            f"xtc.trmac={tr_mac} xtc.mac0={macs[0]} xtc.mac1={macs[1]} xtc.addr0={addr0} xtc.addr1={addr1}")


@dataclass(frozen=True)
class QemuTuning:
    """How the QEMU VR's emulator runs (issue 49: the scatter of a throttled TCG guest's rate).

    ``icount_shift``: None (no ``-icount``, the default), ``"auto"`` or 0..10: QEMU's deterministic
    instruction-count clock, one instruction = 2**shift ns of guest time (TCG only; it also makes
    TCG single-threaded); ``icount_sleep``: ``sleep=on|off`` (off: the guest clock does not wait
    for real time while the guest idles).  ``tb_cache_mib``: TCG's translation-block cache (None:
    QEMU's default).  ``vcpus``: the guest's vCPUs (a ``vcpu_quota`` cap holds each of them).
    """

    icount_shift: int | str | None = None
    icount_sleep: bool = True
    tb_cache_mib: int | None = None
    vcpus: int = 1

    def __post_init__(self) -> None:
        s = self.icount_shift
        if s is not None and s != "auto" and (isinstance(s, bool) or not isinstance(s, int)
                                              or not 0 <= s <= ICOUNT_SHIFT_MAX):
            raise QemuError(f"icount shift {s!r}: want 'auto' or an integer 0..{ICOUNT_SHIFT_MAX}")
        t = self.tb_cache_mib
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 4096):
            raise QemuError(f"tb-cache {t!r}: want an integer number of MiB, 1..4096")
        if isinstance(self.vcpus, bool) or not isinstance(self.vcpus, int) or not 1 <= self.vcpus <= 8:
            raise QemuError(f"vcpus {self.vcpus!r}: want an integer 1..8")

    def is_tcg_only(self) -> bool:
        """True if an option applies to TCG only (icount, the TB cache)."""
        return self.icount_shift is not None or self.tb_cache_mib is not None

    def describe(self) -> str:
        """The spec that :func:`parse_tuning` reads back ("" for the defaults)."""
        parts = []
        if self.icount_shift is not None:
            parts += [f"icount={self.icount_shift}", f"sleep={'on' if self.icount_sleep else 'off'}"]
        if self.tb_cache_mib is not None:
            parts.append(f"tb-cache={self.tb_cache_mib}")
        if self.vcpus != 1:
            parts.append(f"vcpus={self.vcpus}")
        return ",".join(parts)


def parse_tuning(spec: str) -> QemuTuning:
    """Read ``"icount=auto|N,sleep=on|off,tb-cache=MIB,vcpus=N"`` (any subset, "" = defaults).

    A bad key or value is one :class:`QemuError` naming it.
    """
    values: dict[str, str] = {}
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        key, sep, val = item.partition("=")
        if not sep or not val:
            raise QemuError(f"QEMU tuning {spec!r}: {item!r} is not key=value")
        if key not in ("icount", "sleep", "tb-cache", "vcpus"):
            raise QemuError(f"QEMU tuning {spec!r}: unknown key {key!r} (want icount, sleep, tb-cache, vcpus)")
        if key in values:
            raise QemuError(f"QEMU tuning {spec!r}: {key!r} given twice")
        values[key] = val

    def integer(key: str) -> int:
        try:
            return int(values[key])
        except ValueError:
            raise QemuError(f"QEMU tuning {spec!r}: {key}={values[key]!r} is not an integer") from None

    if "sleep" in values and "icount" not in values:
        raise QemuError(f"QEMU tuning {spec!r}: sleep applies to icount only")
    if values.get("sleep", "on") not in ("on", "off"):
        raise QemuError(f"QEMU tuning {spec!r}: sleep={values['sleep']!r}, want on or off")
    shift: int | str | None = None
    if "icount" in values:
        shift = "auto" if values["icount"] == "auto" else integer("icount")
    return QemuTuning(icount_shift=shift, icount_sleep=values.get("sleep", "on") == "on",
                      tb_cache_mib=integer("tb-cache") if "tb-cache" in values else None,
                      vcpus=integer("vcpus") if "vcpus" in values else 1)


def domain_xml(name: str, kernel: str, initrd: str, cmdline: str, bridges: Sequence[str],
               vifs: Sequence[str], macs: Sequence[str], accel: str = "tcg",
               memory_mib: int = DEFAULT_MEMORY_MIB, emulator: str = str(QEMU_EMULATOR),
               tuning: QemuTuning = QemuTuning()) -> str:
    """The XML of a QEMU domain (one vCPU unless ``tuning`` says otherwise) booting ``kernel``/``initrd``, one virtio-net per bridge.

    ``accel`` is ``"kvm"`` or ``"tcg"`` (the domain type).  The host side of interface ``i`` is
    the tap ``vifs[i]`` on ``bridges[i]``, its guest side has MAC ``macs[i]``; the interfaces
    offer the guest no segmentation offload (``<host gso/tso4/tso6/ufo='off'>``), so every packet
    the guest forwards is one frame on the tap.  No scheduler limit is written: caps are set live.
    ``tuning`` adds the TB cache size (``<features><tcg><tb-cache>``) and ``-icount`` (passed
    through ``<qemu:commandline>``: libvirt has no element for it); both are refused under KVM.
    """
    if accel not in ("kvm", "tcg"):
        raise QemuError(f"accel {accel!r}: want 'kvm' or 'tcg'")
    if not (len(bridges) == len(vifs) == len(macs)) or not bridges:
        raise QemuError("need one vif name and one MAC per bridge, and at least one bridge")
    if memory_mib < 64:
        raise QemuError(f"memory_mib {memory_mib} too small for the guest kernel (at least 64)")
    if accel == "kvm" and tuning.is_tcg_only():
        raise QemuError(f"QEMU tuning {tuning.describe()!r} applies to TCG only, not to accel kvm")
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = str(memory_mib)
    ET.SubElement(dom, "vcpu").text = str(tuning.vcpus)
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    ET.SubElement(os_el, "kernel").text = kernel
    ET.SubElement(os_el, "initrd").text = initrd
    ET.SubElement(os_el, "cmdline").text = cmdline
    if tuning.tb_cache_mib is not None:
        tcg = ET.SubElement(ET.SubElement(dom, "features"), "tcg")
        ET.SubElement(tcg, "tb-cache", unit="MiB").text = str(tuning.tb_cache_mib)
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    ET.SubElement(dom, "on_reboot").text = "destroy"
    ET.SubElement(dom, "on_crash").text = "destroy"
    devs = ET.SubElement(dom, "devices")
    ET.SubElement(devs, "emulator").text = emulator
    for br, vif, mac in zip(bridges, vifs, macs):
        iface = ET.SubElement(devs, "interface", type="bridge")
        ET.SubElement(iface, "source", bridge=br)
        ET.SubElement(iface, "target", dev=vif)
        ET.SubElement(iface, "mac", address=mac)
        ET.SubElement(iface, "model", type="virtio")
        # No segmentation offload towards the host: the guest segments what it forwards, so the tap
        # counts packets, not the super-frames its GRO would otherwise send out through virtio's TSO.
        ET.SubElement(ET.SubElement(iface, "driver"), "host", gso="off", tso4="off", tso6="off", ufo="off")
    ET.SubElement(devs, "serial", type="pty")
    ET.SubElement(devs, "memballoon", model="none")
    if tuning.icount_shift is not None:
        cmd = ET.SubElement(dom, f"{{{QEMU_XML_NS}}}commandline")
        value = f"shift={tuning.icount_shift},sleep={'on' if tuning.icount_sleep else 'off'}"
        for arg in ("-icount", value):
            ET.SubElement(cmd, f"{{{QEMU_XML_NS}}}arg", value=arg)
    return ET.tostring(dom, encoding="unicode")


# ======================================================================== host part
@dataclass(frozen=True)
class GuestImage:
    """Kernel and initramfs of the QEMU VR, with the kernel's release."""

    kernel: Path
    initrd: Path
    release: str


def missing_requirements() -> list[str]:
    """What this host lacks to run a QEMU VR (empty: it can), each with the Debian package."""
    out = []
    if not QEMU_EMULATOR.exists():
        out.append(f"{QEMU_EMULATOR} (Debian package qemu-system-x86)")
    if not BUSYBOX.exists():
        out.append(f"{BUSYBOX} (Debian package busybox-static)")
    if not sorted(BOOT_DIR.glob("vmlinuz-*")):
        out.append(f"a kernel {BOOT_DIR}/vmlinuz-* (Debian package linux-image-amd64)")
    return out


def tuning_from_env() -> QemuTuning:
    """The lab's QEMU tuning from ``XTC_QEMU_TUNING`` (unset or empty: the defaults)."""
    spec = os.environ.get(TUNING_ENV, "")
    try:
        return parse_tuning(spec)
    except QemuError as e:
        raise QemuError(f"{TUNING_ENV}: {e}") from None


def pick_accel(dev_kvm: Path = Path("/dev/kvm")) -> tuple[str, str]:
    """(``"kvm"`` or ``"tcg"``, why): KVM only if ``/dev/kvm`` opens and is a stock KVM.

    ``XTC_QEMU_ACCEL=tcg|kvm`` overrides.  A PVM ``/dev/kvm`` (a paravirtual KVM that stock
    guests do not boot on) opens but is refused here: its sysfs driver is not ``kvm_intel``/
    ``kvm_amd``.
    """
    forced = os.environ.get("XTC_QEMU_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced, f"XTC_QEMU_ACCEL={forced}"
    if not dev_kvm.exists():
        return "tcg", f"{dev_kvm} missing"
    mods = {m for m in ("kvm_intel", "kvm_amd") if Path(f"/sys/module/{m}").exists()}
    if not mods:
        return "tcg", f"{dev_kvm} is not a stock KVM (no kvm_intel/kvm_amd module: e.g. a PVM device)"
    try:
        os.close(os.open(dev_kvm, os.O_RDWR))
    except OSError as e:
        return "tcg", f"{dev_kvm}: {e.strerror}"
    return "kvm", f"{dev_kvm} ({', '.join(sorted(mods))})"


def newest_kernel(boot: Path = BOOT_DIR) -> tuple[Path, str]:
    """The newest ``vmlinuz-<release>`` in ``boot`` and its release."""
    kernels = sorted(boot.glob("vmlinuz-*"), key=lambda p: [int(x) if x.isdigit() else x
                                                            for x in re.split(r"[.-]", p.name[8:])])
    if not kernels:
        raise QemuError(f"no kernel {boot}/vmlinuz-*: install the Debian package linux-image-amd64")
    return kernels[-1], kernels[-1].name[len("vmlinuz-"):]


def build_image(cache: Path = CACHE_DIR) -> GuestImage:
    """Build (once per kernel release and init script) the guest's initramfs; return the image.

    The archive holds busybox, the init script and the virtio-net modules with their
    dependencies; it is written atomically to ``cache`` and reused while nothing changed.
    """
    missing = missing_requirements()
    if missing:
        raise QemuError("cannot build a QEMU VR: missing " + "; ".join(missing))
    kernel, release = newest_kernel()
    mdir = MODULES_DIR / release
    try:
        order = module_closure(GUEST_MODULES, (mdir / "modules.dep").read_text())
    except OSError as e:
        raise QemuError(f"cannot read the modules of kernel {release}: {e}") from e
    busybox = BUSYBOX.read_bytes()
    key = hashlib.sha256(INIT_SCRIPT.encode() + busybox[:4096] + release.encode() + str(order).encode()).hexdigest()[:16]
    initrd = cache / f"initrd-{release}-{key}.gz"
    if initrd.exists():
        os.utime(initrd)  # in use: not stale for other checkouts' builds
        return GuestImage(kernel, initrd, release)
    entries: list[tuple[str, int, bytes]] = [(d, stat.S_IFDIR | 0o755, b"") for d in
                                             ("bin", "sbin", "proc", "sys", "dev", "modules")]
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, busybox))
    entries.append(("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
    entries.append(("init", stat.S_IFREG | 0o755, INIT_SCRIPT.encode()))
    names = []
    for rel in order:
        data = (mdir / rel).read_bytes()
        if rel.endswith(".xz"):
            import lzma

            data = lzma.decompress(data)
        elif rel.endswith(".zst"):
            raise QemuError(f"module {rel} is zstd-compressed: not supported")
        name = "modules/" + re.sub(r"\.ko(\..*)?$", ".ko", Path(rel).name)
        entries.append((name, stat.S_IFREG | 0o644, data))
        names.append("/" + name)
    entries.append(("modules.order", stat.S_IFREG | 0o644, ("\n".join(names) + "\n").encode()))
    cache.mkdir(parents=True, exist_ok=True)
    tmp = initrd.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(gzip.compress(newc_archive(entries), compresslevel=6))
    os.chmod(tmp, 0o644)
    os.replace(tmp, initrd)
    # Images of other kernels or init scripts: another checkout's lab may be booting from one right
    # now, so only those unused for STALE_IMAGE_S go.
    now = time.time()
    for old in cache.glob("initrd-*.gz"):
        try:
            if old != initrd and now - old.stat().st_mtime > STALE_IMAGE_S:
                old.unlink(missing_ok=True)
        except OSError:
            pass
    os.utime(initrd)
    return GuestImage(kernel, initrd, release)


# ======================================================================== the guest's console
HOG_NICE_RANGE = (-20, 19)


def hog_command(on: bool, nice: int = 0) -> str:
    """The console line that starts (``on``) or stops the guest's CPU hog."""
    if isinstance(nice, bool) or not isinstance(nice, int) or not HOG_NICE_RANGE[0] <= nice <= HOG_NICE_RANGE[1]:
        raise QemuError(f"hog nice {nice!r}: want an integer in {HOG_NICE_RANGE[0]}..{HOG_NICE_RANGE[1]}")
    return f"hog-on {nice}\n" if on else "hog-off\n"


def console_pty(domain_xml_text: str) -> str:
    """The host pty of a running domain's first serial port, from its live XML."""
    root = ET.fromstring(domain_xml_text)
    src = root.find("./devices/serial[@type='pty']/source")
    path = src.get("path") if src is not None else None
    if not path:
        raise QemuError("the domain has no serial pty (is it running?)")
    return path


def console_send(dom: object, text: str, expect: str | None = None, timeout_s: float = 10.0) -> str:
    """Write ``text`` to the serial console of the running libvirt domain ``dom`` (a ``virDomain``)
    through its host pty; with ``expect``, read until a line contains it (the guest's answer) and
    return that line.

    Raises
    ------
    QemuError
        The console cannot be opened or written, or no answer with ``expect`` came within ``timeout_s``.
    """
    import select
    import termios
    import time
    import tty

    name = dom.name()  # type: ignore[attr-defined]
    path = console_pty(dom.XMLDesc(0))  # type: ignore[attr-defined]
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise QemuError(f"console of {name}: cannot open {path}: {e.strerror}") from e
    try:
        tty.setraw(fd)  # no echo on the host side: the guest's answers are not sent back to it
        termios.tcflush(fd, termios.TCIFLUSH)
        deadline = time.monotonic() + timeout_s
        data = text.encode()
        while data:
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise QemuError(f"console of {name}: write timed out") from None
                time.sleep(0.05)
        if expect is None:
            return ""
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise QemuError(f"console of {name}: no answer {expect!r} within {timeout_s:g} s (read {buf[-200:]!r})")
            ready, _w, _x = select.select([fd], [], [], left)
            if ready:
                try:
                    buf += os.read(fd, 4096)
                except BlockingIOError:
                    continue
                done = buf.decode(errors="replace").replace("\r", "\n").split("\n")[:-1]  # whole lines only
                lines = [ln for ln in done if expect in ln]
                if lines:
                    return lines[0].strip()
    except OSError as e:
        raise QemuError(f"console of {name} ({path}): {e.strerror}") from e
    finally:
        os.close(fd)


def vcpu_time_ns(dom: object) -> int:
    """CPU time the domain's vCPUs have used, nanoseconds (libvirt's per-vCPU ``cpuTime``)."""
    info, _maps = dom.vcpus()  # type: ignore[attr-defined]
    return int(sum(v[2] for v in info))


class GuestHog:
    """A CPU hog inside a QEMU VR's guest (a busybox shell loop at ``nice``), started and stopped
    through the guest's serial console; what the vCPU used while it ran is measured from the host.

    The hog takes whatever CPU the guest has left: its share is set by the cap and by the guest
    kernel's scheduler (the forwarding runs in softirq context, ahead of any process).
    """

    def __init__(self, dom: object, nice: int = 0):
        self.dom = dom
        self.nice = nice
        hog_command(True, nice)  # checks nice before anything runs
        self._t0: float | None = None
        self._ns0 = 0
        self.answer = ""  # the guest's answer to hog-on ("xtc-guest: hog on <pid>")

    def start(self) -> GuestHog:
        import time

        self._ns0, self._t0 = vcpu_time_ns(self.dom), time.monotonic()
        self.answer = console_send(self.dom, hog_command(True, self.nice), expect="xtc-guest: hog on")
        return self

    def stop(self) -> dict[str, float]:
        """Stop the hog; return ``cpu_percent``: the vCPU's CPU while it ran (forwarding included), % of one CPU."""
        import time

        console_send(self.dom, hog_command(False), expect="xtc-guest: hog off")
        if self._t0 is None:
            return {"cpu_percent": float("nan"), "seconds": 0.0}
        dt = time.monotonic() - self._t0
        used = (vcpu_time_ns(self.dom) - self._ns0) / 1e9
        self._t0 = None
        return {"cpu_percent": 100.0 * used / dt if dt > 0 else float("nan"), "seconds": dt}

    def describe(self) -> dict[str, object]:
        return {"where": f"inside the guest of {self.dom.name()}", "process": "busybox sh loop",  # type: ignore[attr-defined]
                "guest_answer": self.answer,
                "nice": self.nice, "cpu_percent_is": "the vCPU's CPU while the hog ran (forwarding included)"}
