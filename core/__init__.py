"""EAGLE Playground core: baseline and EAGLE-2 decoding over stock transformers causal LMs, in layers (engine <
models < drafters < pipeline < train, bench; docs/ARCHITECTURE.md §2).

core/ is UI-free (no gradio, no plotly) and tokenizer-free in its decoders: everything flows as token ids.
"""
