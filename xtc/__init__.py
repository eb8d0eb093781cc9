"""XTC: hold each virtual router at a packet-rate budget by adjusting only its CPU cap."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("xtc")  # the installed distribution's (pyproject.toml's) version
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"
