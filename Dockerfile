# The operator image. Build it from the repository root and point the manifests at it:
#
#   docker build -t registry.example.com/rollouts:0.1.0 .
#   docker push registry.example.com/rollouts:0.1.0
#   rollouts manifests --image registry.example.com/rollouts:0.1.0 | kubectl apply --server-side -f -
#
# Two stages: the first builds a wheel of the three packages (rollouts, hooks, lifecycle, with
# their package data: CRD templates, kwok stages), the second installs it and its dependencies
# into a slim image that runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rollouts ./rollouts
COPY hooks ./hooks
COPY lifecycle ./lifecycle
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The uid/gid match the Deployment's securityContext (runAsUser/runAsGroup 10001).
RUN groupadd --system --gid 10001 rollouts \
    && useradd --system --uid 10001 --gid rollouts --no-create-home --shell /usr/sbin/nologin rollouts
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels
USER 10001:10001
# 9443: admission webhooks (behind the Service's port 443); 8080: /healthz, /readyz, /metrics.
EXPOSE 9443 8080
# In-cluster mode: credentials from the pod's ServiceAccount, the webhook certificate from the
# Secret mounted at /etc/rollouts/tls. The Deployment adds its flags (--skip-crds ...) as args.
ENTRYPOINT ["rollouts", "run", "--in-cluster"]
