"""Normalizers (placeholder until the real module lands)."""


def normalizer_from_json(d):
    return None
