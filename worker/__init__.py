"""Delivery worker (admits and dispatches runs), push worker (delivers tasks to HTTP agents)."""
