"""The admin queue dashboard (``/admin``) and its JSON API (``/admin/api``): queues, jobs, workers, index state.

Modules: ``keys`` (the Redis key layout, arq's and ours), ``jobrecord`` (a job as the table shows it),
``targets`` (what a job works on), ``history`` (what the worker records as jobs end), ``queues``
(reading arq's state cheaply: counts, one job), ``tally`` (every count of a page, read once, and
the job ids of each tab), ``processes`` (the worker processes' heartbeats), ``jobtable`` (pages of
the job table), ``health`` (the workers' health lines), ``operations`` (retry, abort, warm, sweep,
bulk retry and delete), ``indexstate`` (records per surface and tenant), ``metrics`` (the queues
on ``/metrics``), ``sampler`` (the last hour's samples and the app state), ``chart`` (inline SVG),
``auth`` (admin token cookie and CSRF), ``handlers`` (what pages and API share, the access log),
``pages`` (the HTML pages: dashboard, tabs, job), ``api`` (the JSON API) and ``routes`` (both, in order). Nothing is
imported here: the worker imports ``history`` without loading the web side.
"""
