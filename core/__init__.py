"""EAGLE Playground engine: baseline and EAGLE-2 decoding over stock transformers causal LMs.

core/ is UI-free (no gradio, no plotly) and tokenizer-free in its decoders: everything flows as token ids.
"""
