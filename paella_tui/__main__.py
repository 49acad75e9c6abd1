"""``python -m paella_tui``: the same as the ``paella`` command."""

from paella_tui.cli import main

raise SystemExit(main())
