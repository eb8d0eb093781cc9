# Sourced by scripts/bootstrap.sh and scripts/build-deb.sh: install the Debian packages that are missing.
#
#   install_missing_debs WHO PACKAGE...   # WHO names the caller in the one line it prints
#
# Only as root where apt-get exists (elsewhere it does nothing: the caller's own checks say what is
# missing); apt-get update runs only when something is missing.
install_missing_debs() {
  local who=$1; shift
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "$who: installing Debian packages: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
