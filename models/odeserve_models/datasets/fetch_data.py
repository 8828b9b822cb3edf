"""Fetch Debian bookworm's main Packages file and its DDTP Translation-xx files (en, de, fr, it, da,
es, pt, ru, nl, pl, sv, fi, cs, ja) with apt into a private lists folder, models/data/raw/apt, and
decompress them to models/data/raw/text (both git-ignored). Runs models/data/fetch_debian.sh
(apt-get update with its own sources list, lists and cache folders under models/data/raw/apt).
DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).

    cd models; /usr/bin/python3 -m odeserve_models fetch-data
"""
import os
import subprocess

from odeserve_models.cli import parser
from odeserve_models.paths import DATA_DIR


def main(argv=None) -> int:
    parser("fetch-data", __doc__).parse_args(argv)
    return subprocess.call(["sh", os.path.join(DATA_DIR, "fetch_debian.sh")])
