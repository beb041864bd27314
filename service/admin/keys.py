"""The Redis keys the admin dashboard reads and writes: arq's own layout and the dashboard's, named once.

arq 0.28 (``arq/constants.py``, ``arq/jobs.py``, ``arq/worker.py``), per job id and queue:

    <queue>                    sorted set: job ids waiting or running, score = due time (ms)
    arq:job:<id>               the job (JSON: t try, f function, a args, k kwargs, et enqueue ms);
                               deleted when the job finishes
    arq:in-progress:<id>       exists while a worker runs the job (cron jobs keep it 60 s after)
    arq:retry:<id>             the try count of the running or retrying job
    arq:result:<id>            the result (JSON: t, f, a, k, et, s success, r result, st, ft, q queue, id),
                               kept ``keep_result`` seconds
    arq:abort                  sorted set of job ids asked to abort, score = when (ms)
    <queue>:health-check       the worker's health line, expires health_check_interval + 1 s after it is set

The dashboard's own keys, under the deployment's prefix (``Settings.queue_prefix``):

    <p>:admin:done:complete    sorted set: ids of jobs that finished well, score = finish time (ms)
    <p>:admin:done:failed      the same for failed (and aborted) jobs; both trimmed to the result
                               retention and written by the worker (``history.JobRecorder``)
    <p>:admin:stats            hash: ``complete|<queue>|<function>``, ``failed|...``, ``retried|...`` counters
    <p>:admin:last-warm        hash: ``<surface>`` and ``<surface>|<tenant>`` -> ms of the last job that embedded
    <p>:admin:samples          sorted set: one JSON sample (depth, done counters) per interval, score = ms;
                               trimmed to one hour
    <p>:admin:sampler-lock     a short lock so that one front end samples per interval
    <p>:admin:workers-seen     hash: queue -> the last health line seen and when (shows a down worker's last line)
    <p>:admin:retried-as:<id>  the id of the job that retried failed job <id> (expires with its result)
    <p>:admin:retry-of:<id>    the failed job that job <id> retries
    <p>:admin:traceback:<id>   the stack trace of failed job <id>, written by the worker as it fails
                               (arq keeps only ``Type: message``); expires with its result
    <p>:admin:processes        hash: ``<host>|<pid>|<queue>`` -> the worker's last heartbeat (JSON:
                               host, pid, queue, started, seen, RSS, running job ids, slots)
    <p>:admin:durations        hash: ``<queue>|<function>|<status>|<le>`` job counts per duration
                               bucket, plus ``...|sum_ms`` and ``...|count``, for ``/metrics``
"""

from __future__ import annotations

from dataclasses import dataclass

from arq.constants import (
    abort_jobs_ss,
    health_check_key_suffix,
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)

from service.engine.teams import last_warm_key

ABORT_SET = abort_jobs_ss


def job_key(job_id: str) -> str:
    return job_key_prefix + job_id


def in_progress_key(job_id: str) -> str:
    return in_progress_key_prefix + job_id


def result_key(job_id: str) -> str:
    return result_key_prefix + job_id


def retry_key(job_id: str) -> str:
    return retry_key_prefix + job_id


def health_check_key(queue: str) -> str:
    return queue + health_check_key_suffix


IN_PROGRESS_PATTERN = in_progress_key_prefix + "*"
IN_PROGRESS_PREFIX = in_progress_key_prefix


@dataclass(frozen=True)
class AdminKeys:
    """The dashboard's keys of one deployment."""

    prefix: str

    def done(self, status: str) -> str:
        """Finished job ids of one status (``complete`` or ``failed``)."""
        return f"{self.prefix}:admin:done:{status}"

    @property
    def stats(self) -> str:
        return f"{self.prefix}:admin:stats"

    @property
    def last_warm(self) -> str:
        return last_warm_key(self.prefix)  # the engine moves its tenants' fields when it re-keys team keys

    @property
    def samples(self) -> str:
        return f"{self.prefix}:admin:samples"

    @property
    def sampler_lock(self) -> str:
        return f"{self.prefix}:admin:sampler-lock"

    @property
    def workers_seen(self) -> str:
        return f"{self.prefix}:admin:workers-seen"

    def retried_as(self, job_id: str) -> str:
        return f"{self.prefix}:admin:retried-as:{job_id}"

    def retry_of(self, job_id: str) -> str:
        return f"{self.prefix}:admin:retry-of:{job_id}"

    def traceback(self, job_id: str) -> str:
        return f"{self.prefix}:admin:traceback:{job_id}"

    @property
    def processes(self) -> str:
        return f"{self.prefix}:admin:processes"

    @property
    def durations(self) -> str:
        return f"{self.prefix}:admin:durations"


def stats_field(status: str, queue: str, function: str) -> str:
    return f"{status}|{queue}|{function}"


def parse_stats_field(field: str) -> tuple[str, str, str] | None:
    """(status, queue, function) of a stats field; None for a field of another shape."""
    parts = field.split("|", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None
