#!/usr/bin/env bash
# What the real compose test (tests/test_compose_docker.py) needs, installed when missing:
#   engine   a reachable Docker engine: Debian's docker.io, its daemon started in the background
#   compose  Compose v2 as a CLI plugin (`docker compose`): Debian trixie's static docker-compose
#            binary, fetched with `apt-get download` through a private sources list (the system's
#            sources are left alone; bookworm's own package is Compose v1, which rejects `name:`)
#   base     the image the Dockerfile starts FROM (python:3.11-slim): pulled when a registry is
#            reachable, else a stand-in with that tag built from `debootstrap --variant=minbase
#            bookworm` (Python 3.11) with a venv on PATH, built once and kept by tag
# Usage: .ci/docker.sh [engine|compose|base|all]   (default all; each step is a no-op when done)
# Installing needs root and apt-get; without them each step says what to install and exits 1.
set -euo pipefail

BASE_IMAGE=python:3.11-slim
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/parallel-rl-dockerd.log}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

TMP=""
cleanup() { if [ -n "$TMP" ]; then rm -rf "$TMP"; fi; }
trap cleanup EXIT
tmpdir() { [ -n "$TMP" ] || TMP=$(mktemp -d); }

say() { echo "docker.sh: $*" >&2; }
die() { say "$*"; exit 1; }

need_root_apt() {  # $1: what is missing, $2: what to install by hand
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "$1, and installing it needs root and apt-get: $2"
  fi
}

# wait (up to $1 seconds) until `docker info` answers
wait_engine() {
  local deadline=$((SECONDS + $1))
  until docker info >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}

engine() {
  if docker info >/dev/null 2>&1; then return 0; fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    need_root_apt "no Docker engine is installed" \
      "install one (Debian: apt-get install docker.io; or Docker Engine from docs.docker.com) and start it"
    say "installing Debian's docker.io"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
  if ! wait_engine 0; then
    need_root_apt "no Docker engine answers (docker info)" "start dockerd (e.g. systemctl start docker)"
    say "starting dockerd in the background (log: $DOCKERD_LOG)"
    setsid nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
    wait_engine 60 || die "dockerd did not answer within 60 s; see $DOCKERD_LOG"
  fi
}

compose_is_v2() {
  local version
  version=$(docker compose version --short 2>/dev/null) || return 1
  [[ "${version#v}" == 2.* ]]
}

compose() {
  if compose_is_v2; then return 0; fi
  need_root_apt "Compose v2 (docker compose) is missing" \
    "install the Docker Compose v2 plugin (docs.docker.com/compose/install/linux)"
  tmpdir
  local tmp=$TMP
  say "fetching Compose v2 (Debian trixie's docker-compose) into /usr/local/lib/docker/cli-plugins"
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
  echo "deb [signed-by=$KEYRING] $DEBIAN_MIRROR trixie main" >"$tmp/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
                  -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$tmp" && apt-get "${apt_opts[@]}" download -qq docker-compose)
  dpkg -x "$tmp"/docker-compose_*.deb "$tmp/x"
  install -D -m 0755 "$tmp/x/usr/libexec/docker/cli-plugins/docker-compose" \
    /usr/local/lib/docker/cli-plugins/docker-compose
  compose_is_v2 || die "docker compose still is not Compose v2 after installing the plugin"
}

base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
  if timeout 120 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
  need_root_apt "$BASE_IMAGE cannot be pulled (no registry reachable)" \
    "pull or load $BASE_IMAGE into the engine (docker load -i ...)"
  command -v debootstrap >/dev/null 2>&1 || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  tmpdir
  local tmp=$TMP
  say "no registry: building a stand-in $BASE_IMAGE from debootstrap bookworm (a few minutes, once)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
    bookworm "$tmp/rootfs" "$DEBIAN_MIRROR" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -20 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$tmp"/rootfs/var/lib/apt/lists/* "$tmp"/rootfs/var/cache/apt/* "$tmp"/rootfs/usr/share/{doc,man,info}/*
  tar -C "$tmp/rootfs" -c . | docker import - parallel-rl-stand-in-rootfs:bookworm >/dev/null
  # like the official image: python, pip on PATH (a venv under /usr/local/python)
  docker build -q -t "$BASE_IMAGE" - >/dev/null <<'EOF'
FROM parallel-rl-stand-in-rootfs:bookworm
RUN python3 -m venv /usr/local/python && /usr/local/python/bin/pip --version
ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
LABEL org.parallel-rl.stand-in="debootstrap --variant=minbase bookworm, for machines without a registry"
CMD ["python3"]
EOF
  docker image rm parallel-rl-stand-in-rootfs:bookworm >/dev/null
}

case "${1:-all}" in
  engine) engine ;;
  compose) compose ;;
  base) engine; base ;;
  all) engine; compose; base ;;
  *) die "usage: $0 [engine|compose|base|all]" ;;
esac
