"""The engine's services: one per resource, each a small door over the shared storage.

    core.py       EngineCore: the backend's storage, the executor, the served assistants,
                  the creation lock, recovery and retention (what every service shares)
    runs.py       RunsService: create (from a `RunSpec`), read, cancel, wait, follow
    threads.py    ThreadsService: threads, their state, history, updates, copies, TTLs, prunes
    retention.py  RetentionService: the sweep of expired threads, ended deliveries, old logs
    assistants.py AssistantsService: the built-in assistants, created ones and versions
    crons.py      CronsService: crons, and the scheduler that fires their ticks
    campaigns.py  CampaignsService: campaigns, their plan, review and views
    campaign_driver.py  CampaignDriver: moves campaigns on and publishes their posts
    feedback.py   FeedbackService: feedback on runs
    webhooks.py   WebhooksService: a run's webhook deliveries and the outbox's totals
    keys.py       KeysService: managed API keys, who may act; AuditService: the audit trail
    usage.py      UsageService: an owner's usage this month and its quotas
    datasets.py   DatasetsService: datasets and their examples
    experiments.py ExperimentsService: experiments, and the scheduler that advances them
                  (one pass over one experiment: experiment_pass.py)
    evaluation.py OnlineEvaluationService: sampling rates, judging live runs, the report

The opener (`engine.opener.open_engine`) builds them; adapters reach them through
`engine.Engine`. See docs/architecture.md.
"""

from engine.services.assistants import AssistantsService
from engine.services.campaigns import CampaignsService
from engine.services.core import EngineCore
from engine.services.crons import CronsService
from engine.services.datasets import DatasetsService
from engine.services.evaluation import OnlineEvaluationService
from engine.services.experiments import ExperimentsService
from engine.services.feedback import FeedbackService
from engine.services.keys import AuditService, KeysService
from engine.services.retention import RetentionService
from engine.services.runs import RunsService
from engine.services.threads import ThreadsService
from engine.services.usage import UsageReport, UsageService
from engine.services.webhooks import WebhooksService

__all__ = [
    "AssistantsService",
    "AuditService",
    "CampaignsService",
    "CronsService",
    "DatasetsService",
    "EngineCore",
    "ExperimentsService",
    "FeedbackService",
    "KeysService",
    "OnlineEvaluationService",
    "RetentionService",
    "RunsService",
    "ThreadsService",
    "UsageReport",
    "UsageService",
    "WebhooksService",
]
