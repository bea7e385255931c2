# Every target runs on the project's pinned Node 24 (the `node` devDependency), whatever Node
# the machine has: node_modules/.bin comes first on PATH once installed.
SHELL := /bin/bash
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export NODE_OPTIONS := --disable-warning=ExperimentalWarning

GENERATED ?= generated
CONFIG_PAGE ?= docs/configuration.md
INSTALLED := node_modules/.install-stamp

.PHONY: install generate check-generated api-gate lint typecheck build image-check image-rehearsal k8s-check migrate run test test-fast fuzz test-engine test-billing bench bench-db bench-scaling clean

## install: install dependencies when the content of package.json or the lockfile changed (a checkout
## that only touches them does not wipe node_modules under a running service: the stamp holds their hash).
## The install itself runs on the machine's Node (any from 20): packages that need Node 22 or 24 make npm
## warn EBADENGINE (about 285 lines on Node 20) until the pinned Node 24 it installs takes over. Those
## lines are left out (said in one line instead); npm's other warnings and its errors still show on
## stderr, and an error fails the step.
install: $(INSTALLED)
$(INSTALLED): package.json package-lock.json
	@sum=$$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1); \
	if [ -d node_modules ] && [ "$$(cat $@ 2>/dev/null)" = "$$sum" ]; then touch $@; \
	else \
	  case "$$(node --version 2>/dev/null)" in v2[4-9].*|v[3-9][0-9].*) ;; \
	  *) echo "Installing with Node $$(node --version 2>/dev/null || echo '(none)'): npm's EBADENGINE warnings are expected until the project's Node 24 is installed with the dependencies, and are not shown.";; esac; \
	  set -o pipefail; \
	  { npm ci --no-audit --no-fund --engine-strict=false 2>&1 1>&3 3>&- | { grep --line-buffered -v '^npm warn EBADENGINE' || true; } 1>&2 3>&-; } 3>&1 \
	  && echo "$$sum" > $@; fi

## generate: compile spec/ to $(GENERATED)/openapi.json, $(GENERATED)/api.d.ts and $(GENERATED)/security.d.ts,
## and write the table of settings, $(CONFIG_PAGE), from src/config.ts (scripts/config-table.ts)
generate: $(INSTALLED)
	tsp compile spec --config spec/tspconfig.yaml --option "@typespec/openapi3.emitter-output-dir=$(abspath $(GENERATED))"
	node src/cli/normalize-openapi.ts $(GENERATED)/openapi.json
	openapi-typescript $(GENERATED)/openapi.json --default-non-nullable false -o $(GENERATED)/api.d.ts >/dev/null 2>&1
	node src/cli/security-types.ts $(GENERATED)/openapi.json $(GENERATED)/security.d.ts
	node scripts/config-table.ts $(CONFIG_PAGE)

## check-generated: fail if regenerating would change a byte of generated/ or of docs/configuration.md
check-generated: $(INSTALLED)
	@tmp=$$(mktemp -d) && page=$$(mktemp) && trap 'rm -rf "$$tmp" "$$page"' EXIT && \
	$(MAKE) -s generate GENERATED=$$tmp CONFIG_PAGE=$$page && \
	diff -r -u generated "$$tmp" && echo "generated/ is in sync with spec/" && \
	{ diff -u docs/configuration.md "$$page" || { echo "docs/configuration.md is out of date with src/config.ts: run make generate"; exit 1; }; } && \
	echo "docs/configuration.md is in sync with src/config.ts"

## api-gate: fail when generated/openapi.json breaks a client of the released document (spec/released/)
## unless spec/CHANGELOG.md records it under a new major info.version (also run by `make test`)
api-gate: $(INSTALLED)
	node src/cli/api-gate.ts spec/released/openapi-v1.json generated/openapi.json spec/CHANGELOG.md

## lint: Spectral (with the OWASP ruleset) and Redocly (recommended, redocly-lint.yaml) on the document,
## ESLint on the TypeScript, and the relative links of README.md and docs/ (scripts/check-doc-links.ts:
## each to an existing file and heading). Redocly's warnings are errors (recommended-strict) except where
## .redocly.lint-ignore.yaml keeps one, with its reason.
lint: $(INSTALLED)
	spectral lint generated/openapi.json --fail-severity=error -D
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true redocly lint generated/openapi.json --config redocly-lint.yaml --format=summary
	eslint .
	node scripts/check-doc-links.ts

## typecheck: TypeScript, strict, no emit
typecheck: $(INSTALLED)
	tsc -p tsconfig.json

## build: compile src/ to dist/ (what production runs: node dist/main.js; migrations stay .ts, run by Node's type stripping).
## The local stand-ins of `make run` (dev/) are not compiled: nothing of src/ imports them.
build: $(INSTALLED)
	rm -rf dist
	tsc -p tsconfig.build.json
	cd src && find . -name '*.json' -type f -exec cp --parents {} ../dist/ \;

## image-check: lint the Dockerfile and .dockerignore (dockerfile-utils, then hadolint-style rules: scripts/check-dockerfile.ts);
## no image is built here: no container engine runs on this machine and the base image's registry is not reachable
image-check: $(INSTALLED)
	node scripts/check-dockerfile.ts Dockerfile .dockerignore

## image-rehearsal: replay the Dockerfile's stages in folders on this machine, then run the image's migrations, ROLE=api
## (with its HEALTHCHECK) and ROLE=worker from the result, as its USER, against a fresh database on DATABASE_URL's server
image-rehearsal: $(INSTALLED)
	node scripts/image-rehearsal.ts Dockerfile

## k8s-check: render deploy/kubernetes/ (base and overlays) and check it against the Kubernetes schemas, with no unknown
## field, and the service's rules (scripts/check-kubernetes.ts); compared with `kubectl kustomize` where kubectl is on PATH
k8s-check: $(INSTALLED)
	node scripts/check-kubernetes.ts deploy/kubernetes

## migrate: apply pending migrations (DATABASE_URL, or the embedded Postgres)
migrate: $(INSTALLED)
	NODE_ENV=$${NODE_ENV:-development} node src/cli/migrate.ts

## run: install, generate, migrate and start the service with its workers, as development unless
## NODE_ENV says otherwise (the service alone defaults to production and then needs APP_SECRET),
## with the local stand-ins (dev/main.ts) of whatever is not configured
run: generate
	NODE_ENV=$${NODE_ENV:-development} node dev/main.ts

## test: install and run the whole suite (DATABASE_URL, or an embedded Postgres)
test: $(INSTALLED)
	vitest run $(VITEST_ARGS)

## test-fast: the unit, service and contract tiers, without the breaking-change gate and the generator
## matrix (Optic, orval and hey-api runs): about 40 s, to run often; `make test` runs everything
test-fast: $(INSTALLED)
	vitest run test/unit test/service test/contract --exclude test/contract/api-gate.test.ts --exclude test/contract/generator-matrix.test.ts $(VITEST_ARGS)

## fuzz: every operation fuzzed longer than in `make test` (FUZZ_RUNS cases each, default 300; FUZZ_SEED, default random)
fuzz: $(INSTALLED)
	FUZZ_RUNS=$${FUZZ_RUNS:-300} FUZZ_SEED=$${FUZZ_SEED:-$$RANDOM$$RANDOM} vitest run test/fuzz --testTimeout=0 $(VITEST_ARGS)

## test-engine: the engine conformance suite against a real Xinference cluster (see docs/engine.md)
test-engine: $(INSTALLED)
	@test -n "$$XINFERENCE_URL" || { echo "set XINFERENCE_URL, XINFERENCE_ADMIN_USER, XINFERENCE_ADMIN_PASSWORD and XINFERENCE_API_KEY (see docs/engine.md)"; exit 2; }
	vitest run --config vitest.engine.config.ts $(VITEST_ARGS)

## test-billing: the Stripe suites against a Stripe test-mode account instead of the emulator (see docs/billing.md)
## (STRIPE_SECRET_KEY=sk_test_… and STRIPE_PUBLISHABLE_KEY=pk_test_…: handed to the suites as STRIPE_TEST_*, which `make test` blanks)
test-billing: $(INSTALLED)
	@case "$$STRIPE_SECRET_KEY" in sk_test_*) ;; *) echo "set STRIPE_SECRET_KEY=sk_test_… (a Stripe test-mode secret key, see docs/billing.md)"; exit 2;; esac
	STRIPE_TEST_SECRET_KEY="$$STRIPE_SECRET_KEY" STRIPE_TEST_PUBLISHABLE_KEY="$$STRIPE_PUBLISHABLE_KEY" STRIPE_SECRET_KEY= STRIPE_PUBLISHABLE_KEY= vitest run --config vitest.billing.config.ts $(VITEST_ARGS)

## bench: the proxy beside the engine directly and two reference pass-throughs, budgets of DESIGN.md §4 (writes bench/results/)
bench: build
	node bench/proxy-overhead.ts

## bench-db: the read routes and usage inserts at a million deployments and twenty million usage rows, budgets of
## docs/performance.md (a fresh database on DATABASE_URL's server, else the machine's Postgres, else embedded; about 12 min at the
## default shape; BENCH_DB_SCALE=0.001 runs in a minute; settings: node bench/db-scale.ts --help; writes bench/results/)
bench-db: build
	node bench/db-scale.ts $(BENCH_DB_ARGS)

## bench-scaling: elastic deployments on the cluster simulator: scale-up reaction, cold start, scale-down under load and GPUs
## at zero, each budget against the engine's load time measured in the same run (docs/performance.md, Elastic deployments;
## about a minute; settings: the head of bench/autoscaling.ts; writes bench/results/scaling-*)
bench-scaling: build
	node bench/autoscaling.ts

## clean: remove local data (the embedded Postgres cluster)
clean:
	rm -rf .data
