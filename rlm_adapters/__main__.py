"""``python -m rlm_adapters``: the ``rlm`` command, as the console script runs it."""

from rlm_adapters.cli import main

raise SystemExit(main())
