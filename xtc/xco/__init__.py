"""XCo: explicit coordination of the transmissions between hosts.

A central controller tells each host, timeslice by timeslice, to which destination host it may
send, so that the sum of the NIC rates admitted on every link stays within the link's capacity
(Rajanna, Shah, Jahagirdar and Gopalan, "XCo: Explicit Coordination for Preventing Congestion in Data Center Ethernet", section 3).  This package holds the product side:

- :mod:`xtc.xco.topology`: the ``xco-topology/1`` file, validated; spanning tree; paths as arrays
  of directed link ids.
- :mod:`xtc.xco.scheduler`: the pure scheduler (Algorithm 1), a reference implementation written
  with sets like the paper and a fast one with the same policy; the rate-limiting and hybrid modes.
- :mod:`xtc.xco.protocol`: the versioned UDP wire protocol (strict decoding).
- :mod:`xtc.xco.controller`: the controller's pure core and its service (``xtc xco controller``).
- :mod:`xtc.xco.replay`: replays an event file through the scheduler and writes the directives.
- :mod:`xtc.xco.cli`: the ``xtc xco`` subcommands.

The simulator and the benchmark are in the testbed (:mod:`xtc_lab.xco`).
"""
