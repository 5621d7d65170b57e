"""``stop_regex``: matched in linear time (mtok.managers.stop_regex), on every surface SGLang takes it.

The echo engine says the prompt back, so a prompt with known text makes every
stop deterministic.  The matcher is held to ``re.search`` (what SGLang runs)
on prefixes of the text, its cost to the length of the text, whatever the
pattern, and the server to serving other requests while one with a
catastrophic pattern runs.
"""

from __future__ import annotations

import os
import re
import threading

import pytest

from mtok.managers import stop_regex
from mtok.managers.stop_regex import PatternError, StopRegexes
from support import ROOT

pytestmark = pytest.mark.fast

SENTENCE = "The cat sat and the dog ran or walked."


def first_stop(patterns, text):
    """Feed ``text`` a character at a time: (characters fed, match start, pattern) of the first match."""
    m = StopRegexes(patterns)
    hit = m.feed("")
    if hit is not None:
        return 0, hit[0], hit[1]
    for k, c in enumerate(text, 1):
        hit = m.feed(c)
        if hit is not None:
            return k, hit[0], hit[1]
    return None


def re_first_stop(pattern, text):
    """What SGLang's re.search after each step finds, a step being a character."""
    for k in range(len(text) + 1):
        m = re.search(pattern, text[:k])
        if m:
            return k, m.start(), pattern
    return None


# -- the matcher, in process -----------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("pattern", [r"and|or", r"[.!?]\s*$", r"d\w+", r"\bran\b", r"o(r|g)", r"^The", r"x*",
                                     r"s.t a", r"(ca|do)[tg]", r"[^a-z ]", r"\d+", r"a{2,3}", r"(?m)^the",
                                     r"(?s)dog.ran", r"t\B"])
def test_the_first_match_is_the_one_re_search_finds(pattern):
    assert first_stop([pattern], SENTENCE) == re_first_stop(pattern, SENTENCE)


@pytest.mark.unit
def test_text_in_pieces_stops_where_the_piece_completed_a_match():
    m = StopRegexes(["dog", "ran"])
    assert m.feed("The cat sat and the d") is None
    assert m.hold_from() == len("The cat sat and the ")  # a match may be under way from the 'd'
    assert m.feed("og ran") == (len("The cat sat and the "), "dog")


@pytest.mark.unit
def test_matches_before_the_minimum_are_passed_over_and_positions_kept():
    m = StopRegexes(["a"])
    assert m.feed("a a", report=False) is None
    assert m.feed(" b a") == (6, "a")


@pytest.mark.unit
@pytest.mark.timeout(30)
@pytest.mark.parametrize("pattern", [r"(a+)+$x", r"(a|aa)*c", r"(a*)*b", r"a*a*a*a*a*a*a*a*a*b", r"(x+x+)+y"])
def test_catastrophic_patterns_cost_linear_time(pattern):
    """Each is exponential (or a high power) for re.search over a few dozen
    characters; here 20,000 characters are a fraction of a second each."""
    assert re.search(pattern, "a") is None  # the patterns are real ones: re compiles them
    m = StopRegexes([pattern])
    for _ in range(20):
        assert m.feed("a" * 1000 if "a" in pattern else "x" * 1000) is None


@pytest.mark.unit
@pytest.mark.parametrize("pattern,why", [("(a", "not a valid regular expression"), (r"(a)\1", "backreference"),
                                         ("a(?=b)", "lookaround"), ("(?i)a", "flags"), ("(?>a+)b", "atomic"),
                                         ("(a{100}){100}", "too large")])
def test_what_needs_backtracking_or_is_too_large_is_refused(pattern, why):
    if why == "atomic" and not hasattr(re, "NOFLAG"):
        pytest.skip("atomic groups are Python 3.11+ syntax")
    with pytest.raises(PatternError, match=why):
        StopRegexes([pattern])


@pytest.mark.unit
def test_a_partial_match_older_than_the_window_is_dropped():
    m = StopRegexes(["a.*b"])
    m.feed("a")
    assert m.hold_from() == 0
    m.feed("x" * stop_regex.WINDOW)
    assert m.hold_from() is None  # the match cannot fit any more: nothing is held back
    assert m.feed("b") is None


# -- over HTTP, with the echo engine -----------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(server_factory):
    # a step takes 5 ms, so a stream has an event per token
    return server_factory("--engine-step-delay", "0.005",
                          "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))


def gen(text, **sp):
    return {"text": text, "sampling_params": dict({"max_new_tokens": 64}, **sp)}


def test_generate_stops_at_the_first_match_and_names_the_pattern(srv):
    status, resp = srv.post("/generate", gen(SENTENCE, stop_regex=r"and|or"))
    assert status == 200, resp
    assert resp["text"] == "The cat sat ", resp
    assert resp["meta_info"]["finish_reason"] == {"type": "stop", "matched": "and|or"}
    status, resp = srv.post("/generate", gen(SENTENCE, stop_regex=[r"\d", r"d\w+ r"], no_stop_trim=True))
    assert status == 200 and resp["text"] == "The cat sat and the dog r", resp
    assert resp["meta_info"]["finish_reason"]["matched"] == r"d\w+ r"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_the_openai_routes_report_matched_stop(srv, path):
    body = {"max_tokens": 64, "stop_regex": r"[.!?]\s*$"}
    body.update({"prompt": "Hi there. More"} if "chat" not in path else
                {"messages": [{"role": "user", "content": "Hi there. More"}]})
    status, resp = srv.post(path, body)
    assert status == 200, resp
    choice = resp["choices"][0]
    text = choice["text"] if "chat" not in path else choice["message"]["content"]
    assert text == "Hi there", resp
    assert choice["finish_reason"] == "stop" and choice["matched_stop"] == r"[.!?]\s*$", resp


def test_the_matched_text_is_never_streamed(srv):
    """While a match may be under way its text is held back, and then cut."""
    prompt = "one two three four five six"
    events = srv.stream("/generate", dict(gen(prompt, stop_regex=r"f\w+ f"), stream=True))
    texts = [e["text"] for e in events if isinstance(e, dict)]
    assert len(texts) > 3, events  # streamed piece by piece
    assert all("f" not in t for t in texts) and texts[-1] == "one two three ", texts
    events = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 64, "stream": True,
                                            "stop_regex": [r"f\w+ f"]})
    deltas = [e["choices"][0]["text"] for e in events if isinstance(e, dict) and e["choices"]]
    assert "".join(deltas) == "one two three " and not any("f" in d for d in deltas), deltas
    assert [e for e in events if isinstance(e, dict)][-1]["choices"][0]["matched_stop"] == r"f\w+ f"


def test_a_catastrophic_pattern_does_not_stall_other_requests(srv):
    """(a+)+$x over a stream of a's is ~2^n steps for re.search after each
    token; here the request runs its course while others are served."""
    body = dict(gen("a" * 400, stop_regex=[r"(a+)+$x", r"(a|aa)*c"], max_new_tokens=300), stream=True)
    conn = srv.conn()
    conn.request("POST", "/generate", body=__import__("json").dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.readline()  # it is running
    assert first.startswith(b"data:"), first
    done = threading.Event()
    rest = []

    def drain():
        rest.append(resp.read())
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    status, other = srv.post("/generate", gen("meanwhile", max_new_tokens=2))
    assert status == 200 and other["text"] == "meanwhile", other
    assert done.wait(60)
    assert b'"type": "length"' in rest[0] or b'"type":"length"' in rest[0], rest[0][-300:]
    conn.close()


@pytest.mark.parametrize("sp,param,why", [
    ({"stop_regex": "(a"}, "stop_regex", "not a valid regular expression"),
    ({"stop_regex": [r"(\w)\1"]}, "stop_regex", "backreference"),
    ({"stop_regex": ["a"] * 33}, "stop_regex", "--max-stop-regexes"),
    ({"stop_regex": "a" * 257}, "stop_regex", "--max-stop-regex-length"),
    ({"stop_regex": [3]}, "sampling_params.stop_regex", "strings"),
])
def test_bad_patterns_are_a_400_naming_the_field(srv, sp, param, why):
    status, resp = srv.post("/generate", gen("abc", **sp))
    assert status == 400 and resp["error"]["param"] == param and why in resp["error"]["message"], resp
    body = {"prompt": "abc", "max_tokens": 2, **sp}
    status, resp = srv.post("/v1/completions", body)
    assert status == 400 and resp["error"]["param"].endswith("stop_regex"), resp
    assert srv.post("/generate", gen("still serving", max_new_tokens=2))[0] == 200
