"""The queues on ``/metrics``: depth and jobs by state per queue, the workers' job totals and job durations.

Prometheus collects synchronously and the queues live in Redis, so the front end's sampler task
(``sampler``) reads them every interval into a :class:`QueueSnapshot` and this module's collector,
registered once in the default registry that ``/metrics`` serves, reports the latest one:

- ``agentsearch_queue_depth{queue}``: jobs in the queue (waiting, deferred or running);
- ``agentsearch_queue_jobs{queue,state}``: the same by state (``queued``, ``deferred``, ``in_progress``;
  jobs waiting to retry count as queued or deferred here);
- ``agentsearch_jobs_total{queue,status}``: jobs the workers ended ``complete`` or ``failed``, and
  tries they ``retried``, since the counters began;
- ``agentsearch_job_seconds{queue,function,status}``: a histogram of how long finished jobs ran,
  kept by the workers (``history.DURATION_BUCKETS_S``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.admin.history import DURATION_BUCKETS_S
from service.admin.queues import Overview, QueueReader

STATES = ("queued", "deferred", "in_progress")
DONE = ("complete", "failed", "retried")
BUCKETS = [repr(b) for b in DURATION_BUCKETS_S] + ["+Inf"]


@dataclass(frozen=True)
class QueueSnapshot:
    """What ``/metrics`` reports: the queues' counts and the duration histograms (per short queue, function, status)."""

    overview: Overview
    durations: dict[tuple[str, str, str], dict[str, int]] = field(default_factory=dict)


class QueueCollector(Collector):
    """Reports the latest snapshot; nothing before the first one."""

    def __init__(self) -> None:
        self.snapshot: QueueSnapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot is None:
            return
        depth = GaugeMetricFamily("agentsearch_queue_depth", "Jobs in the queue: waiting, deferred or running", labels=["queue"])
        jobs = GaugeMetricFamily("agentsearch_queue_jobs", "Jobs in the queue by state", labels=["queue", "state"])
        done = CounterMetricFamily("agentsearch_jobs", "Jobs the workers ended (complete, failed) and tries they retried", labels=["queue", "status"])
        for queue, counts in snapshot.overview.queues.items():
            depth.add_metric([queue], sum(getattr(counts, state) for state in STATES))
            for state in STATES:
                jobs.add_metric([queue, state], getattr(counts, state))
            for status in DONE:
                done.add_metric([queue, status], getattr(counts, status))
        seconds = HistogramMetricFamily("agentsearch_job_seconds", "How long finished jobs ran", labels=["queue", "function", "status"])
        for labels, fields in sorted(snapshot.durations.items()):
            cumulative, buckets = 0, []
            for le in BUCKETS:
                cumulative += fields.get(le, 0)
                buckets.append((le, float(cumulative)))
            seconds.add_metric(list(labels), buckets, sum_value=fields.get("sum_ms", 0) / 1000)
        yield from (depth, jobs, done, seconds)


COLLECTOR = QueueCollector()
REGISTRY.register(COLLECTOR)


async def refresh_metrics(reader: QueueReader) -> QueueSnapshot:
    """Read the queues and the duration histograms for ``/metrics``."""
    overview = await reader.overview()
    raw: dict[bytes, bytes] = await reader.redis.hgetall(reader.keys.durations)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    durations: dict[tuple[str, str, str], dict[str, int]] = {}
    for raw_field, value in raw.items():
        parts = raw_field.decode().rsplit("|", 3)
        if len(parts) != 4 or parts[0] not in reader.short:
            continue
        queue, function, status, bucket = parts
        durations.setdefault((reader.short[queue], function, status), {})[bucket] = int(value)
    snapshot = QueueSnapshot(overview=overview, durations=durations)
    COLLECTOR.snapshot = snapshot
    return snapshot
