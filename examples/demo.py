"""The devs demo, run from a checkout: the same script as ``devs demo``.

    python examples/demo.py [--db PATH]

A scripted agent loop walked through the whole failure ladder with real
sandboxed gates, each step a ``devs`` command line with what it printed and its
exit code (the steps live in ``devs.adapters.demo``). Without --db it uses a
fresh SQLite file in a temporary directory.
"""

from __future__ import annotations

import sys

from devs.adapters.cli import cli

if __name__ == "__main__":
    cli.main(args=["demo", *sys.argv[1:]], prog_name="devs")
