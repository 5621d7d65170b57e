"""The process cores, named after SGLang's managers, and the runners that own their sockets.

``tokenizer_manager`` (in each worker process, as :mod:`mtok.worker`'s
``TokenizerWorker``) turns a request into the scheduler's messages
(``prepare``, within the per-request ``limits``) and hands the route a ``request_handle`` to read results from
and close; ``router`` joins N workers to one ``scheduler``, which runs the
engine step by step (``scheduler_async`` for engines that stream,
``scheduler_logprobs`` for logprobs, ``scheduler_rpc`` for control calls); the
``detokenizer`` turns token ids into text with ``decoding``'s incremental
decoder.  Each served model's tokenizer and template come from the registry
below, :mod:`mtok.models`.

The cores are plain objects -- messages in, messages out -- and bind nothing;
``runners`` bind their inboxes and senders, run their loops and close them;
the HTTP worker process's runner is :mod:`mtok.worker`, above the routes it serves.
"""
