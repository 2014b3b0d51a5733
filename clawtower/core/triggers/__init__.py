"""The trigger runtime: webhook, cron and channel triggers of expert packages, their dedupe,
persisted concurrency queues, execution policy (timeout, retry, on_failure) and delivery."""
