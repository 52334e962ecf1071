"""The decode engine: the loop (eagle.py, baseline.py), the contracts it reads (contract.py: Drafter, Target), trees,
acceptance, sampling, the KV cache, step records, exactness and tree planning. Imports nothing else from core
(docs/ARCHITECTURE.md §2; tests/system/test_layers.py)."""
