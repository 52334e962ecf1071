"""The benchmark (`python -m core.bench`): plan, runners, pure report arithmetic, questions."""
