"""Prometheus metrics of one `purecover serve` app, in the app's own registry (never the global one).

    purecover_requests_total{endpoint, status}        requests answered, by route and HTTP status
    purecover_request_seconds{endpoint}               latency histogram (seconds, request in -> response out)
    purecover_batch_size                              histogram of documents lists per model call
    purecover_batch_seconds                           histogram of the model call time per batch (seconds)
    purecover_queue_depth                             requests waiting to be gathered (gauge)
    purecover_requests_in_flight                      requests accepted and not yet answered (gauge)
    purecover_documents_scored_total                  documents scored by the model
    purecover_queue_rejections_total{reason}          requests refused: queue_full (429) or shutting_down (503)
"""

from __future__ import annotations

from typing import Any

__all__ = ["BATCH_BUCKETS", "ServeMetrics"]

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServeMetrics:
    """The app's collectors in a fresh `CollectorRegistry` (so several apps in one process do not clash)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("purecover_requests", "Requests answered, by endpoint and HTTP status.",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("purecover_request_seconds", "Request latency in seconds, by endpoint.",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("purecover_batch_size", "Requests per model call (one forward pass).",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("purecover_batch_seconds", "Model call time per batch in seconds.",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("purecover_queue_depth", "Requests waiting to be gathered into a batch.",
                                 registry=r)
        self.in_flight = Gauge("purecover_requests_in_flight", "Scoring requests accepted and not yet answered.",
                               registry=r)
        self.documents = Counter("purecover_documents_scored", "Documents scored by the model.", registry=r)
        self.rejections = Counter("purecover_queue_rejections", "Requests refused before scoring, by reason "
                                  "(queue_full: 429, shutting_down: 503).", ["reason"], registry=r)
        self.scoring_errors = Counter("purecover_scoring_errors", "Scoring requests the model failed, by reason "
                                      "(non_finite_scores: the selector scored a candidate NaN or infinite; "
                                      "error: any other failure), each answered 500.", ["reason"], registry=r)

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of the exposition for an ``Accept`` header (text format, or OpenMetrics)."""
        from prometheus_client.exposition import choose_encoder

        encoder: Any
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
