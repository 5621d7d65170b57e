"""Stand-in for ``sglang.test.runners``: the rerank inputs ``test_openai_server.py``
sends (one document, then two, as SGLang's)."""

TEST_RERANK_QUERY_DOCS = [
    {
        "query": "How many people live in Berlin?",
        "documents": ["Berlin is well known for its museums."],
    },
    {
        "query": "How many people live in Berlin?",
        "documents": [
            "Berlin had a population of 3,520,031 registered inhabitants in an area of 891.82 square kilometers.",
            "Berlin is well known for its museums.",
        ],
    },
]
