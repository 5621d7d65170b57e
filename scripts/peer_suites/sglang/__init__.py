"""Stand-in for the ``sglang`` package: just what SGLang's ``test/srt/openai_server``
tests import, so that they run unchanged against mtok (``scripts/peer_suites.md``)."""
