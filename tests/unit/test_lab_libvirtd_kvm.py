"""Which /dev/kvm the lab hides from the libvirtd it starts, and the command that does it (pure)."""

from __future__ import annotations

from pathlib import Path

from xtc_lab.lab.libvirtd import kvm_to_hide, libvirtd_argv


def _host(tmp_path: Path, device: bool, modules: tuple[str, ...]) -> tuple[Path, Path]:
    dev, mods = tmp_path / "kvm", tmp_path / "module"
    mods.mkdir()
    if device:
        dev.touch()
    for m in modules:
        (mods / m).mkdir()
    return dev, mods


def test_a_kvm_device_without_a_stock_kvm_module_is_hidden(tmp_path: Path) -> None:
    assert kvm_to_hide(*_host(tmp_path, True, ("kvm",)), env={}) is True


def test_a_stock_kvm_or_no_device_or_an_explicit_kvm_choice_is_not_hidden(tmp_path: Path) -> None:
    dev, mods = _host(tmp_path, True, ("kvm", "kvm_amd"))
    assert kvm_to_hide(dev, mods, env={}) is False
    (mods / "kvm_amd").rmdir()
    assert kvm_to_hide(dev, mods, env={"XTC_QEMU_ACCEL": "kvm"}) is False
    dev.unlink()
    assert kvm_to_hide(dev, mods, env={}) is False


def test_libvirtd_command_unmounts_and_masks_only_what_it_is_given() -> None:
    plain = libvirtd_argv(Path("/usr/sbin/libvirtd"), None, None, Path("/dev/kvm"))
    assert plain[:7] == ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'exec "$4"']
    both = libvirtd_argv(Path("/usr/sbin/libvirtd"), "/sys/fs/cgroup/unified", Path("/run/xtc/no-kvm"),
                         Path("/dev/kvm"))
    assert both[6] == '{ umount "$1" || exit 97; } && { mount --bind "$2" "$3" || exit 98; } && exec "$4"'
    assert both[7:] == ["xtc-libvirtd", "/sys/fs/cgroup/unified", "/run/xtc/no-kvm", "/dev/kvm", "/usr/sbin/libvirtd"]
