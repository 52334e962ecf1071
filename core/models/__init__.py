"""The target side: the transformers adapter (target.py), presets, weights on disk and the CPU kernels. Imports
only core/engine/."""
