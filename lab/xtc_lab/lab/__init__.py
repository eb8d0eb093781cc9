"""The host lab: VRs that forward real packets (LXC domains or network namespaces, a QEMU VR), their traffic,
the paper's experiments on them (``xtc lab run``), and the real demo."""
