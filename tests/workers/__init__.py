"""Tests of ``workers/``: the arq workers of each queue, their job ids, node queues and a worker killed mid-job."""
