"""EAGLE Playground: plain decoding vs EAGLE-2 speculative decoding, side by side (Gradio app).

`python app.py --help` lists the flags (the same as the `eagle-playground` command); the start-up lives in
app/main.py. Nothing happens at import.
"""
from app.main import cli, main, parse_args  # noqa: F401  (parse_args, main: the flags and start-up, for callers)

if __name__ == "__main__":
    raise SystemExit(cli())
