"""Train EAGLE-1/2 draft heads: self-distilled data, feature shards, reduced vocabulary, training, evaluation.

Run as `python -m core.train --out runs/NAME [...]`; every stage resumes from what is already on disk.
"""
