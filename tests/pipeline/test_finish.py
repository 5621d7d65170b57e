"""The finish-reason types: each surface's shape, the dict form engines may
still return, and the trip across a process boundary through the allow-list."""

from __future__ import annotations

import pytest

from mtok.wire.finish import FinishAbort, FinishLength, FinishStop, as_finish
from mtok.wire.ipc import dumps, loads

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def test_each_reason_in_each_surface():
    assert FinishStop(7).to_json() == {"type": "stop", "matched": 7} and FinishStop(7).openai() == ("stop", 7)
    assert FinishStop("\n\n").openai() == ("stop", "\n\n") and FinishStop().to_json() == {"type": "stop", "matched": None}
    assert FinishLength(12).to_json() == {"type": "length", "length": 12} and FinishLength(12).openai() == ("length", None)
    abort = FinishAbort("too big", 400, "max_new_tokens")
    assert abort.to_json() == {"type": "abort", "message": "too big"}  # status and param stay internal
    assert abort.openai() == ("abort", None) and abort.http_status() == 400
    assert FinishAbort("client left", 499).http_status() is None  # nobody is there to tell
    assert FinishStop(1).http_status() is None and FinishLength(1).http_status() is None


def test_only_a_matched_token_id_is_trimmed():
    assert FinishStop(2).trims_token(2) and not FinishStop(2).trims_token(3)
    assert not FinishStop("2").trims_token(2) and not FinishStop().trims_token(0)


@pytest.mark.parametrize("reason", [FinishStop(3), FinishStop("x"), FinishLength(5), FinishAbort("m", 503, "p")])
def test_the_dict_form_and_the_wire_give_back_the_same_reason(reason):
    as_dict = dict(reason.to_json(), **({"status_code": reason.status_code, "param": reason.param}
                                       if isinstance(reason, FinishAbort) else {}))
    assert as_finish(as_dict) == reason and as_finish(reason) is reason and as_finish(None) is None
    assert loads(dumps(reason)) == reason and hash(loads(dumps(reason))) == hash(reason)


@pytest.mark.parametrize("bad", [{"type": "eos"}, "stop", 3])
def test_an_unknown_reason_is_an_error(bad):
    with pytest.raises(ValueError):
        as_finish(bad)
