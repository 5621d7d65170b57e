"""mtok: a multi-process LLM serving frontend built on the standard library."""

__version__ = "0.1.0"
