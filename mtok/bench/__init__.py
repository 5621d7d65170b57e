"""Benchmarks: ``python -m mtok.bench <command> [options]`` (see ``__main__``)."""
