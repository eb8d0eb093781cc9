"""XTC: hold each virtual router at a packet-rate budget by adjusting only its CPU cap."""

__version__ = "0.1.0"
