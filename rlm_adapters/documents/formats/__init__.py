"""The converters of each document format, run inside the converter's sandbox.

Each module has one function, ``convert(handle, out)``: it reads the document from the binary file `handle`
and writes its text and places to `out` (a `_text.TextOut`), raising `_text.Refused` for a document it will
not convert. The converter program (`rlm_adapters/core/sandbox/programs/converter.py`) loads them by path,
behind the walls, with the document libraries on its path; none of them imports anything of this package
at run time (`_text` only for type checkers), so each runs as a lone file. On the host they are imported
only by tests and the benchmark's unsandboxed arm: the host never converts a document.
"""
