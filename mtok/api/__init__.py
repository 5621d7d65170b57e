"""The HTTP face: what a client talks to.

The ``loop`` (one event loop per worker process, on the shared ``listen`` socket)
reads each request (``intake``: strict ``framing``; the gate of ``admission``) and
hands it to a route in ``routes``, running what may block on its ``offload``
pools and writing streams with ``sse``; ``server`` (a thread per connection, with
the loop's parts) does the same where there is no loop.  The routes: SGLang's native ones in ``native``, OpenAI's in ``openai`` and ``chat``
(rendered by ``chat_prompt`` with :mod:`mtok.chat_templates`, parsed back by
``chat_parsing``), OpenAI's Responses API over chat in ``responses``, SGLang's
``/v1/score`` and ``/v1/rerank`` in ``scoring``, the parser routes in ``parser_routes``.  Bodies are read
(``parse``) through the one table of request fields, :mod:`mtok.fields`, and
checked by :mod:`mtok.validate` and :mod:`mtok.managers.limits`; every refusal
is an :class:`~mtok.validate.APIError`.

Two layers live here: the transport (``listen``, ``framing``, ``connections``,
``routes``, ``admission``, ``intake``, ``respond``, ``sse``, ``server``, the ``loop``
modules, ``offload``)
knows nothing of LLMs and sits below the engines and managers; the routes sit
above the managers they submit to (``tests/layout/test_layout.py``'s ``LAYERS``).
"""
