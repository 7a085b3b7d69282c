# Atelier service image.
#   Build: docker build -t atelier .
#   Run:   docker run -p 8000:8000 -v atelier-data:/data --env-file .env atelier
# Set AUTH_API_KEYS in .env before publishing the port anywhere but localhost: without
# it the service runs open (it says so in its log and in /info). Without LLM_BASE_URL
# the embedded llama.cpp model is used; build with --build-arg EXTRAS= for a slimmer
# image that always talks to an external OpenAI-compatible endpoint. llama.cpp is
# compiled for a portable x86-64 target (no AMX, see docs/quickstart.md "Build note"); build with
# --build-arg ATELIER_NATIVE_BUILD=1 for an image that only runs on CPUs like the builder's.
# The same image serves the scale-out deployment (docs/scale-out.md, docker-compose.yml):
# build with --build-arg EXTRAS="[local,scale]" and run `atelier serve --workers 0` for an
# API replica or `atelier worker` for a worker (which has no HTTP port: disable the
# healthcheck for it, as docker-compose.yml does).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: compile llama-cpp-python and install Atelier into a virtualenv ----------
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS="[local]"
ARG ATELIER_NATIVE_BUILD=0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/atelier
ENV PATH=/opt/atelier/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md dev ./
COPY app ./app
COPY cli ./cli
COPY engine ./engine
COPY agentkit ./agentkit
COPY core ./core
COPY graphs ./graphs
COPY nodes ./nodes
COPY prompts ./prompts
COPY knowledge ./knowledge
COPY providers ./providers
# ./dev cmake-args: the same llama.cpp build flags ./dev up uses (portable on x86-64).
RUN CMAKE_ARGS="$(ATELIER_NATIVE_BUILD=${ATELIER_NATIVE_BUILD} ./dev cmake-args)" \
    pip install ".${EXTRAS}"

# --- runtime: no compiler, a CJK font, a non-root user -------------------------------
FROM ${PYTHON_IMAGE}
# libgomp1: llama.cpp's OpenMP runtime (the compiler stays in the build stage).
# fonts-wqy-microhei: the CJK font the local image cards are drawn with.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 libstdc++6 fonts-wqy-microhei \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/atelier /opt/atelier
ENV PATH=/opt/atelier/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DATA_DIR=/data \
    FONT_PATH=/usr/share/fonts/truetype/wqy/wqy-microhei.ttc

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin atelier \
 && mkdir -p /data && chown atelier:atelier /data
USER atelier
WORKDIR /home/atelier
VOLUME ["/data"]
EXPOSE 8000

# /health is public (no API key) and touches no dependency; /ready checks the database.
# The start period covers the embedded model's first load.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"]

CMD ["atelier", "serve", "--host", "0.0.0.0", "--port", "8000"]
