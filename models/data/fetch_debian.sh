#!/bin/sh
# Fetch Debian bookworm main Packages + DDTP Translation-xx files with apt into a private folder.
# Usage: (cd models; /usr/bin/python3 -m odeserve_models fetch-data), which runs this script, or
# sh models/data/fetch_debian.sh. Writes models/data/raw/apt/lists and models/data/raw/text (git-ignored).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
RAW="$HERE/raw/apt"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$RAW/lists/partial" "$RAW/etc/sources.list.d" "$RAW/cache/archives/partial"
printf 'deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s bookworm main\n' "$MIRROR" > "$RAW/etc/sources.list"
apt-get update \
  -o Dir::State::Lists="$RAW/lists" \
  -o Dir::Etc::SourceList="$RAW/etc/sources.list" \
  -o Dir::Etc::SourceParts="$RAW/etc/sources.list.d" \
  -o Dir::Cache="$RAW/cache" \
  -o Acquire::Languages=en,de,fr,it,da,es,pt,ru,nl,pl,sv,fi,cs,ja \
  -o Acquire::PDiffs=false \
  -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false \
  -o APT::Get::List-Cleanup=false
ls -la "$RAW/lists"
# apt may keep the lists compressed (lz4/gz, per local apt.conf); decompress with apt's own helper.
mkdir -p "$HERE/raw/text"
for f in "$RAW"/lists/*_Packages* "$RAW"/lists/*Translation-*; do
  [ -f "$f" ] || continue
  base=$(basename "$f"); base=${base%.lz4}; base=${base%.gz}; base=${base%.xz}
  case "$base" in *Packages) out=Packages ;; *) out=${base##*_} ;; esac
  /usr/lib/apt/apt-helper cat-file "$f" > "$HERE/raw/text/$out"
done
ls -la "$HERE/raw/text"
