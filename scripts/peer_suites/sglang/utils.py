"""Stand-in for ``sglang.utils``: ``encode_image_base64`` (imported by
``test_request_body_validation.py``, which sends no image)."""

import base64


def encode_image_base64(image) -> str:
    """A path, or bytes, as base64 text."""
    if isinstance(image, str):
        with open(image, "rb") as f:
            image = f.read()
    return base64.b64encode(image).decode()
