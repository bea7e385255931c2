# syntax=docker/dockerfile:1
#
# The service's production image (docs/operating.md, "Run in production"): the compiled JavaScript of `make build`
# on Node 24, production dependencies only, run as the unprivileged `node` user. One image for every
# process kind: `ROLE=api`, `ROLE=worker` (or `all`) and the migrations (`node dist/cli/migrate.js`).
# Every setting comes from the environment at run time (docs/configuration.md); no secret is baked in.
#
#   docker build -t model-deployment-service:$(git rev-parse --short HEAD) .
#   docker run --rm --env-file production.env model-deployment-service:<tag> node dist/cli/migrate.js
#   docker run -d --env-file production.env -e ROLE=api -p 8080:8080 model-deployment-service:<tag>
#   docker run -d --env-file production.env -e ROLE=worker model-deployment-service:<tag>
#
# The base is pinned to an exact Node release of the Debian 12 slim image. Pin its digest as well
# where the registry is reachable: --build-arg NODE_IMAGE=node:24.21.0-bookworm-slim@sha256:<digest>
# (`docker buildx imagetools inspect node:24.21.0-bookworm-slim` prints it).
# `make image-check` lints this file (scripts/check-dockerfile.ts).
ARG NODE_IMAGE=node:24.21.0-bookworm-slim

# 1. Production dependencies, exactly as the lockfile has them. npm's cache is a BuildKit cache
#    mount: shared by builds, never in a layer.
FROM ${NODE_IMAGE} AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm \
    npm ci --omit=dev --no-audit --no-fund

# 2. The compiled service, as `make build` compiles it (tsc needs the dev dependencies' types; no
#    install script runs: nothing of this stage but dist/ reaches the image). src/ alone: the local
#    stand-ins `make run` starts (dev/) are not in the build context.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm \
    npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY generated/ ./generated/
COPY src/ ./src/
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json
WORKDIR /app/src
RUN find . -name '*.json' -exec cp --parents {} ../dist/ \;

# 3. What runs. The code belongs to root and is read-only to the process; it writes nothing to disk.
#    The migrations stay TypeScript, run by Node 24's type stripping (dist/db/database.js reads
#    ../migrations, as src/db/database.ts does in development); the document is read from generated/.
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    NODE_OPTIONS=--disable-warning=ExperimentalWarning
WORKDIR /app
COPY --chown=root:root --from=dependencies /app/node_modules/ ./node_modules/
COPY --chown=root:root package.json ./
COPY --chown=root:root --from=build /app/dist/ ./dist/
COPY --chown=root:root generated/openapi.json ./generated/openapi.json
COPY --chown=root:root migrations/ ./migrations/
COPY --chown=root:root scripts/healthcheck.ts ./scripts/healthcheck.ts
# The base image's `node` user, by number so that Kubernetes can check runAsNonRoot.
USER 1000:1000
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "scripts/healthcheck.ts"]
STOPSIGNAL SIGTERM
CMD ["node", "--max-semi-space-size=16", "--heap-growing-percent=50", "dist/main.js"]
