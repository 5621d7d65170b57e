"""The HTTP face: what a client talks to.

``server`` (one ``http.server`` per worker process, strict ``framing``, kept-alive
``connections`` and the shared ``listen`` socket) hands each request to a route in
``routes``: SGLang's native ones in ``native``, OpenAI's in ``openai`` and ``chat``
(rendered by ``chat_prompt`` with :mod:`mtok.chat_templates`, parsed back by
``chat_parsing``), OpenAI's Responses API over chat in ``responses``, SGLang's
``/v1/score`` and ``/v1/rerank`` in ``scoring``, the parser routes in ``parser_routes``.  Bodies are read
(``parse``) through the one table of request fields, :mod:`mtok.fields`, and
checked by :mod:`mtok.validate` and :mod:`mtok.managers.limits`; every refusal
is an :class:`~mtok.validate.APIError`.

Two layers live here: the transport (``listen``, ``framing``, ``connections``,
``routes``, ``respond``, ``server``, ``inline``, the ``loop`` modules, ``offload``)
knows nothing of LLMs and sits below the engines and managers; the routes sit
above the managers they submit to (``tests/test_layout.py``'s ``LAYERS``).
"""
