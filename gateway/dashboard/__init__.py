"""The operations dashboard at ``/dashboard``: server-rendered pages over the workspace of an API key.

Every page shows what the admin API shows the logged-in member (another workspace's ids are 404), and
every write goes through the admin API's own handler after a confirmation page, with a CSRF token. Pages
work without JavaScript; values are escaped by Jinja2's autoescaping; charts are inline SVG.
"""

from __future__ import annotations

from starlette.routing import Route

from gateway.dashboard import account, agents, autopilots, deliveries, overview, runs, work
from gateway.dashboard.web import page

# Each page runs through ``page``: retried whole on a deadlock or serialization failure (a page writes in
# one transaction at most), and a refusal becomes the login redirect or an error page.
routes = [
    Route("/", account.root, methods=["GET"]),
    Route("/dashboard", page(overview.overview), methods=["GET"]),
    Route("/dashboard/login", account.login_page, methods=["GET"]),
    Route("/dashboard/login", page(account.login), methods=["POST"]),
    Route("/dashboard/logout", account.logout, methods=["POST"]),
    Route("/dashboard/deliveries", page(deliveries.list_deliveries), methods=["GET"]),
    Route("/dashboard/deliveries/{delivery_id}", page(deliveries.delivery), methods=["GET"]),
    Route("/dashboard/deliveries/{delivery_id}/replay", page(deliveries.replay), methods=["POST"]),
    Route("/dashboard/runs/{run_id}", page(runs.run), methods=["GET"]),
    Route("/dashboard/runs/{run_id}/cancel", page(runs.cancel), methods=["POST"]),
    Route("/dashboard/runs/{run_id}/retry", page(runs.retry), methods=["POST"]),
    Route("/dashboard/issues/{issue_id}", page(work.issue), methods=["GET"]),
    Route("/dashboard/tasks/{task_id}", page(work.task), methods=["GET"]),
    Route("/dashboard/agents", page(agents.list_agents), methods=["GET"]),
    Route("/dashboard/agents/{agent_id}", page(agents.agent), methods=["GET"]),
    Route("/dashboard/agents/{agent_id}/edit", page(agents.edit), methods=["POST"]),
    Route("/dashboard/agents/{agent_id}/rotate-secret", page(agents.rotate_secret), methods=["POST"]),
    Route("/dashboard/autopilots", page(autopilots.list_autopilots), methods=["GET"]),
    Route("/dashboard/autopilots/{autopilot_id}", page(autopilots.autopilot), methods=["GET"]),
    Route("/dashboard/autopilots/{autopilot_id}/{verb}", page(autopilots.set_status), methods=["POST"]),
    Route("/dashboard/triggers/{trigger_id}/rotate-token", page(autopilots.rotate_token), methods=["POST"]),
    Route("/dashboard/triggers/{trigger_id}/edit", page(autopilots.edit_trigger), methods=["POST"]),
]
