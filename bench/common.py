"""What the benchmarks share: the bundled server's settings for a pure throughput measurement."""

from __future__ import annotations


def zero_latency_server_args(max_num_seqs: int, max_model_len: int, keep_alive_interval: float = 0.0) -> list[str]:
    """A server that adds no delay of its own: prefill and decode take no time, so what is measured
    is the cost of streaming itself."""
    return [
        "--host",
        "127.0.0.1",
        "--inter-token-latency",
        "0",
        "--time-to-first-token",
        "0",
        "--max-num-seqs",
        str(max_num_seqs),
        "--max-model-len",
        str(max_model_len),
        "--sse-keep-alive-interval",
        str(keep_alive_interval),
    ]
