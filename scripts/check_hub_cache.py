#!/usr/bin/env python3
"""Checks that `mnemo hub download` and huggingface_hub share one cache: a local server on 127.0.0.1 answers as the
Hugging Face Hub does (the model API with ?blobs=true, /resolve/ with HEAD, ranges and the X-Repo-Commit / ETag /
X-Linked-Etag headers huggingface_hub reads) for a folder of files; then
  1. mnemo downloads the repository into cache A, and huggingface_hub, offline, finds every file there;
  2. huggingface_hub downloads it into cache B, and mnemo, offline (HF_HUB_OFFLINE=1), finds every file there;
and the bytes are the folder's. Needs huggingface_hub (pip install huggingface_hub).

    /tmp/fla/bin/python scripts/check_hub_cache.py --mnemo build/mnemo --folder tests/data/fla_models/gla_llama2_tokenizer
"""
import argparse
import hashlib
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

REPO = "test-org/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".bin", ".model")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def serve(files):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send_json(self, value, body_wanted):
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body_wanted:
                self.wfile.write(body)

        def answer(self, body_wanted):
            path = self.path.split("?")[0]
            api = f"/api/models/{REPO}/revision/"
            if path.startswith(api):
                siblings = []
                for name, data in files.items():
                    s = {"rfilename": name, "blobId": git_blob_id(data), "size": len(data)}
                    if name.endswith(LFS_SUFFIXES):
                        s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    siblings.append(s)
                return self.send_json({"id": REPO, "sha": COMMIT, "siblings": siblings}, body_wanted)
            tree = f"/api/models/{REPO}/tree/"
            if path.startswith(tree):  # huggingface_hub's listing of a revision
                entries = []
                for name, data in files.items():
                    e = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": name}
                    if name.endswith(LFS_SUFFIXES):
                        e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    entries.append(e)
                return self.send_json(entries, body_wanted)
            prefix = f"/{REPO}/resolve/"
            if not path.startswith(prefix):
                self.send_error(404)
                return
            revision, _, name = path[len(prefix):].partition("/")
            if name not in files:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = files[name]
            etag = hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_blob_id(data)
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start = int(rng[6:].split("-")[0])
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{etag}"')
            if name.endswith(LFS_SUFFIXES):
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if body_wanted:
                self.wfile.write(data[start:])

        def do_GET(self):
            self.answer(True)

        def do_HEAD(self):
            self.answer(False)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mnemo", required=True)
    p.add_argument("--folder", required=True, help="the files the local hub serves")
    a = p.parse_args()
    files = {n: open(os.path.join(a.folder, n), "rb").read() for n in sorted(os.listdir(a.folder))}
    server = serve(files)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    env = dict(os.environ, HF_ENDPOINT=endpoint, no_proxy="127.0.0.1", NO_PROXY="127.0.0.1", HF_HUB_DISABLE_XET="1")
    with tempfile.TemporaryDirectory() as tmp:
        cache_a, cache_b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        # 1. mnemo downloads; huggingface_hub reads the cache offline.
        out = subprocess.run([a.mnemo, "hub", "download", REPO, "--cache-dir", cache_a, "--retry-wait", "0"],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"mnemo hub download failed:\n{out.stdout}{out.stderr}")
        code = ("import sys, huggingface_hub as h; "
                f"d = h.snapshot_download({REPO!r}, cache_dir={cache_a!r}, local_files_only=True); print(d)")
        py = subprocess.run([sys.executable, "-c", code], env=dict(env, HF_HUB_OFFLINE="1"), capture_output=True,
                            text=True)
        if py.returncode != 0:
            sys.exit(f"huggingface_hub could not read mnemo's cache:\n{py.stderr}")
        snapshot = py.stdout.strip().splitlines()[-1]
        same = all(open(os.path.join(snapshot, n), "rb").read() == d for n, d in files.items())
        print(f"1. mnemo -> cache -> huggingface_hub (offline): {len(files)} files, bytes equal: {same}")
        # 2. huggingface_hub downloads; mnemo reads the cache offline.
        code = ("import huggingface_hub as h; "
                f"print(h.snapshot_download({REPO!r}, cache_dir={cache_b!r}))")
        py = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if py.returncode != 0:
            sys.exit(f"huggingface_hub could not download from the local hub:\n{py.stderr}")
        out = subprocess.run([a.mnemo, "hub", "download", REPO, "--cache-dir", cache_b],
                             env=dict(env, HF_HUB_OFFLINE="1"), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"mnemo could not read huggingface_hub's cache offline:\n{out.stdout}{out.stderr}")
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        got = {f["file"] for f in summary["files"]}
        same2 = got == set(files) and all(
            open(os.path.join(summary["snapshot"], n), "rb").read() == d for n, d in files.items())
        print(f"2. huggingface_hub -> cache -> mnemo (offline): {len(got)} files, bytes equal: {same2}")
        # 3. mnemo, online, over huggingface_hub's cache: every blob is reused.
        out = subprocess.run([a.mnemo, "hub", "download", REPO, "--cache-dir", cache_b], env=env,
                             capture_output=True, text=True)
        statuses = {f["status"] for f in json.loads(out.stdout.strip().splitlines()[-1])["files"]}
        print(f"3. mnemo online over huggingface_hub's cache: statuses {sorted(statuses)}")
        ok = same and same2 and statuses == {"cached"}
    server.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
