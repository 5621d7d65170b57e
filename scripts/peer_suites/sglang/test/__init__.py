"""Stand-in for ``sglang.test``."""
