"""Drafters and their heads: EAGLE-1/2 and EAGLE-3 (eagle.py), Medusa, lookup, and the head registry (heads.py).
Imports only core/engine/ and core/models/."""
