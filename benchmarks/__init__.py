"""paella-tui's benchmarks (SPEC 13), each a script run from the repository root.

The scripts (``checkpoint.py``, ``engine.py``, ``tui.py``, ``cli.py``) import what they share
from the modules beside them as ``benchmarks.<module>``: the editable install puts the
repository root on ``sys.path``, so that works for ``python benchmarks/<name>.py`` and for
``python -m benchmarks.<name>`` alike.
"""
