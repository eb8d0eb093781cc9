#!/usr/bin/env bash
# Set up everything XTC needs on this host, then run one job.
#
#   bash scripts/bootstrap.sh demo [ARGS]   # the main job (xtc demo)
#   bash scripts/bootstrap.sh test [ARGS]   # the whole test suite (pytest; with ARGS: pytest ARGS)
#
# As root on Debian it installs the Debian packages the lab and the libvirt tests need
# (libvirt with the LXC driver, iperf3, a C compiler); everywhere it creates a virtual
# environment (.venv, or $XTC_VENV) and installs both of XTC's distributions (the product, xtc, and
# its testbed, xtc-lab in lab/) with their Python dependencies into it.
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-}
[ $# -gt 0 ] && shift
case "$job" in demo|test) ;; *) echo "usage: bash scripts/bootstrap.sh demo|test [ARGS]" >&2; exit 2;; esac

venv=${XTC_VENV:-.venv}
debs=(libvirt-daemon libvirt-daemon-driver-lxc libvirt-clients libvirt-dev pkg-config iperf3 iproute2 iputils-ping gcc libc6-dev postgresql chromium prometheus
      debootstrap dh-virtualenv debhelper dpkg-dev build-essential python3-dev python3-venv
      qemu-system-x86 libvirt-daemon-driver-qemu linux-image-amd64 busybox-static)

. scripts/debs.sh
install_missing_debs bootstrap "${debs[@]}"

py=${PYTHON:-python3}
UV_VERSION=0.13.9
if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating virtual environment $venv" >&2
  "$py" -m venv "$venv"
fi
# Both distributions of this repository, editable: the product (xtc, with the test tools and, where
# libvirt's headers are, its libvirt extra) and the testbed beside it (lab/: xtc-lab, which brings
# the product's training, policer, net and xco extras).
extras="test"
if pkg-config --exists libvirt 2>/dev/null; then extras="$extras,libvirt"; fi
stamp="$venv/.xtc-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ lab/pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing xtc[$extras] and xtc-lab into $venv" >&2
  # With uv (one pinned release, put in the environment by pip): the ~115 packages in about 15 s where
  # pip takes 70-75 s on a 2-core VM, the same versions (each test run of CI starts from a new
  # environment).  Where uv cannot be had (no wheel for the platform, no index), pip does it.
  if "$venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" 2>/dev/null; then
    "$venv/bin/uv" pip install -q --native-tls --python "$venv/bin/python" -e ".[$extras]" -e ./lab
  else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]" -e ./lab
  fi
  touch "$stamp"
fi

case "$job" in
  demo) exec "$venv/bin/xtc" demo "$@" ;;
  test)
    # With arguments: pytest with them.  Without: the whole suite in two parts.  The tests that need
    # no root and no libvirt and time nothing (logic, processes on the simulated backend, the
    # policer's API) run on every core (pytest-xdist, up to 4 workers; a worker that runs out of tests
    # takes some from another, so one long test at the end does not leave a core idle), and beside them the root
    # tests that time nothing and share nothing with the rest (marked beside: the Debian package in
    # its own root, a QEMU domain booted and capped); the real-packet tests (marked root or libvirt)
    # and those that assert on time, rates or latency (marked exclusive) run one at a time after
    # them, on a host that nothing else of the suite loads.  The long experiments (marked experiment:
    # a figure's quick run on real packets, a minute each) stay out of it; `test -m experiment` runs them.
    # Byte-code caches on (some hosts set PYTHONDONTWRITEBYTECODE): the suite starts some hundreds of
    # Python processes and collects its tests in three, and without them each one compiles the
    # editable product and rewrites the test modules again (a collection: 22 s -> 8 s on a 2-core VM).
    # They are written beside the sources, in the __pycache__ folders git ignores.
    unset PYTHONDONTWRITEBYTECODE
    "$venv/bin/python" -m compileall -q -j 0 xtc lab/xtc_lab tests >/dev/null || true
    [ $# -gt 0 ] && exec "$venv/bin/python" -m pytest "$@"
    # Three workers for two cores (half a core more than one a core), at most 4.  With one a core the parallel
    # part kept the 2-core VM about 70% busy (its tests wait on periods, servers and subprocesses): three took
    # it from 432 to 369 s, 1.65 cores busy.  Two a core (400 -> 344 s) left the policer's end-to-end test
    # missing its 15 s wait for the ladder's pause once in four runs: not done.
    cores=$(nproc 2>/dev/null || echo 1)
    workers=$(( cores + cores / 2 ))
    [ "$workers" -gt 4 ] && workers=4
    rc=0
    "$venv/bin/python" -m pytest -m "(not root and not libvirt and not exclusive or beside) and not experiment" -n "$workers" --dist worksteal || rc=$?
    "$venv/bin/python" -m pytest -m "(root or libvirt or exclusive) and not beside and not experiment" || { r=$?; [ "$rc" = 0 ] && rc=$r; }
    exit "$rc"
    ;;
esac
