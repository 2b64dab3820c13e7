# The operator image (also runs `airlock sync` Jobs): a static airlock binary, non-root 65532.
# For users with Docker (`make image`, `make e2e-kind`); hack/ builds the same image without Docker.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/airlock-dev/airlock/pkg/version.version=${VERSION} -X github.com/airlock-dev/airlock/pkg/version.commit=${COMMIT}" \
    -o /out/airlock .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/airlock /airlock
USER 65532:65532
ENTRYPOINT ["/airlock"]
