"""Run the plugin's tests from a checkout, installed or not (the package sits one level up)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
