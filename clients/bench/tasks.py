"""The Celery side of the benchmark: one task that returns its input.

Broker and result backend are the same Redis, at $REDIS_URL. Everything else
is Celery's default (JSON serialization, prefetch multiplier 4, acks on
receipt), as a user following Celery's first-steps guide would have it.
"""

import os

from celery import Celery

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

app = Celery("tasks", broker=REDIS_URL, backend=REDIS_URL)
# Only quiets Celery 5's start-up warning; same behaviour as the default.
app.conf.broker_connection_retry_on_startup = True


@app.task
def echo(s):
    return s
