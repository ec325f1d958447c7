"""Serves families named like SGLang's through the real prometheus_client.

Usage: prometheus_client_server.py single|multiprocess
Prints the port it listens on (127.0.0.1, chosen by the system), then serves
/metrics until killed. In multiprocess mode PROMETHEUS_MULTIPROC_DIR must be
set to an empty directory, as SGLang sets it.
"""
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    mode = sys.argv[1]
    import prometheus_client as pc

    labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
    values = ["meta-llama/Llama-3.1-8B-Instruct", "unified", "0", "0"]
    gauge_opts = {}
    if mode == "multiprocess":
        # SGLang's gauges are "mostrecent", which this release may lack; a
        # single writing process makes livesum the same.
        gauge_opts["multiprocess_mode"] = "livesum"
    running = pc.Gauge("sglang:num_running_reqs", "The number of running requests.", labels, **gauge_opts)
    prompt = pc.Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", labels)
    ttft = pc.Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        labels, buckets=[0.1, 0.5, 1.0, 5.0])
    # A family the watchdog does not read.
    unread = pc.Gauge("sglang:spec_accept_rate", "Unread by the test's keep set.", labels, **gauge_opts)

    running.labels(*values).set(7)
    prompt.labels(*values).inc(12345)
    for v in (0.05, 0.3, 0.7, 2.0):
        ttft.labels(*values).observe(v)
    unread.labels(*values).set(0.5)

    if mode == "multiprocess":
        from prometheus_client import multiprocess
        registry = pc.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    elif mode == "single":
        registry = pc.REGISTRY
    else:
        sys.exit("mode must be single or multiprocess")

    server = make_server("127.0.0.1", 0, pc.make_wsgi_app(registry), handler_class=QuietHandler)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
