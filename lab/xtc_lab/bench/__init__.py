"""The benchmarks behind ``xtc bench``: the controllers on simulated plants, the daemon's own CPU on real
kernel objects, and what the host calls it makes cost (counters, netlink, libvirt writes)."""
