"""The engine's services: one per resource, each a small door over the shared storage.

    core.py       EngineCore: the backend's storage, the executor, the served assistants,
                  the creation lock, recovery and retention (what every service shares)
    runs.py       RunsService: create (from a `RunSpec`), read, cancel, wait, follow
    threads.py    ThreadsService: threads, their state, history, updates and copies
    assistants.py AssistantsService: the built-in assistants, created ones and versions
    crons.py      CronsService: crons, and the scheduler that fires their ticks
    campaigns.py  CampaignsService: campaigns, their plan, review and views
    campaign_driver.py  CampaignDriver: moves campaigns on and publishes their posts
    feedback.py   FeedbackService: feedback on runs
    webhooks.py   WebhooksService: a run's webhook deliveries and the outbox's totals

The opener (`engine.opener.open_engine`) builds them; adapters reach them through
`engine.Engine`. See docs/architecture.md.
"""

from engine.services.assistants import AssistantsService
from engine.services.campaigns import CampaignsService
from engine.services.core import EngineCore
from engine.services.crons import CronsService
from engine.services.feedback import FeedbackService
from engine.services.runs import RunsService
from engine.services.threads import ThreadsService
from engine.services.webhooks import WebhooksService

__all__ = [
    "AssistantsService",
    "CampaignsService",
    "CronsService",
    "EngineCore",
    "FeedbackService",
    "RunsService",
    "ThreadsService",
    "WebhooksService",
]
