"""Stand-in for ``sglang.srt``."""
