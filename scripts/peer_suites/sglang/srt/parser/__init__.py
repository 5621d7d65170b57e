"""Stand-in for ``sglang.srt.parser``."""
