"""A gate that fails the first time (creating the marker file argv[1]) and passes afterwards."""

import sys
from pathlib import Path

marker = Path(sys.argv[1])
if marker.exists():
    print("second try: pass")
    sys.exit(0)
marker.write_text("tried\n")
print("first try: fail")
sys.exit(1)
