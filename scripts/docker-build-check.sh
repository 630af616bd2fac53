#!/usr/bin/env bash
# Build the real image from the unchanged Dockerfile and check it: every role's health check
# (api: /healthz; worker: its heartbeat, `margin worker --check`; migrate: a one-shot), the
# compiled kernel cache, and the layering (a one-line code change rebuilds in seconds and ships
# a few hundred KB, not the dependencies).
#
# Needs root on a Debian machine. No container registry is reachable from the build machines, so
# `python:3.11-slim` cannot be pulled: when no image of that name exists, a stand-in is made with
# debootstrap (Debian bookworm's python3 is 3.11) and tagged `python:3.11-slim`, with `python` and
# the venv module where the official image has them and this machine's CA certificates (pip
# reaches the package index through them). The Docker engine runs with its own socket and data
# root, without bridge networking or iptables, so builds and containers use the host's network.
#
#   scripts/docker-build-check.sh              # build, run, check; stops the engine it started
#   scripts/docker-build-check.sh --base-only  # only make sure the stand-in base image exists
#
# Environment: MARGIN_DOCKER_ROOT (engine state, default /var/lib/margin-docker),
# MARGIN_CHECK_PORT (port for the API container, default 18080), KEEP_ENGINE=1 (leave it running).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=python:3.11-slim
IMAGE=margin:check
ROOT=${MARGIN_DOCKER_ROOT:-/var/lib/margin-docker}
SOCK=$ROOT/docker.sock
PORT=${MARGIN_CHECK_PORT:-18080}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKER=/usr/bin/docker   # the engine's own client (another `docker` may come first on PATH)
export DOCKER_HOST=unix://$SOCK

log() { printf '[docker-build-check %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

install_tools() {
    local missing=()
    [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

STARTED_ENGINE=0
start_engine() {
    mkdir -p "$ROOT"
    if $DOCKER info >/dev/null 2>&1; then
        log "engine already running on $SOCK"
        return
    fi
    log "starting dockerd (state in $ROOT)"
    dockerd --host "$DOCKER_HOST" --data-root "$ROOT/data" --exec-root "$ROOT/exec" \
        --pidfile "$ROOT/dockerd.pid" --bridge=none --iptables=false --ip-masq=false \
        >"$ROOT/dockerd.log" 2>&1 &
    STARTED_ENGINE=1
    for _ in $(seq 60); do
        $DOCKER info >/dev/null 2>&1 && { log "engine up: $($DOCKER info --format '{{.ServerVersion}}, storage {{.Driver}}')"; return; }
        sleep 1
    done
    log "dockerd did not start; its log:"; tail -n 30 "$ROOT/dockerd.log"; exit 1
}

CONTAINER=""
cleanup() {
    [ -n "$CONTAINER" ] && $DOCKER rm -f "$CONTAINER" >/dev/null 2>&1 || true
    $DOCKER volume rm -f margin-check-data >/dev/null 2>&1 || true
    if [ "$STARTED_ENGINE" = 1 ] && [ "${KEEP_ENGINE:-0}" != 1 ] && [ -f "$ROOT/dockerd.pid" ]; then
        log "stopping the engine"
        kill "$(cat "$ROOT/dockerd.pid")" 2>/dev/null || true
    fi
}
trap cleanup EXIT

make_base_image() {
    if $DOCKER image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        log "base image $BASE_IMAGE present"
        return
    fi
    local rootfs
    rootfs=$(mktemp -d /tmp/margin-standin.XXXXXX)
    log "debootstrap bookworm into $rootfs (stand-in for $BASE_IMAGE)"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$MIRROR" >"$ROOT/debootstrap.log" 2>&1 \
        || { tail -n 30 "$ROOT/debootstrap.log"; exit 1; }
    # The official image has python at /usr/local/bin; Debian's is python3.11 in /usr/bin.
    ln -sf /usr/bin/python3.11 "$rootfs/usr/local/bin/python"
    ln -sf /usr/bin/python3.11 "$rootfs/usr/local/bin/python3"
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    local version
    version=$(chroot "$rootfs" /usr/local/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$version" = 3.11 ] || { log "stand-in python is $version, expected 3.11"; exit 1; }
    tar -C "$rootfs" -c . | $DOCKER import \
        --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    log "stand-in $BASE_IMAGE built (python $version)"
}

build_image() {
    log "docker build (host network) -> $IMAGE"
    local start=$SECONDS
    $DOCKER build --network host --build-arg COMMIT="$(git rev-parse HEAD 2>/dev/null || true)" \
        -t "$IMAGE" . >"$ROOT/build.log" 2>&1 \
        || { tail -n 40 "$ROOT/build.log"; exit 1; }
    grep -E '^(warmed|skipped|[0-9]+ of [0-9]+ steps)' "$ROOT/build.log" | sed 's/^/    /' || true
    log "built in $((SECONDS - start)) s; size $($DOCKER image inspect "$IMAGE" --format '{{.Size}}') bytes"
}

layer_ids() { $DOCKER image inspect "$1" --format '{{range .RootFS.Layers}}{{println .}}{{end}}'; }

check_rebuild() {  # a one-line change to the service's code: seconds, and a small new layer
    local context start took new_layers size
    context=$(mktemp -d /tmp/margin-rebuild.XXXXXX)
    git ls-files -z | xargs -0 cp -p --parents -t "$context/"
    echo "# rebuilt $(date +%s)" >> "$context/app/__init__.py"
    start=$(date +%s.%N)
    $DOCKER build --network host -t margin:rebuilt "$context" >"$ROOT/rebuild.log" 2>&1 \
        || { tail -n 40 "$ROOT/rebuild.log"; exit 1; }
    took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
    layer_ids "$IMAGE" > "$ROOT/layers.before"
    new_layers=$(comm -13 <(sort "$ROOT/layers.before") <(layer_ids margin:rebuilt | sort))
    size=$($DOCKER save margin:rebuilt | python3 scripts/layer_sizes.py "$ROOT/layers.before" 2>"$ROOT/new-layers.txt")
    log "one-line change: rebuilt in ${took} s; $(echo "$new_layers" | grep -c . ) new layers, ${size} bytes shipped"
    python3 -c "import sys; sys.exit(0 if $size < 5_000_000 and $took < 120 else 1)" \
        || { log "the rebuild shipped ${size} bytes or took ${took} s (limits: 5 MB, 120 s)"; exit 1; }
    echo "rebuild_s=$took rebuild_bytes=$size" > "$ROOT/rebuild.txt"
    $DOCKER image rm margin:rebuilt >/dev/null
    rm -rf "$context"
}

wait_healthy() {  # container, what
    local status=""
    for _ in $(seq 120); do
        status=$($DOCKER inspect --format '{{.State.Health.Status}}' "$1")
        [ "$status" = healthy ] && break
        [ "$($DOCKER inspect --format '{{.State.Running}}' "$1")" = true ] || break
        sleep 1
    done
    if [ "$status" != healthy ]; then
        log "$2 container not healthy (status: $status); its log:"
        $DOCKER logs "$1" 2>&1 | tail -n 40
        exit 1
    fi
    log "$2: HEALTHCHECK reports healthy"
}

timed_warmup() {  # seconds to run scripts/warm_kernels.py in a fresh container
    local cache_env=()
    [ -n "$1" ] && cache_env=(-e "NUMBA_CACHE_DIR=$1")
    $DOCKER run --rm --network host "${cache_env[@]}" --entrypoint python "$IMAGE" -c \
        'import subprocess,sys,time; t=time.perf_counter(); subprocess.run([sys.executable,"scripts/warm_kernels.py"],check=True,capture_output=True); print(f"{time.perf_counter()-t:.1f}")'
}

check_image() {
    local user
    user=$($DOCKER run --rm --network host --entrypoint id "$IMAGE" -u)
    [ "$user" != 0 ] || { log "image runs as root"; exit 1; }
    log "runs as uid $user"

    # The same tiny fits with the image's cache, then with an empty one: the first must not compile.
    local warm cold
    warm=$(timed_warmup "")
    cold=$(timed_warmup /tmp/empty-numba-cache)
    log "tiny fits through every solver: ${warm} s with the image's kernel cache, ${cold} s compiling"
    python3 -c "import sys; sys.exit(0 if $warm * 2 < $cold else 1)" \
        || { log "the image's kernel cache was not used"; exit 1; }

    $DOCKER volume create margin-check-data >/dev/null
    log "margin migrate (SQLite on the data volume)"
    $DOCKER run --rm --network host -v margin-check-data:/data "$IMAGE" migrate

    log "margin api on 127.0.0.1:$PORT"
    CONTAINER=$($DOCKER run -d --network host -v margin-check-data:/data -e PORT="$PORT" \
        -e HOST=127.0.0.1 --health-interval 2s --health-start-period 60s "$IMAGE" api)
    wait_healthy "$CONTAINER" api

    # A worker serves no HTTP: its check is its heartbeat (the old check probed the API port and
    # reported every worker unhealthy). Same data volume: SQLite, the local pool.
    log "margin worker (local pool, one process)"
    WORKER=$($DOCKER run -d --network host -v margin-check-data:/data --health-interval 2s \
        --health-start-period 90s "$IMAGE" worker --workers 1)
    wait_healthy "$WORKER" worker
    $DOCKER rm -f "$WORKER" >/dev/null
    local body
    body=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=5).read().decode())")
    log "GET /healthz from the host: $body"
}

install_tools
start_engine
make_base_image
if [ "${1:-}" = --base-only ]; then exit 0; fi
build_image
check_image
check_rebuild
log "OK"
