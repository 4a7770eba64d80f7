#!/usr/bin/env bash
# Build corral's OCI image without a daemon and without pulling a base image:
#   1. a Debian rootfs from packages (mmdebstrap --variant=minbase, the mirror apt uses),
#   2. the project's wheel and its dependencies' wheels (pip wheel, the PyPI mirror),
#      installed into a venv at /opt/corral inside that rootfs (a chroot hook),
#   3. buildah from scratch + that rootfs + the image config, committed and written out
#      as an OCI archive (the file CI caches) and kept in local containers-storage.
#
# Usage: scripts/build-image.sh [--print-key] [--force]
#   CORRAL_IMAGE_CACHE  where archives are kept, by content hash (default ~/.cache/corral-image)
#   CORRAL_IMAGE        the local name it is committed as (default localhost/corral:dev)
#   BUILDAH_STORAGE     storage driver for buildah (default: overlay, falling back to vfs)
# The archive's name is the hash of everything that goes into it (the Debian package list,
# pyproject.toml, src/, deploy/image/, this script): an unchanged tree reuses it.
# Prints the archive's path last.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
MIRROR=${CORRAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,procps,iproute2,ca-certificates
CACHE=${CORRAL_IMAGE_CACHE:-$HOME/.cache/corral-image}
IMAGE=${CORRAL_IMAGE:-localhost/corral:dev}
CORRAL_UID=990

key() {
    {
        echo "$SUITE $PACKAGES $CORRAL_UID"
        git ls-files -s pyproject.toml src deploy/image scripts/build-image.sh 2>/dev/null ||
            find pyproject.toml src deploy/image scripts/build-image.sh -type f -exec sha256sum {} +
        # uncommitted edits count too
        git diff HEAD -- pyproject.toml src deploy/image scripts/build-image.sh 2>/dev/null || true
    } | sha256sum | cut -c1-16
}

force=0
for arg in "$@"; do
    case "$arg" in
    --print-key) key; exit 0 ;;
    --force) force=1 ;;
    *) echo "build-image.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

for tool in mmdebstrap buildah; do
    command -v "$tool" >/dev/null || { echo "build-image.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
    echo "build-image.sh: run as root (mmdebstrap's chroot and buildah's storage)" >&2
    exit 1
fi

KEY=$(key)
ARCHIVE="$CACHE/corral-$KEY.oci.tar"
mkdir -p "$CACHE"
storage=${BUILDAH_STORAGE:-}
bh() { if [ -n "$storage" ]; then buildah --storage-driver "$storage" "$@"; else buildah "$@"; fi; }

if [ -f "$ARCHIVE" ] && [ "$force" = 0 ]; then
    # the local image, if it is not this archive's (another tree built it): load it
    label='{{index .OCIv1.Config.Labels "corral.build-key"}}'
    if [ "$(bh inspect --type image --format "$label" "$IMAGE" 2>/dev/null)" != "$KEY" ]; then
        id=$(bh pull --quiet "oci-archive:$ARCHIVE")
        bh tag "$id" "$IMAGE"
    fi
    echo "build-image.sh: cached $ARCHIVE ($IMAGE)" >&2
    echo "$ARCHIVE"
    exit 0
fi

start=$(date +%s)
WORK=$(mktemp -d /tmp/corral-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# one timestamp for every file and the image: the same tree builds the same layer
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

echo "build-image.sh: wheels (pip wheel)" >&2
# the wheels must fit the image's Python (bookworm's 3.11): build them with a 3.11
PY=${CORRAL_WHEEL_PYTHON:-python3}
if [ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != 3.11 ]; then
    echo "build-image.sh: $PY is not Python 3.11 (the image's): set CORRAL_WHEEL_PYTHON" >&2
    exit 1
fi
"$PY" -m pip wheel --quiet --wheel-dir "$WORK/wheels" . >&2

echo "build-image.sh: rootfs (mmdebstrap $SUITE minbase + $PACKAGES)" >&2
# /run/corral, ctld's socket directory, is corral's and 0755 in the image itself: a ctld
# started as corral (Kubernetes' runAsUser) cannot make it, and ctld binds only in a
# directory of its own that no one else may write (src/ctld/daemon/sockdir.py), which no
# Kubernetes volume is (an emptyDir is 0777)
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --customize-hook="chroot \"\$1\" useradd --system --uid $CORRAL_UID --user-group --home-dir /var/lib/corral --create-home --shell /usr/sbin/nologin corral" \
    --customize-hook='mkdir -p "$1/tmp/wheels" "$1/etc/corral" "$1/var/spool/corral"' \
    --customize-hook='chroot "$1" install -d -o corral -g corral -m 0755 /run/corral' \
    --customize-hook="sync-in $WORK/wheels /tmp/wheels" \
    --customize-hook='chroot "$1" python3 -m venv /opt/corral' \
    --customize-hook='chroot "$1" /opt/corral/bin/pip install --quiet --no-index --no-compile --find-links /tmp/wheels corral' \
    --customize-hook='chroot "$1" /opt/corral/bin/python -m compileall -q /opt/corral/lib' \
    --customize-hook='rm -rf "$1/tmp/wheels" "$1/root/.cache" "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/*' \
    --customize-hook="copy-in deploy/image/corral-entry /usr/local/bin" \
    "$SUITE" "$WORK/rootfs.tar" "$MIRROR" >&2

echo "build-image.sh: image (buildah from scratch)" >&2
if [ -z "$storage" ] && ! ctr=$(buildah from scratch 2>"$WORK/err"); then
    echo "build-image.sh: buildah's default storage failed ($(tail -1 "$WORK/err")): vfs" >&2
    storage=vfs
fi
[ -n "${ctr:-}" ] || ctr=$(bh from scratch)
bh add "$ctr" "$WORK/rootfs.tar" / >/dev/null
bh config \
    --entrypoint '["/usr/local/bin/corral-entry"]' --cmd '["noded"]' \
    --env PATH=/opt/corral/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env CORRAL_CONF=/etc/corral/corral.toml --env PYTHONUNBUFFERED=1 \
    --workingdir /var/lib/corral \
    --label org.opencontainers.image.title=corral \
    --label org.opencontainers.image.source=https://github.com/corral \
    --label "corral.build-key=$KEY" \
    "$ctr"
bh commit --quiet --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" "$IMAGE" >/dev/null
bh push --quiet "$IMAGE" "oci-archive:$ARCHIVE.part:$IMAGE" >&2
mv "$ARCHIVE.part" "$ARCHIVE"
# the cache keeps the three newest archives (one per tree: they are 127 MB each)
ls -t "$CACHE"/corral-*.oci.tar | tail -n +4 | xargs -r rm -f
echo "build-image.sh: built $IMAGE in $(($(date +%s) - start)) s: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))" >&2
echo "$ARCHIVE"
