"""llama.cpp's OpenAI-compatible server (the `xllamacpp` wheel) on 127.0.0.1, run as its own process.

``python tests/real_model/llama_server.py MODEL.gguf PORT`` serves the model until SIGTERM: one slot, one
thread (the tests' machines have two cores), an 8,192-token window and ``/metrics`` (the server's own token
counters, which the tests hold the library's usage to). `.ci/local_model.sh` fetches both pieces.
"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str]) -> int:
    import xllamacpp

    gguf, port = argv[1], int(argv[2])
    params = xllamacpp.CommonParams()
    params.model.path = gguf
    params.model_alias = "smollm2-135m-instruct"
    params.n_ctx = 8192
    params.n_parallel = 1
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.endpoint_metrics = True
    server = xllamacpp.Server(params)
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
