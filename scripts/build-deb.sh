#!/usr/bin/env bash
# Build the Debian package of XTC: dist/xtc_<version>_<arch>.deb.
#
#   bash scripts/build-deb.sh           # build, or keep the .deb if the sources did not change
#   bash scripts/build-deb.sh --force   # build even so
#
# The product only (no xtc_lab) in its own virtual environment /opt/venvs/xtc, made by dh-virtualenv
# on Debian's /usr/bin/python3, with the extras named in XTC_DEB_EXTRAS; the systemd units of
# packaging/*.service and the example configurations of packaging/*.toml (under /etc/xtc, without
# their "xtc-" prefix; the lab's *-sim.toml left out).  As root on Debian it installs what the build
# needs (dh-virtualenv, debhelper, ...) first.  The Python dependencies come from PyPI (pip's cache
# is used).  docs/guide/debian-package.md says what goes where.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

force=0
case "${1:-}" in
  --force) force=1 ;;
  "") ;;
  *) echo "usage: bash scripts/build-deb.sh [--force]" >&2; exit 2 ;;
esac

# What a router, a policer host and an XCo host need: libvirt (the daemon's libvirt backend),
# policer (the REST service), xco (numba, the XCo controller's compiled scheduler) and the XCo
# agent's pyroute2 (the extra xco-agent where pyproject.toml declares it, else net).
extras=${XTC_DEB_EXTRAS:-}
py=/usr/bin/python3   # Debian's python3, never a pyenv or other python first on PATH

build_debs=(dh-virtualenv debhelper dpkg-dev build-essential python3 python3-dev python3-venv libvirt-dev pkg-config gcc)
. scripts/debs.sh
install_missing_debs build-deb "${build_debs[@]}"
for tool in dpkg-buildpackage dh dh_virtualenv "$py"; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (as root this script installs it)" >&2; exit 1; }
done

# The product's version and extras, from pyproject.toml.
read -r version extras bad_extras < <("$py" - "$extras" <<'EOF'
import sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
known = set(p.get("optional-dependencies", {}))
extras = sys.argv[1] or ",".join(["libvirt", "policer", "xco", "xco-agent" if "xco-agent" in known else "net"])
bad = [e for e in extras.split(",") if e and e not in known]
version = p.get("version")
if version is None:  # dynamic: the package's own __version__
    import re
    version = re.search(r'__version__\s*=\s*"([^"]+)"', open("xtc/__init__.py").read()).group(1)
print(version, extras, ",".join(bad) or "-")
EOF
)
if [ -z "${version:-}" ]; then
  echo "build-deb: cannot tell the product's version (project.version in pyproject.toml, or __version__ in xtc/__init__.py)" >&2
  exit 1
fi
if [ "$bad_extras" != "-" ]; then
  echo "build-deb: pyproject.toml has no extra named $bad_extras (XTC_DEB_EXTRAS=$extras)" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
deb=dist/xtc_${version}_${arch}.deb

git rev-parse --git-dir >/dev/null 2>&1 || { echo "build-deb: $root is not a git checkout (the sources are its files)" >&2; exit 1; }
# The sources the package is made of (tracked or new, not ignored), and their digest: an unchanged
# digest keeps the .deb already built.
mapfile -t files < <(git ls-files -co --exclude-standard -- xtc pyproject.toml README.md LICENSE CHANGELOG.md \
  'packaging/*.service' 'packaging/*.toml' packaging/debian 'docs/*.md' scripts/build-deb.sh |
  grep -v -e '/__pycache__/' -e '\.pyc$' | sort -u)
digest=$( { echo "extras=$extras"; for f in "${files[@]}"; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done; } |
  sha256sum | cut -d' ' -f1)
stamp=$deb.sources-sha256
if [ "$force" = 0 ] && [ -f "$deb" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
  echo "build-deb: $deb is up to date (sources unchanged)" >&2
  echo "$root/$deb"
  exit 0
fi

# A staging tree: the product's sources, debian/, and the files laid out for debian/xtc.install.
work=build/deb
src=$work/xtc-$version
rm -rf "$work"
mkdir -p "$src" dist
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in packaging/*|docs/*|scripts/*) continue ;; esac
  mkdir -p "$src/$(dirname "$f")"
  cp -p "$f" "$src/$f"
done
cp -r packaging/debian "$src/debian"
echo "$extras" > "$src/debian/xtc-extras"
units=$(cd packaging && ls -- *.service | tr '\n' ' ')
sed -i "s/@UNITS@/${units% }/" "$src/debian/xtc.prerm"
# The product's pyproject.toml names nothing of the testbed (xtc-lab is its own distribution, lab/):
# checked here, so that a package never ships it.
"$py" - "$src/pyproject.toml" <<'EOF'
import sys, tomllib
path = sys.argv[1]
text = open(path).read()
doc = tomllib.loads(text)
def walk(v):
    if isinstance(v, str):
        assert "xtc_lab" not in v, f"{path}: still names xtc_lab: {v!r}"
    elif isinstance(v, dict):
        for k, x in v.items():
            assert "xtc_lab" not in k, f"{path}: still names xtc_lab: {k!r}"
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(doc)
EOF
# Units, configurations (/etc/xtc/<name without "xtc-">; *-sim.toml are the lab's) and the pages
# the units point at (Documentation=file:///usr/share/doc/xtc/...).
mkdir -p "$src/staged/etc/xtc" "$src/staged/lib/systemd/system" "$src/staged/doc"
for f in packaging/*.service; do cp "$f" "$src/staged/lib/systemd/system/"; done
for f in packaging/*.toml; do
  case "$f" in *-sim.toml) continue ;; esac
  n=$(basename "$f"); cp "$f" "$src/staged/etc/xtc/${n#xtc-}"
done
for f in docs/*.md docs/guide/*.md; do
  case "$f" in docs/lab.md|docs/xco-testbed.md|docs/bench-daemon.md) continue ;; esac   # the testbed's
  [ -f "$f" ] && cp "$f" "$src/staged/doc/"
done
[ -f CHANGELOG.md ] && cp CHANGELOG.md "$src/staged/doc/"
cat > "$src/debian/changelog" <<EOF
xtc ($version) unstable; urgency=medium

  * Built from the XTC repository by scripts/build-deb.sh (sources sha256 ${digest:0:16}).

 -- XTC developers <xtc-dev@localhost>  $(date -R)
EOF

# pip's cache outside debhelper's temporary HOME, so that a rebuild downloads nothing again.
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin   # no pyenv shims: dh-virtualenv's tools run on Debian's python3
echo "build-deb: building xtc $version ($arch) with extras [$extras] in $src" >&2
(cd "$src" && dpkg-buildpackage -b -us -uc) > "$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  echo "build-deb: dpkg-buildpackage failed; the whole log: $work/build.log" >&2
  exit 1
}
mv "$work/xtc_${version}_${arch}.deb" "$deb"
echo "$digest" > "$stamp"
echo "build-deb: wrote $deb ($(du -h "$deb" | cut -f1))" >&2
echo "$root/$deb"
