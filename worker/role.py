"""The services ``hookgate worker`` runs (and ``serve`` includes)."""

from __future__ import annotations

import os
import socket

from hookgate.context import Context
from hookgate.notify import NotifyListener
from hookgate.service import Service
from worker.alerts import AlertSender
from worker.deliveries import DeliveryWorker
from worker.push import Pusher, PushWorker
from worker.runs import RunWorker
from worker.watchdog import WatchdogLoop


def services(ctx: Context) -> list[Service]:
    """The worker role: delivery dispatch, pending-run dispatch, pushes, alerts, and the lease watchdog loop."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    wake = NotifyListener(ctx.direct_dsn)
    pusher = Pusher(ctx, holder=holder, wake=wake)
    return [
        wake,
        pusher,
        DeliveryWorker(ctx, holder=holder, pusher=pusher, wake=wake),
        RunWorker(ctx, holder=holder, pusher=pusher, wake=wake),
        PushWorker(ctx, holder=holder, pusher=pusher, wake=wake),
        AlertSender(ctx, wake=wake),
        WatchdogLoop(ctx),
    ]
