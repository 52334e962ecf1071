"""`python -m core.bench`: the benchmark CLI (core/bench/cli.py)."""
from core.bench.cli import main

raise SystemExit(main())
