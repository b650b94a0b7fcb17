"""Reading files, folders and globs from under allowed roots, as RLM documents.

Shared by the MCP server, the LangChain `RLMTool` and ``rlm ask``. One job per module:

- `_load`: `load_paths` (list, check the caps, then read);
- `_records`: what it returns (`LoadResult`, `LoadedFile`, `SkippedFile`);
- `_documents`: the documents among the files, converted behind the walls by `rlm_adapters.documents`;
- `_walk`: the descriptor-based walk (`Tree.open` name by name with ``O_NOFOLLOW``; `WalkLimits`);
- `_glob`: glob patterns, refused before listing when they may reach outside the roots;
- `_gitignore`: ``.gitignore`` rules;
- `_paths`: whether a path lies under a root, and how names are shown.

`load_paths` raises `rlm_adapters.errors.FileLoadError` and `PathNotAllowedError` (re-exported here). A service
beside the engine: it imports `rlm_adapters.errors`, `rlm_adapters.documents` and the core's units, never an
adapter, and `rlm_adapters.core` does not import it.
"""

from rlm_adapters.errors import FileLoadError, PathNotAllowedError
from rlm_adapters.files._glob import check_glob
from rlm_adapters.files._load import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FILES, load_paths
from rlm_adapters.files._loaded import LoadedFile, LoadResult, SkippedFile
from rlm_adapters.files._paths import is_under
from rlm_adapters.files._walk import SKIPPED_DIRS

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_FILES",
    "SKIPPED_DIRS",
    "FileLoadError",
    "LoadResult",
    "LoadedFile",
    "PathNotAllowedError",
    "SkippedFile",
    "check_glob",
    "is_under",
    "load_paths",
]
