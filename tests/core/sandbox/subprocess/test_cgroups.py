"""Which cgroup hierarchy holds each controller, for cgroup v1 (one per controller) and v2 (unified)."""

from __future__ import annotations

from pathlib import Path

from rlm_adapters.core.sandbox.subprocess.cgroups import Mount, parse_mounts


def test_v1_controllers_are_found_under_this_process_own_groups() -> None:
    own = "9:name=systemd:/\n8:pids:/\n4:memory:/jobs/abc\n1:cpu,cpuacct:/\n0::/\n"
    mounts = (
        "tmpfs /sys/fs/cgroup tmpfs rw,mode=755 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
    )
    found = parse_mounts(own, mounts)
    assert found == {
        "pids": Mount(Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/pids"), 1),
        "memory": Mount(Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/memory/jobs/abc"), 1),
    }


def test_v2_controllers_count_only_where_delegated_to_children(tmp_path: Path) -> None:
    group = tmp_path / "user.slice" / "app.slice"
    group.mkdir(parents=True)
    (group / "cgroup.subtree_control").write_text("memory pids\n")
    mounts = f"cgroup2 {tmp_path} cgroup2 rw,nosuid 0 0\n"
    found = parse_mounts("0::/user.slice/app.slice\n", mounts)
    assert found == {name: Mount(tmp_path, group, 2) for name in ("pids", "memory")}
    (group / "cgroup.subtree_control").write_text("cpu\n")
    assert parse_mounts("0::/user.slice/app.slice\n", mounts) == {}
