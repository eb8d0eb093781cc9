#!/bin/sh
# Builds ccheck.c into ccheck*.so beside it, against the venv's Python and the system's libsodium (libsodium23),
# whose headers are not needed (see ccheck.c).  From the repository's top: sh docs/results/2026-11-28-policer-c-check/build.sh
set -eu
D=$(dirname "$0")
PY=.venv/bin/python
INC=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
SODIUM=$(ls /usr/lib/*/libsodium.so.23 | head -1)
gcc -O2 -Wall -Wextra -shared -fPIC -I"$INC" "$D/ccheck.c" -o "$D/ccheck$EXT" "$SODIUM"
echo "$D/ccheck$EXT"
