#!/usr/bin/env bash
# Builds docker/Dockerfile without a Docker engine and proves the image serves.
#
#   sudo docker/build-check.sh [--base-only] [--rebuild-base] [--run-only] [--keep] [--repository DIR]
#
# 1. base:  debootstraps Debian bookworm (minbase) and imports it with podman under the name
#           the Dockerfile's FROM uses (docker.io/library/debian:bookworm-slim), so nothing is
#           pulled from a container registry. Reused on later runs unless --rebuild-base.
# 2. build: `podman build --isolation=chroot --network=host` of docker/Dockerfile, with the
#           context made of the files git tracks or would track (git ls-files -co
#           --exclude-standard), i.e. what a clean checkout holds.
# 3. run:   exports the built image's filesystem and starts its ENTRYPOINT under chroot as the
#           image's non-root user (podman run does not work in this sandbox), with the image's
#           default model repository; checks grpc.health.v1 for "" and odeserve.v1.Inference
#           with a Python grpcio client from the host, makes one Embed call, scrapes /metrics,
#           and sends SIGTERM expecting a clean drain (exit 0).
# 4. size:  prints the image size (podman image inspect .Size) and the layer sizes.
# --run-only: skip steps 1-2 and check the image already tagged.
# --repository DIR: run step 3 with this model repository (copied next to the exported
# filesystem, not into the image) instead of the image's bundled one, e.g. while the bundled
# repository is still empty.
#
# Environment: ODESERVE_IMAGE_WORK (default /var/tmp/odeserve-image), ODESERVE_IMAGE_TAG
# (default localhost/odeserve:check), JOBS (compile jobs inside the build, default 1),
# DEBIAN_MIRROR (default: the host's first deb.debian.org-style URI), PODMAN (default podman).
# Needs root, podman and debootstrap (docker/install-deps.sh --image-tools).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
work=${ODESERVE_IMAGE_WORK:-/var/tmp/odeserve-image}
tag=${ODESERVE_IMAGE_TAG:-localhost/odeserve:check}
jobs=${JOBS:-1}
podman=${PODMAN:-podman}
base_image=$(sed -n 's/^ARG BASE_IMAGE=//p' "$here/Dockerfile" | head -n1)
base_only=0 rebuild_base=0 run_only=0 keep=0 repository=""
while (($#)); do
  a=$1; shift
  case "$a" in
    --repository) repository=$(cd "$1" && pwd); shift ;;
    --base-only) base_only=1 ;;
    --rebuild-base) rebuild_base=1 ;;
    --keep) keep=1 ;;
    --run-only) run_only=1 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "build-check: unknown option $a" >&2; exit 2 ;;
  esac
done

log() { printf '[build-check %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { log "FAIL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (debootstrap, chroot, mount)"
command -v "$podman" >/dev/null && command -v debootstrap >/dev/null \
  || die "podman/debootstrap missing: run docker/install-deps.sh --image-tools"
[[ -n "$base_image" ]] || die "no 'ARG BASE_IMAGE=' in docker/Dockerfile"
# The health client needs Debian's python3-grpcio; a pyenv/venv python3 first on PATH may lack it.
python=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import grpc' 2>/dev/null; then python=$p; break; fi
done
[[ -n "$python" ]] || die "no python3 with grpc (python3-grpcio, docker/install-deps.sh)"
mkdir -p "$work"

# ---------------------------------------------------------------------------------- 1. base
if ((run_only)); then
  "$podman" image exists "$tag" || die "--run-only: no image $tag"
  log "--run-only: checking the existing $tag"
elif ((rebuild_base)) || ! "$podman" image exists "$base_image"; then
  mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
                            | grep -v security | head -n1)}
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs="$work/rootfs"
  rm -rf "$rootfs"
  log "debootstrap bookworm (minbase) from $mirror"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log"; die "debootstrap"; }
  # Same sources as debian:bookworm-slim (main, updates, security), slim-style dpkg excludes.
  rm -f "$rootfs/etc/apt/sources.list"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  log "podman import as $base_image"
  tar -C "$rootfs" --numeric-owner -c . | "$podman" import \
      --change 'CMD ["bash"]' - "$base_image" >/dev/null
  rm -rf "$rootfs"
fi
if ((!run_only)); then
log "base image $base_image: $("$podman" image inspect --format '{{.Size}}' "$base_image") bytes"
((base_only)) && exit 0

# --------------------------------------------------------------------------------- 2. build
ctx="$work/context"
rm -rf "$ctx" && mkdir -p "$ctx"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
   | while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done \
   | tar --null -T - -c) | tar -C "$ctx" -x
if [[ ! -d "$ctx/models/repository" ]]; then
  log "WARNING: models/repository has no tracked files yet: the image gets an empty bundled repository"
  mkdir -p "$ctx/models/repository"
fi
log "context: $(du -sh "$ctx" | cut -f1) from git ls-files ($(cd "$repo" && git rev-parse --short HEAD) + working tree); building $tag (JOBS=$jobs)"
start=$(date +%s)
"$podman" build --isolation=chroot --network=host --pull=never \
    --build-arg "JOBS=$jobs" --build-arg "ODESERVE_COMMIT=$(cd "$repo" && git rev-parse --short HEAD)" -f "$ctx/docker/Dockerfile" -t "$tag" "$ctx" \
    > "$work/podman-build.log" 2>&1 || { tail -n 60 "$work/podman-build.log"; die "podman build (log: $work/podman-build.log)"; }
log "built $tag in $(( $(date +%s) - start )) s (log: $work/podman-build.log)"
fi

# ----------------------------------------------------------------------------------- 3. run
root="$work/image-root"
rm -rf "$root" && mkdir -p "$root"
cid=$("$podman" create "$tag")
"$podman" export "$cid" | tar -C "$root" --numeric-owner -x
"$podman" rm "$cid" >/dev/null
entry=$("$podman" image inspect --format '{{join .Config.Entrypoint " "}}' "$tag")
user=$("$podman" image inspect --format '{{.Config.User}}' "$tag")
log "image entrypoint: $entry, user: $user"
[[ -n "$user" && "$user" != root && "${user%%:*}" != 0 ]] || die "image runs as root"
[[ -x "$root$entry" ]] || die "entrypoint $entry missing in the image"

read -r grpc_port metrics_port < <("$python" - <<'EOF'
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
EOF
)
serverlog="$work/server.log"
repo_flag=()
if [[ -n "$repository" ]]; then
  cp -a "$repository" "$root/opt/odeserve-check-repository"
  chown -R "$user" "$root/opt/odeserve-check-repository"
  repo_flag=(--model_repository=/opt/odeserve-check-repository)
  log "running with --repository $repository (not the image's bundled models)"
fi
# Private mount namespace: /proc, /sys (LibTorch's cpuinfo reads both), /dev and a tmpfs /tmp
# exist only for the server and vanish with it, as in a container.
unshare --mount --propagation private --fork --kill-child=SIGKILL sh -c '
  root=$1; user=$2; shift 2
  mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev" \
    && mount -t tmpfs tmpfs "$root/tmp"
  exec chroot --userspec="$user" "$root" "$@"' sh "$root" "$user" \
  $entry --grpc_port="$grpc_port" --metrics_port="$metrics_port" --metrics_address=127.0.0.1 "${repo_flag[@]}" \
  > "$serverlog" 2>&1 &
server_pid=$!
# unshare --fork blocks SIGTERM in itself: signals go to its child, the server (sh and chroot exec).
server_child() { pgrep -P "$server_pid" | head -n1; }
cleanup() {
  local c; c=$(server_child || true)
  [[ -n "$c" ]] && kill -KILL "$c" 2>/dev/null
  kill -KILL "$server_pid" 2>/dev/null || true
  ((keep)) || rm -rf "$root"
}
trap cleanup EXIT

"$python" "$repo/tests/deploy/odeserve_testlib.py" smoke --grpc "127.0.0.1:$grpc_port" \
    --metrics "http://127.0.0.1:$metrics_port/metrics" --pid "$server_pid" --timeout 300 \
  || { tail -n 40 "$serverlog"; die "the image's server did not pass the smoke check"; }
if [[ -x "$root/opt/odeserve/bin/odeserve-cli" ]]; then
  # The image's own client, as docker/compose.yaml's healthcheck runs it.
  unshare --mount --propagation private --fork sh -c '
    root=$1; user=$2; shift 2
    mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev"
    exec chroot --userspec="$user" "$root" "$@"' sh "$root" "$user" \
    /opt/odeserve/bin/odeserve-cli --address="127.0.0.1:$grpc_port" health odeserve.v1.Inference \
    || die "odeserve-cli health inside the image failed"
  log "odeserve-cli health inside the image: SERVING (the compose healthcheck command)"
fi
child=$(server_child) || die "cannot find the server process under unshare ($server_pid)"
kill -TERM "$child"
rc=0; wait "$server_pid" || rc=$?
[[ $rc == 0 ]] || { tail -n 40 "$serverlog"; die "server exited $rc after SIGTERM (want 0)"; }
log "server in the image: healthy, served Embed, exposed /metrics, drained on SIGTERM (exit 0)"

# ---------------------------------------------------------------------------------- 4. size
size=$("$podman" image inspect --format '{{.Size}}' "$tag")
log "IMAGE SIZE $tag: $size bytes ($(numfmt --to=iec --suffix=B "$size"))"
"$podman" history --format '{{.Size}}\t{{.CreatedBy}}' "$tag" | cut -c1-150
