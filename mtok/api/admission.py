"""What a request must pass before its route runs, written once for both
transports (the event loop of :mod:`mtok.api.loop` and the handler threads of
:mod:`mtok.api.server`): a server draining, a CORS preflight, the API key,
the route and its method, the body's type and framing; and the CORS headers
every answer carries.

:func:`admit` is the gate: given a parsed head it gives the handler to run
or raises the :class:`~mtok.validate.APIError` to answer.  A check added here
holds for both transports, so they cannot drift apart.
"""

from __future__ import annotations

import hmac
from typing import Any, Callable, Dict, Optional

from .framing import NO_BODY, Headers, field, is_json_type
from .routes import OPEN_PATHS, Request, Response, find_route
from ..validate import APIError

BODY_METHODS = ("POST", "PUT", "PATCH")


def admit(httpd: Any, command: str, path: str, headers: Headers, framing: str) -> Callable[[Request], Any]:
    """The handler for this request, or the APIError to answer it with.
    ``httpd`` holds the routes and the settings (``draining``, ``cors``,
    ``api_key``); ``framing`` is the body's (:func:`mtok.api.framing.head_framing`)."""
    if httpd.draining:
        raise APIError("the server is shutting down", 503, headers={"Retry-After": "1"})
    if command == "OPTIONS" and httpd.cors and headers.get("origin"):
        return lambda req: Response("", 204, cors_headers(httpd.cors, req.headers, preflight=True))
    if httpd.api_key is not None and path not in OPEN_PATHS:
        check_api_key(headers, httpd.api_key)
    methods = find_route(httpd.routes, path)
    if methods is None:
        raise APIError(f"no route for {path!r}", 404)
    handler = methods.get(command)
    if handler is None:
        allow = ", ".join(sorted(methods))
        raise APIError(f"{command} is not allowed on {path}; use {allow}", 405, headers={"Allow": allow})
    if command in BODY_METHODS and not is_json_type(field(headers, "content-type")):
        raise APIError(f"Content-Type {headers.get('content-type')!r} is not JSON; send application/json", 415)
    if framing == NO_BODY and command in BODY_METHODS and "content-length" not in headers:
        raise APIError("a request body needs Content-Length or chunked encoding", 411)
    return handler


def closes_after_refusal(httpd: Any, framing: str) -> bool:
    """Whether a refusal by :func:`admit` closes the connection: a body the
    client sent is left unread (its bytes are no next request), and a server
    draining takes no next request."""
    return framing != NO_BODY or httpd.draining


def cors_headers(allowed: frozenset, headers: Any, preflight: bool = False) -> Dict[str, str]:
    """CORS for browser clients, for the origins of --cors-allow-origins."""
    origin = headers.get("origin") if headers is not None else None
    if not origin or not allowed or ("*" not in allowed and origin not in allowed):
        return {}
    out = {"Access-Control-Allow-Origin": "*" if "*" in allowed else origin, "Vary": "Origin"}
    if preflight:
        out["Access-Control-Allow-Methods"] = "GET, POST, PUT, OPTIONS"
        out["Access-Control-Allow-Headers"] = headers.get("access-control-request-headers") or \
            "Authorization, Content-Type"
        out["Access-Control-Max-Age"] = "600"
    return out


def with_cors(allowed: frozenset, request_headers: Any, headers: Optional[Dict[str, str]]
              ) -> Optional[Dict[str, str]]:
    """An answer's headers with the CORS ones added, unless it has its own."""
    if not allowed or not isinstance(request_headers, Headers) or \
            "Access-Control-Allow-Origin" in (headers or {}):
        return headers
    extra = cors_headers(allowed, request_headers)
    return {**(headers or {}), **extra} if extra else headers


def has_api_key(headers: Headers, key: bytes) -> bool:
    """Whether the request carries ``Authorization: Bearer <key>``."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)


def check_api_key(headers: Headers, key: bytes) -> None:
    """401 unless the request carries ``Authorization: Bearer <key>``."""
    if not has_api_key(headers, key):
        raise APIError("a valid API key is required (Authorization: Bearer <key>)", 401,
                       headers={"WWW-Authenticate": "Bearer"})
