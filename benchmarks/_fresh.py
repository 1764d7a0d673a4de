"""One benchmark measurement in a fresh Python process running a given source tree.

A fresh process pays what a user's first fit pays (imports, worker processes, caches), and
``PYTHONPATH`` selects the checkout, so that trees can be interleaved in one run.
"""

import json
import os
import subprocess
import sys


def run_child(tree, code, args, env=None):
    """Run ``python -c code *args`` with ``tree`` first on the path; return its last stdout line as JSON."""
    env = dict(os.environ, PYTHONPATH=str(tree), **(env or {}))
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        cwd=str(tree),  # ``python -c`` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
