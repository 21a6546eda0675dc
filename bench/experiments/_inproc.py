"""The trees an in-process A/B compares (cache_inproc_ab.py, join_inproc_ab.py): package
copies named on the command line, imported side by side.

Setup (on the GPU machine), one package copy per tree under its own name:
    mkdir -p /tmp/ab; cp -r <tree>/src/gpuhash /tmp/ab/<name>   (AB_DIR overrides /tmp/ab)
The package's imports are relative, so each copy is a separate package sharing nothing but
torch. Machine drift between calls (20-40% for host-bound calls on the H100 machines) then
hits every tree alike; separate processes per tree did not resolve a 20% difference."""

import importlib
import os
import sys


def trees() -> dict:
    """Tree name -> its imported package, for the names given on the command line."""
    sys.path.insert(0, os.environ.get("AB_DIR", "/tmp/ab"))
    return {name: importlib.import_module(name) for name in sys.argv[1:]}
