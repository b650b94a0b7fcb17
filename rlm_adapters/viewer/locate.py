"""Which trajectory log a name means: a `.jsonl` file, a folder (its newest run), or a run id in a log folder."""

from __future__ import annotations

from pathlib import Path

from rlm_adapters.viewer.log_build import trajectory_problem
from rlm_adapters.viewer.log_reader import BadLogError, read_log

DEFAULT_LOG_DIR = "./logs"


class NotATrajectoryError(ValueError):
    """A file named on the command line is not a trajectory log."""


def logs_in(folder: Path) -> list[Path]:
    """The trajectory logs in `folder`, oldest first."""
    found = sorted(folder.glob("rlm_*.jsonl")) or sorted(folder.glob("*.jsonl"))
    # Other programs' JSON Lines files (the reference RLM's logs are also rlm_*.jsonl) are not runs.
    found = [path for path in found if trajectory_problem(path) is None]
    # Names carry a UTC stamp, but other files may not: order by modification time, name as tie-break.
    return sorted(found, key=lambda path: (path.stat().st_mtime, path.name))


def resolve(target: str, log_dir: str | Path = DEFAULT_LOG_DIR) -> Path:
    """The log file meant by `target`: a `.jsonl` file, a folder (its newest run), or a trajectory id.

    Raises:
        FileNotFoundError: Nothing matches, with what was tried.
        NotATrajectoryError: `target` is a file, but not a trajectory log.
    """
    path = Path(target)
    if path.is_file():
        problem = trajectory_problem(path)
        if problem is not None:
            raise NotATrajectoryError(problem)
        return path
    if path.is_dir():
        logs = logs_in(path)
        if not logs:
            raise FileNotFoundError(f"no trajectory logs (*.jsonl) in folder {target!r}")
        return logs[-1]
    found = _find_run(Path(log_dir), target) if target and Path(log_dir).is_dir() else None
    if found is not None:
        return found
    raise FileNotFoundError(f"{target!r} is not a log file, a folder of logs, or a run id found in {str(log_dir)!r}")


def _find_run(log_dir: Path, run_id: str) -> Path | None:
    """The newest log in `log_dir` whose header's run id starts with `run_id` (files that are not logs skipped)."""
    for path in sorted(log_dir.glob(f"rlm_*_{run_id[:8]}.jsonl"), reverse=True):
        if trajectory_problem(path) is not None:
            continue
        try:
            first = read_log(path)[:1]
        except BadLogError:
            continue
        found = first[0].data.get("run_id") if first else None
        if isinstance(found, str) and found.startswith(run_id):
            return path
    return None
