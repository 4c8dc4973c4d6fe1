"""``POST /hooks/{token}`` (ARCHITECTURE §4): :mod:`.endpoint` runs the twelve steps in order.

:mod:`.triggers` looks the token up (cached), :mod:`.decision` verifies the request and decides what it
becomes, :mod:`.persist` writes it through :mod:`.batch`'s group commit, :mod:`.notifier` wakes the worker.
"""
