"""Stand-in for ``sglang.srt.sampling.custom_logit_processor``: the base class
some versions of ``test_openai_server.py`` import; ``TestOpenAIServerCustomLogitProcessor``
is skipped (``skips.py``: a pickled torch logit processor, which mtok refuses)."""

import base64
import pickle


class CustomLogitProcessor:
    def __call__(self, logits, custom_param_list):
        raise NotImplementedError

    def to_str(self) -> str:
        return base64.b64encode(pickle.dumps(type(self).__qualname__)).decode()
