"""The process cores, named after SGLang's managers.

``tokenizer_manager`` (in each worker process, as ``worker``'s
``TokenizerWorker``) tokenizes and waits for results; ``router`` joins N workers
to one ``scheduler``, which runs the engine step by step (``scheduler_async``
for engines that stream, ``scheduler_logprobs`` for logprobs); the
``detokenizer`` turns token ids into text with ``decoding``'s incremental
decoder and sends each piece to the worker that owns the request.  ``models``
loads each served model's tokenizer.
"""
