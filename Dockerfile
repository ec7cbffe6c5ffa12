# tokend: a static binary on a distroless base, run as a non-root user.
#
#   docker build -t tokend --build-arg VERSION=v1.2.3 .
#   docker run --rm -e TOKEND_DATABASE_URL=… -e TOKEND_SECRET_KEY=… -p 8080:8080 tokend
#
# Secrets may come from files instead (Docker or Kubernetes secrets):
# TOKEND_SECRET_KEY_FILE=/run/secrets/tokend_secret_key, and likewise
# TOKEND_DATABASE_URL_FILE, TOKEND_REDIS_URL_FILE, ... (tokend help).
#
# The container listens on 0.0.0.0:8080. Run `tokend migrate` once per
# release (as a job or an init container) or let serve migrate at start.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
# CGO off: a static binary that needs no libc from the runtime image.
RUN CGO_ENABLED=0 go build -trimpath -tags nomsgpack -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/ ./cmd/tokend ./cmd/tokenctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tokend /out/tokenctl /usr/local/bin/
USER nonroot:nonroot
ENV TOKEND_LISTEN=0.0.0.0:8080
EXPOSE 8080
# No shell or curl in the image: tokend asks its own /healthz. Liveness, not
# readiness: /readyz fails while the database is down, which would mark
# every instance unhealthy at once. Probe readiness from the orchestrator
# or load balancer (tokend health --ready, or GET /readyz).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/tokend", "health"]
ENTRYPOINT ["/usr/local/bin/tokend"]
CMD ["serve"]
