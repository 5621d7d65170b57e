"""What crosses process boundaries, and how.

``io_struct`` (the messages) and ``finish`` (why a request ended) travel over
``ipc`` (authenticated ``multiprocessing.connection`` with an allow-list
unpickler); ``socket_mapping`` keeps one sender per worker address.  ``args``
hands the server's settings to each child through shared memory (``filemem``
where there is none); ``status`` is the status board and ``metrics`` the
counters published on it.
"""
