"""Idle RSS per process: the built-in tokenizer vs a 128k-vocabulary one, both backends.

    python benchmarks/idle_rss.py        # prints one JSON line per configuration

The 128k tokenizer is ../shared/tokenizers/dolma2-cl100k.json extended with
merges of its own tokens to 128,256 entries (written to $TMPDIR), since no
128k tokenizer.json ships with the shared set.  Numbers are VmRSS from /proc
after a few requests and a 2 s rest; the Engine line is the calling process
(this script), which keeps what earlier configurations loaded.
"""
import json, os, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import mtok

def make_128k(src, dst, target=128256):
    d = json.load(open(src))
    vocab = d["model"]["vocab"]; merges = d["model"]["merges"]
    toks = list(vocab)[:4000]
    nid = max(vocab.values()) + 1 + len(d.get("added_tokens", []))
    i = 0
    while len(vocab) + len(d.get("added_tokens", [])) < target:
        a, b = toks[i % len(toks)], toks[(i // len(toks) + 7 * i) % len(toks)]
        i += 1
        if a + b in vocab:
            continue
        vocab[a + b] = nid; nid += 1
        merges.append(f"{a} {b}" if isinstance(merges[0], str) else [a, b])
    json.dump(d, open(dst, "w"))
    return len(vocab) + len(d.get("added_tokens", []))

def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def main():
    big = os.path.join(tempfile.gettempdir(), "mtok-rss-tok128k.json")
    if not os.path.exists(big):
        print("vocab", make_128k(os.path.join(ROOT, "..", "shared", "tokenizers", "dolma2-cl100k.json"), big))
    rows = []
    for name, path in (("built-in", None), ("128k", big)):
        for backend in ("python", "hf"):
            with mtok.launch(port=0, tokenizer_worker_num=2, tokenizer_path=path, tokenizer_backend=backend,
                             detokenizer="process", log_level="warning") as h:  # every process its own row
                for _ in range(4):
                    body = json.dumps({"text": "hello world " * 20, "sampling_params": {"max_new_tokens": 8}}).encode()
                    req = urllib.request.Request(h.url + "/generate", body, {"Content-Type": "application/json"})
                    urllib.request.urlopen(req).read()
                time.sleep(2)
                p = h.pids
                row = {"tokenizer": name, "backend": backend, "main": rss(p["main"]), "scheduler": rss(p["scheduler"]),
                       "detokenizer": rss(p["detokenizer"]), "worker": rss(p["workers"][0])}
                rows.append(row); print(json.dumps(row), flush=True)
            with mtok.Engine(tokenizer_path=path, tokenizer_backend=backend, log_level="warning") as e:
                e.generate(["hello world " * 20] * 4, {"max_new_tokens": 8}); time.sleep(2)
                row = {"tokenizer": name, "backend": backend, "engine_caller": rss(os.getpid())}
                print(json.dumps(row), flush=True)
if __name__ == "__main__":
    main()
