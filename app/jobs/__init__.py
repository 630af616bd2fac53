"""Training jobs from submission to their end.

- `lifecycle`: the table of allowed status changes and `transition()`, the one writer of a job's
  status (compare-and-set on job and attempt), with the job's history; the named operations the API,
  workers and reapers call.
- `queue`: how jobs reach workers (`JobQueue`: the local pool's rows, or `procrastinate_queue`).
- `runner`: `run_job`, what every worker runs; `attempt`: a running attempt's heartbeat, progress
  recorder and writes that outlast a database outage.
- `recovery`: the reaper (jobs whose worker is gone or silent, queued jobs without a queue entry).
- `local_pool`, `procrastinate_queue`: the two worker engines; `workers`: worker ids and the
  `workers` table `/readyz` counts.
"""
