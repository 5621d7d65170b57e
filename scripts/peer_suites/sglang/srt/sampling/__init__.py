"""Stand-in for ``sglang.srt.sampling``."""
