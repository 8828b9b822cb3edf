#!/bin/sh
# Shrinks the runtime image: purges the packages that `install-deps.sh --runtime` pulled in
# but that no shared library of the runtime list links (directly or transitively).
#
# Debian's libtorch1.13 depends on OpenCV, FFmpeg, Qt, GDAL, ... (about 310 packages, 0.93 GB);
# the libraries odeserve loads link most of them, but not Mesa's DRI drivers, LLVM, Z3, PROJ
# and GDAL data, icon/mime/keyboard data, ... which those packages merely depend on.
#
#   prune-runtime.sh BEFORE_LIST    BEFORE_LIST: `dpkg-query -W -f='${Package}\n'` taken
#                                   before installing (packages of the base image are kept)
# Run in the same RUN as the install, or the purged files stay in the lower layer.
# Purging uses --force-depends: apt will call the remaining packages broken, which does not
# matter in an image that never runs apt again. Fails if any library is left unresolved.
set -eu
before=$1
libs=$(for p in $(odeserve-install-deps --runtime --print); do dpkg -L "$p" 2>/dev/null; done \
         | grep -E '/lib/.*\.so(\.[0-9]+)*$' | sort -u)
needed=$(for l in $libs; do [ -f "$l" ] && { echo "$l"; ldd "$l" | awk '/=> \// {print $3}'; }; done \
         | sort -u | while read -r f; do dpkg -S "$(readlink -f "$f")" 2>/dev/null || dpkg -S "$f" 2>/dev/null || true; done \
         | cut -d: -f1 | sed 's/,.*//' | sort -u)
keep="$(odeserve-install-deps --runtime --print) $needed ca-certificates openssl"
purge=""
for p in $(dpkg-query -W -f='${Package}\n'); do
  grep -qx "$p" "$before" && continue                  # in the base image
  echo " $keep " | tr ' \n' '\n\n' | grep -qx "$p" && continue
  purge="$purge $p"
done
if [ -n "$purge" ]; then
  echo "prune-runtime: purging$purge"
  # shellcheck disable=SC2086
  dpkg --purge --force-depends $purge >/dev/null
fi
missing=$(for l in $libs; do [ -f "$l" ] && ldd "$l" | grep 'not found' || true; done | sort -u)
if [ -n "$missing" ]; then echo "prune-runtime: unresolved after purge:"; echo "$missing"; exit 1; fi
echo "prune-runtime: purged $(echo $purge | wc -w) packages; $(echo "$libs" | wc -l) libraries still resolve"
