# One image for the four services of the mesh; the container's command picks the service
# (texera-lake-gateway, texera-lake-warehouse-service, texera-lake-cu-service,
# texera-lake-result-service; a pooled unit's Pod also runs texera-lake-cu-hand-over, by exec).
# The embedded stack and the test tools are not installed.
FROM python:3.11.11-slim-bookworm

# PySpark needs a Java runtime (computing units).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY texera ./texera
COPY service_runtime ./service_runtime
COPY catalog_map ./catalog_map
COPY lake_tables ./lake_tables
COPY lake_client ./lake_client
COPY unit_launcher ./unit_launcher
COPY warehouse_service ./warehouse_service
COPY cu_service ./cu_service
COPY result_service ./result_service
COPY gateway ./gateway
COPY embedded_stack ./embedded_stack
COPY lake_cli ./lake_cli
COPY deploy/compose ./deploy/compose
# The kubernetes extra: the registry launches computing units as Pods when so configured.
RUN pip install --no-cache-dir -c constraints.txt '.[kubernetes]'

RUN useradd --system --uid 10001 lake
USER lake
ENV PYTHONUNBUFFERED=1 \
    TEXERA_LAKE_HOST=0.0.0.0
